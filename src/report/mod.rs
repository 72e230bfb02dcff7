//! Reporters: each is a pure render of a whole [`Run`] into text. Writing
//! files or stdout is the caller's job (`main`), so several reporters can run
//! at once and none of them ever probes the machine.

pub use crate::model::{CheckResult, Run, FORMAT_VERSION};

pub mod annotations;
pub mod bounded;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod prom;
pub mod table;
pub mod text;

/// A report format: a pure function of the run.
pub trait Reporter {
    fn render(&self, run: &Run) -> String;
}

/// The report formats, each rendered by one reporter. `--format` names one
/// for stdout; `--json` and `--junit` ask for the other two by flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prom,
    Markdown,
    Html,
}

/// How the table reads; JSON and JUnit have no options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    pub color: bool,
    pub verbose: bool,
    pub quiet: bool,
    /// Wrap summaries, hints and the verdict to this many columns (None:
    /// one line each).
    pub width: Option<usize>,
}

impl Format {
    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Junit => "junit",
            Format::Prom => "prom",
            Format::Markdown => "markdown",
            Format::Html => "html",
        }
    }

    /// The report in this format: the run as [`shown`] gives it.
    pub fn render(self, run: &Run, style: Style) -> String {
        let run = &shown(run);
        match self {
            Format::Table => table::Table {
                color: style.color,
                verbose: style.verbose,
                quiet: style.quiet,
                width: style.width,
            }
            .render(run),
            Format::Json => json::Json.render(run),
            Format::Junit => junit::Junit.render(run),
            Format::Prom => prom::Prom.render(run),
            Format::Markdown => markdown::Markdown.render(run),
            Format::Html => html::Html.render(run),
        }
    }
}

/// The run a report shows: every result with its repair action resolved
/// ([`Run::with_actions`]) and every string cut to a readable length
/// ([`bounded`]).
pub fn shown(run: &Run) -> Run {
    let mut run = run.with_actions();
    bounded::cut_long_strings(&mut run);
    run
}

#[cfg(test)]
mod tests {
    /// Reporters and the model they read are pure: no file under
    /// src/report/ nor src/model.rs reaches into the probes.
    #[test]
    fn reporters_and_the_model_never_probe() {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut files = vec![std::path::PathBuf::from(format!("{src}/model.rs"))];
        for entry in std::fs::read_dir(format!("{src}/report")).expect("src/report") {
            files.push(entry.expect("a directory entry").path());
        }
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            assert!(
                !text.contains(concat!("probe", "::")),
                "{} uses a probe",
                file.display()
            );
        }
    }
}
