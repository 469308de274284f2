//! The mesh key: a 32-byte secret shared by the nodes of one mesh, used to
//! encrypt bundle files ([`crate::bundle`]).
//!
//! Text form: `amosk1-` followed by lowercase base32 (no padding) of the 32
//! key bytes and a 4-byte checksum (the first 4 bytes of
//! `blake3::derive_key("amos mesh key v1 checksum", key)`), 58 characters
//! after the prefix. Parsing is strict: the prefix, the exact length and the
//! checksum must all be right, so a mistyped or truncated key is refused
//! instead of silently producing bundles nobody can open.
//!
//! Invariant: the key is never printed by `Debug` and never appears in an
//! error message; only its [`MeshKey::fingerprint`] may be shown.

use std::fmt;
use std::str::FromStr;

use crate::ProtocolError;
use crate::id::{base32_decode, base32_encode};

/// Prefix of the text form.
pub const MESH_KEY_PREFIX: &str = "amosk1-";
const CHECKSUM_LEN: usize = 4;
/// Characters after the prefix: base32 of 32 + 4 bytes.
const BODY_CHARS: usize = ((32 + CHECKSUM_LEN) * 8).div_ceil(5);
const CHECKSUM_CONTEXT: &str = "amos mesh key v1 checksum";
const FINGERPRINT_CONTEXT: &str = "amos mesh key v1 fingerprint";

/// A mesh's shared secret. `Debug` shows only a fingerprint.
#[derive(Clone)]
pub struct MeshKey([u8; 32]);

impl MeshKey {
    /// The key with these 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        MeshKey(bytes)
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A new key from 32 bytes of fresh randomness supplied by the caller.
    pub fn generate(random: [u8; 32]) -> Self {
        MeshKey(random)
    }

    /// A short, non-secret name for the key (12 base32 characters), for
    /// checking that two nodes hold the same key without showing it.
    pub fn fingerprint(&self) -> String {
        let h = blake3::derive_key(FINGERPRINT_CONTEXT, &self.0);
        let mut s = base32_encode(&h[..8]);
        s.truncate(12);
        s
    }

    fn checksum(&self) -> [u8; CHECKSUM_LEN] {
        let h = blake3::derive_key(CHECKSUM_CONTEXT, &self.0);
        let mut out = [0u8; CHECKSUM_LEN];
        out.copy_from_slice(&h[..CHECKSUM_LEN]);
        out
    }
}

impl PartialEq for MeshKey {
    /// Compares without an early exit.
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for MeshKey {}

impl fmt::Debug for MeshKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MeshKey(fingerprint {})", self.fingerprint())
    }
}

impl fmt::Display for MeshKey {
    /// The full secret text form (`amosk1-…`): for key files and for pasting
    /// onto another node, never for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = Vec::with_capacity(32 + CHECKSUM_LEN);
        raw.extend_from_slice(&self.0);
        raw.extend_from_slice(&self.checksum());
        write!(f, "{MESH_KEY_PREFIX}{}", base32_encode(&raw))
    }
}

impl FromStr for MeshKey {
    type Err = ProtocolError;

    /// Parse the text form. Error messages never repeat the input (it is a secret).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let body = match s.get(..MESH_KEY_PREFIX.len()) {
            Some(p) if p.eq_ignore_ascii_case(MESH_KEY_PREFIX) => &s[MESH_KEY_PREFIX.len()..],
            _ => {
                return Err(ProtocolError::malformed(format!(
                    "malformed mesh key: it must start with {MESH_KEY_PREFIX}"
                )));
            }
        };
        if body.len() != BODY_CHARS {
            return Err(ProtocolError::malformed(format!(
                "malformed mesh key: expected {BODY_CHARS} characters after {MESH_KEY_PREFIX}, got {}",
                body.len()
            )));
        }
        let raw = base32_decode(body).map_err(|_| {
            ProtocolError::malformed("malformed mesh key: not base32 (a-z, 2-7)".to_owned())
        })?;
        if raw.len() != 32 + CHECKSUM_LEN {
            return Err(ProtocolError::malformed(
                "malformed mesh key: wrong length".to_owned(),
            ));
        }
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&raw[..32]);
        let key = MeshKey(bytes);
        if key.checksum()[..] != raw[32..] {
            return Err(ProtocolError::malformed(
                "malformed mesh key: checksum mismatch (mistyped or truncated?)".to_owned(),
            ));
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip_and_strictness() {
        let key = MeshKey::generate([0xa5; 32]);
        let text = key.to_string();
        assert!(text.starts_with(MESH_KEY_PREFIX));
        assert_eq!(text.len(), MESH_KEY_PREFIX.len() + BODY_CHARS);
        assert_eq!(text, text.to_lowercase());
        assert_eq!(text.parse::<MeshKey>().unwrap(), key);
        assert_eq!(
            format!("  {}\n", text.to_uppercase())
                .parse::<MeshKey>()
                .unwrap(),
            key
        );

        // Every single-character change is refused (checksum or alphabet).
        let body: Vec<char> = text[MESH_KEY_PREFIX.len()..].chars().collect();
        for i in 0..body.len() {
            for c in ['a', 'q', '7', '1'] {
                if body[i] == c {
                    continue;
                }
                let mut b = body.clone();
                b[i] = c;
                let s: String = b.into_iter().collect();
                let t = format!("{MESH_KEY_PREFIX}{s}");
                assert!(t.parse::<MeshKey>().is_err(), "{i} {c}");
            }
        }
        // Wrong prefix, truncated, extended.
        assert!(
            text.replacen("amosk1", "amosk2", 1)
                .parse::<MeshKey>()
                .is_err()
        );
        assert!(text[..text.len() - 1].parse::<MeshKey>().is_err());
        assert!(format!("{text}a").parse::<MeshKey>().is_err());
        assert!("".parse::<MeshKey>().is_err());
        assert!("amosk1-".parse::<MeshKey>().is_err());
    }

    #[test]
    fn debug_and_errors_never_show_the_key() {
        let key = MeshKey::from_bytes([0x11; 32]);
        let text = key.to_string();
        let body = &text[MESH_KEY_PREFIX.len()..];
        let dbg = format!("{key:?}");
        assert!(!dbg.contains(body) && !dbg.contains(&body[..16]), "{dbg}");
        assert!(!dbg.contains("17, 17"), "{dbg}");
        assert!(dbg.contains(&key.fingerprint()));
        let mut bad = text.clone();
        bad.pop();
        bad.push(if text.ends_with('a') { 'b' } else { 'a' });
        let err = bad.parse::<MeshKey>().unwrap_err().to_string();
        assert!(!err.contains(&body[..16]), "{err}");
    }

    #[test]
    fn fingerprints_differ() {
        let a = MeshKey::from_bytes([1; 32]);
        let b = MeshKey::from_bytes([2; 32]);
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().len(), 12);
        assert_ne!(a, b);
        assert_eq!(a, a.clone());
    }
}
