//! Authenticated store values: with a cluster token shared by every node
//! (`GPUCHECK_CLUSTER_TOKEN` or `--token-file`), every value the
//! rendezvous writes carries an HMAC-SHA256 over its key and its body, in
//! the layout the payload uses (`checks/payloads/cluster.py`, Python's
//! `hmac`): `gpucheck-hmac-sha256:<hex>\n<body>`. gpucheck itself seals
//! node 0's verdict and opens it on every other node, so the decision to
//! start CMD rests on a MAC checked here. Without a token a value is its
//! body, and anything that reaches the port can write any key.

use hmac::{Hmac, Mac};
use sha2::Sha256;

const SEAL: &str = "gpucheck-hmac-sha256:";

/// The shared secret (never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why a value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    #[error("it is not sealed with a cluster token")]
    Unsigned,
    #[error("its seal does not verify with this node's cluster token")]
    BadMac,
}

impl Token {
    /// A token from its bytes; None when empty (after a trailing newline,
    /// as `echo secret > file` leaves, is dropped).
    pub fn new(bytes: &[u8]) -> Option<Token> {
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        (!bytes.is_empty()).then(|| Token(bytes.to_vec()))
    }

    /// Hex, as the payload reads it from `GPUCHECK_CLUSTER_KEY`.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, key: &str, body: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(key.as_bytes());
        mac.update(b"\n");
        mac.update(body.as_bytes());
        mac
    }
}

/// The value stored at `key` for `body`.
pub fn seal(token: Option<&Token>, key: &str, body: &str) -> String {
    match token {
        None => body.to_string(),
        Some(t) => {
            let tag: String = t
                .mac(key, body)
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("{SEAL}{tag}\n{body}")
        }
    }
}

/// The body of the value stored at `key`, verified when this node has a
/// token (a sealed value read without one is taken as it is: this node
/// cannot check it).
pub fn open<'a>(token: Option<&Token>, key: &str, value: &'a str) -> Result<&'a str, Unsealed> {
    let sealed = value
        .strip_prefix(SEAL)
        .and_then(|rest| rest.split_once('\n'));
    match (token, sealed) {
        (None, Some((_, body))) => Ok(body),
        (None, None) => Ok(value),
        (Some(_), None) => Err(Unsealed::Unsigned),
        (Some(t), Some((tag, body))) => {
            let bytes = decode_hex(tag).ok_or(Unsealed::BadMac)?;
            t.mac(key, body)
                .verify_slice(&bytes)
                .map(|_| body)
                .map_err(|_| Unsealed::BadMac)
        }
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_with_the_token_and_only_at_its_key() {
        let t = Token::new(b"s3cret\n").unwrap();
        let v = seal(Some(&t), "gpucheck/r1/verdict", "{\"exit_code\":0}");
        assert!(v.starts_with("gpucheck-hmac-sha256:"), "{v}");
        assert_eq!(
            open(Some(&t), "gpucheck/r1/verdict", &v),
            Ok("{\"exit_code\":0}")
        );
        assert_eq!(
            open(Some(&t), "gpucheck/r2/verdict", &v),
            Err(Unsealed::BadMac)
        );
        let other = Token::new(b"other").unwrap();
        assert_eq!(
            open(Some(&other), "gpucheck/r1/verdict", &v),
            Err(Unsealed::BadMac)
        );
        let forged = v.replace("\"exit_code\":0", "\"exit_code\":1");
        assert_eq!(
            open(Some(&t), "gpucheck/r1/verdict", &forged),
            Err(Unsealed::BadMac)
        );
        assert_eq!(
            open(Some(&t), "k", "{\"exit_code\":0}"),
            Err(Unsealed::Unsigned)
        );
    }

    #[test]
    fn matches_python_hmac_and_reads_plain_values_without_a_token() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"key",b"a/b\n{}",hashlib.sha256).hexdigest())'
        let t = Token::new(b"key").unwrap();
        assert_eq!(
            seal(Some(&t), "a/b", "{}"),
            "gpucheck-hmac-sha256:db730bae987ff804f778ee67a808262961270759b08913832981692502d838bc\n{}"
        );
        assert_eq!(open(None, "k", "{}"), Ok("{}"));
        assert_eq!(seal(None, "k", "{}"), "{}");
        assert!(Token::new(b"\n").is_none());
        assert_eq!(Token::new(b"ab").unwrap().hex(), "6162");
        assert_eq!(format!("{:?}", t), "Token(..)");
    }
}
