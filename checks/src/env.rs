//! The env checks (stubs, to be written).
use crate::{Check, Context, Outcome, Profile};

pub struct CudaVisibleDevices;
impl Check for CudaVisibleDevices {
    fn id(&self) -> &'static str {
        "env.cuda_visible_devices"
    }
    fn title(&self) -> &'static str {
        "env.cuda_visible_devices (stub)"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub"
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        Outcome::skip("not implemented yet")
    }
}

pub struct Torchrun;
impl Check for Torchrun {
    fn id(&self) -> &'static str {
        "env.torchrun"
    }
    fn title(&self) -> &'static str {
        "env.torchrun (stub)"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub stub"
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        Outcome::skip("not implemented yet")
    }
}
