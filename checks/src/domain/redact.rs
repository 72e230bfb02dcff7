//! Secrets never reach a report: CI logs keep reports forever. The value of
//! an environment variable whose name says it holds a secret is replaced by
//! [`REDACTED`], and so is the password (or token) in an address's
//! credentials.

/// What a redacted secret reads as.
pub const REDACTED: &str = "***";

/// Parts of a variable name that say its value is a secret.
const SECRET_MARKERS: &[&str] = &["TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Names that carry a marker but hold no secret: NCCL_IB_PKEY is an
/// InfiniBand partition key, a 16-bit number (NCCL's Environment Variables
/// documentation).
const NOT_SECRETS: &[&str] = &["NCCL_IB_PKEY"];

/// Whether the variable `name` looks like it holds a secret (any of TOKEN,
/// SECRET, KEY, PASSWORD, PASSWD, CREDENTIAL in it, any case).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !NOT_SECRETS.contains(&upper.as_str()) && SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// `value` as a report may show it: [`REDACTED`] when `name` looks like it
/// holds a secret (an empty value stays empty: there is nothing to hide, and
/// "set but empty" is worth seeing).
pub fn redact_value(name: &str, value: &str) -> String {
    if is_secret_name(name) && !value.is_empty() {
        REDACTED.to_string()
    } else {
        value.to_string()
    }
}

/// An address with the secret in its credentials replaced:
/// `user:secret@host` -> `user:***@host`, `tcp://token@host:29500` ->
/// `tcp://***@host:29500`. An address without credentials is returned as is.
pub fn redact_url_credentials(addr: &str) -> String {
    let (scheme, rest) = match addr.find("://") {
        Some(i) => addr.split_at(i + 3),
        None => ("", addr),
    };
    // The credentials end at the last '@' of the authority: before any path
    // of a URL; a bare `user:pass@host` has no path, so a '/' there is part
    // of the password.
    let authority_end = if scheme.is_empty() {
        rest.len()
    } else {
        rest.find(['/', '?', '#']).unwrap_or(rest.len())
    };
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return addr.to_string();
    };
    let userinfo = match userinfo.split_once(':') {
        Some((user, _secret)) => format!("{user}:{REDACTED}"),
        None => REDACTED.to_string(),
    };
    format!("{scheme}{userinfo}@{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_say_secret_are_redacted() {
        for name in [
            "NCCL_IB_PASSWORD",
            "NCCL_PASSWD",
            "NCCL_TOKEN",
            "NCCL_API_KEY",
            "NCCL_CLIENT_SECRET",
            "nccl_credentials_file",
        ] {
            assert!(is_secret_name(name), "{name}");
            assert_eq!(redact_value(name, "hunter2"), "***", "{name}");
        }
        for name in ["NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_IB_PKEY"] {
            assert!(!is_secret_name(name), "{name}");
            assert_eq!(redact_value(name, "0x8001"), "0x8001");
        }
        assert_eq!(redact_value("NCCL_TOKEN", ""), "");
    }

    #[test]
    fn credentials_in_addresses_are_redacted() {
        assert_eq!(redact_url_credentials("user:SECRET@host"), "user:***@host");
        assert_eq!(
            redact_url_credentials("tcp://user:pw@node1:29500/x?y"),
            "tcp://user:***@node1:29500/x?y"
        );
        assert_eq!(
            redact_url_credentials("https://TOKEN@example.com"),
            "https://***@example.com"
        );
        // A password with an '@' in it is still hidden whole.
        assert_eq!(redact_url_credentials("u:p@ss@host"), "u:***@host");
        assert_eq!(redact_url_credentials("u:pa/ss@host"), "u:***@host");
        for plain in ["10.0.0.1", "node1:29500", "[::1]:29500", "tcp://host/a@b"] {
            assert_eq!(redact_url_credentials(plain), plain);
        }
    }
}
