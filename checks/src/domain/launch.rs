//! What torchrun and torch.distributed assume about the launch: default
//! master address and port, and how MASTER_PORT is read.

use crate::domain::text::quote_value;

/// torchrun's default --master-port (torch.distributed.run).
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// What MASTER_ADDR means when unset for the port check: torchrun
/// --standalone and single-node runs rendezvous on this machine.
pub const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";

/// MASTER_PORT as a port number: an integer 1-65535. torch reads it with
/// Python's int(), which ignores surrounding whitespace; 0 would make the
/// store pick a random port the other ranks cannot know.
pub fn parse_master_port(raw: &str) -> Result<u16, String> {
    match raw.trim().parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        Ok(_) | Err(_) => Err(format!(
            "MASTER_PORT={} is not a port number (an integer 1-65535)",
            quote_value(raw)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_port_is_an_integer_from_1_to_65535() {
        assert_eq!(parse_master_port("29500"), Ok(29500));
        assert_eq!(parse_master_port("1"), Ok(1));
        assert_eq!(parse_master_port("65535"), Ok(65535));
        assert_eq!(parse_master_port(" 29500\n"), Ok(29500));
        for bad in ["0", "65536", "-1", "abc", "", "29500x", "2.9e4", "0x7530"] {
            assert!(parse_master_port(bad).is_err(), "{bad:?} accepted");
        }
    }
}
