//! The table report (stub: to be written).

use super::{Reporter, Run};

pub struct Table {
    pub color: bool,
    pub verbose: bool,
    pub quiet: bool,
}

impl Reporter for Table {
    fn render(&self, run: &Run) -> String {
        let mut out = String::new();
        if !self.quiet {
            for r in &run.results {
                out.push_str(&format!(
                    "{} {} {}\n",
                    r.outcome.status, r.id, r.outcome.summary
                ));
                if let Some(h) = &r.outcome.hint {
                    out.push_str(&format!("    hint: {h}\n"));
                }
            }
        }
        out.push_str(&run.verdict_line());
        out.push('\n');
        out
    }
}
