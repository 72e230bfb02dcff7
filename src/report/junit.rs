//! The JUnit XML report (stub: to be written).

use super::{Reporter, Run};

pub struct Junit;

impl Reporter for Junit {
    fn render(&self, _run: &Run) -> String {
        String::new()
    }
}
