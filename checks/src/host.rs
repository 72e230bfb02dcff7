//! The host checks (stubs, to be written).
use crate::{Check, Context, Outcome, Profile};

pub struct Devices;
impl Check for Devices {
    fn id(&self) -> &'static str {
        "host.devices"
    }
    fn title(&self) -> &'static str {
        "host.devices (stub)"
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

pub struct Shm;
impl Check for Shm {
    fn id(&self) -> &'static str {
        "host.shm"
    }
    fn title(&self) -> &'static str {
        "host.shm (stub)"
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

pub struct Limits;
impl Check for Limits {
    fn id(&self) -> &'static str {
        "host.limits"
    }
    fn title(&self) -> &'static str {
        "host.limits (stub)"
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
