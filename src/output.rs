//! Where the reports go. The one place that turns `--format`, `--json` and
//! `--junit` into outputs, before any check runs: at most one report on the
//! main stream (stdout, or stderr under `exec`), never two reports on one
//! file. Writing them is the last step of a run.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::report::{Format, Run, Style};

/// A report file, opened before the checks run.
pub struct ReportFile {
    path: PathBuf,
    file: File,
}

/// Every report of a run: exactly one on the main stream, the rest in files.
pub struct Outputs {
    stream: Format,
    files: Vec<(Format, ReportFile)>,
}

/// The flag that asks for `format` in a file (`--json`).
fn flag(format: Format) -> String {
    format!("--{}", format.name())
}

/// Plan the outputs: `stream` is `--format`, `files` the formats asked for by
/// flag with their paths (`-` for the main stream). The error is the one-line
/// usage error to show.
pub fn plan(stream: Format, files: &[(Format, Option<&Path>)]) -> Result<Outputs, String> {
    let asked: Vec<(Format, &Path)> = files
        .iter()
        .filter_map(|(f, p)| p.map(|p| (*f, p)))
        .collect();
    let on_stream: Vec<Format> = asked
        .iter()
        .filter(|(_, p)| *p == Path::new("-"))
        .map(|(f, _)| *f)
        .collect();
    let stream = match on_stream.as_slice() {
        [] => stream,
        [one] if stream == Format::Table || stream == *one => *one,
        [one] => {
            return Err(format!(
                "--format {} and {} - both ask for stdout; write one of them to a file",
                stream.name(),
                flag(*one)
            ))
        }
        [a, b, ..] => {
            return Err(format!(
                "{} - and {} - both ask for stdout; write one of them to a file",
                flag(*a),
                flag(*b)
            ))
        }
    };
    let mut opened: Vec<(Format, ReportFile)> = Vec::new();
    for (format, path) in asked.into_iter().filter(|(_, p)| *p != Path::new("-")) {
        let file = open(format, path)?;
        if let Some((other, o)) = opened.iter().find(|(_, o)| same_file(&o.file, &file.file)) {
            return Err(format!(
                "{} and {} both name {}; give each report its own file",
                flag(*other),
                flag(format),
                o.path.display()
            ));
        }
        opened.push((format, file));
    }
    Ok(Outputs {
        stream,
        files: opened,
    })
}

fn open(format: Format, path: &Path) -> Result<ReportFile, String> {
    let what = match format {
        Format::Table => "table",
        Format::Json => "JSON",
        Format::Junit => "JUnit",
    };
    match File::create(path) {
        Ok(file) => Ok(ReportFile {
            path: path.to_path_buf(),
            file,
        }),
        Err(e) => Err(format!(
            "cannot write the {what} report to {}: {e}",
            path.display()
        )),
    }
}

/// True when two open files are the same file (`--json r --junit ./r`):
/// both reports would overwrite each other.
fn same_file(a: &File, b: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        // Character devices (/dev/null, /dev/stderr on a tty) take any
        // number of writers.
        (Ok(ma), Ok(mb)) => ma.is_file() && ma.dev() == mb.dev() && ma.ino() == mb.ino(),
        _ => false,
    }
}

impl Outputs {
    /// The main stream's report.
    pub fn stream_text(&self, run: &Run, style: Style) -> String {
        self.stream.render(run, style)
    }

    /// Write the file reports; the error names the file that failed.
    pub fn write_files(self, run: &Run) -> Result<(), String> {
        for (format, mut target) in self.files {
            let text = format.render(run, Style::default());
            target
                .file
                .write_all(text.as_bytes())
                .and_then(|_| target.file.flush())
                .map_err(|e| format!("cannot write {}: {e}", target.path.display()))?;
        }
        Ok(())
    }
}
