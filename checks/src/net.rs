//! The net checks (stubs, to be written).
use crate::{Check, Context, Outcome, Profile};

pub struct Loopback;
impl Check for Loopback {
    fn id(&self) -> &'static str {
        "net.loopback"
    }
    fn title(&self) -> &'static str {
        "net.loopback (stub)"
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

pub struct MasterAddr;
impl Check for MasterAddr {
    fn id(&self) -> &'static str {
        "net.master_addr"
    }
    fn title(&self) -> &'static str {
        "net.master_addr (stub)"
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

pub struct MasterPort;
impl Check for MasterPort {
    fn id(&self) -> &'static str {
        "net.master_port"
    }
    fn title(&self) -> &'static str {
        "net.master_port (stub)"
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
