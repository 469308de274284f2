//! What this node speaks on the wire — its session protocol version and the
//! features it decodes (docs/design.md §13) — and which version a connection
//! negotiated (its ALPN id).
//!
//! By default a node speaks [`PROTOCOL_VERSION`] with every feature it
//! decodes. `AMOS_PROTOCOL` narrows that, read once per process: `1` speaks
//! as 545333a did (only ALPN `amos/1`, the old `Hello`: pins a mesh to
//! version 1 while it is upgraded, and lets a test stand in for an old
//! node), `2:HEX` speaks version 2 announcing the feature bits `HEX` (a test
//! emulating a peer that lacks a feature). A value that is not one of these
//! is ignored with a warning. Never widens what this code can decode.
//! `AMOS_PROTOCOL_MIN=N` raises the oldest version a peer may speak (at
//! most the version spoken): an older peer is refused in one line, as one
//! older than [`MIN_PROTOCOL_VERSION`] always is (a mesh done upgrading
//! keeps stragglers out; a test's node that refuses).
//!
//! Boundary: no socket, no session; the TLS configs and the session driver
//! read [`speaks`].

use std::sync::OnceLock;

use amos_protocol::wire::{
    FIRST_PROTOCOL_VERSION, Features, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, alpn_version,
};
use quinn::Connection;
use tracing::warn;

/// The environment variable that narrows what this node speaks.
pub const ENV: &str = "AMOS_PROTOCOL";
/// The environment variable that raises the oldest version accepted.
pub const MIN_ENV: &str = "AMOS_PROTOCOL_MIN";

/// What this node speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speaks {
    /// The newest protocol version offered.
    pub version: u16,
    /// The features announced (from version 2 on).
    pub features: Features,
    /// The oldest version a peer may speak.
    pub min: u16,
}

impl Default for Speaks {
    fn default() -> Self {
        Speaks {
            version: PROTOCOL_VERSION,
            features: Features::ALL,
            min: MIN_PROTOCOL_VERSION,
        }
    }
}

/// Parse an `AMOS_PROTOCOL` value: `N` or `N:HEX`, N between the oldest
/// version still accepted and ours; the features never more than ours.
pub fn parse(text: &str) -> Option<Speaks> {
    let (v, f) = match text.split_once(':') {
        Some((v, f)) => (v, Some(f)),
        None => (text, None),
    };
    let version: u16 = v.trim().parse().ok()?;
    if !(MIN_PROTOCOL_VERSION.max(FIRST_PROTOCOL_VERSION)..=PROTOCOL_VERSION).contains(&version) {
        return None;
    }
    let features = match f {
        Some(hex) => Features(u64::from_str_radix(hex.trim(), 16).ok()? & Features::ALL.0),
        None if version >= 2 => Features::ALL,
        None => Features::implied_by(version),
    };
    Some(Speaks {
        version,
        features,
        min: MIN_PROTOCOL_VERSION,
    })
}

/// Parse an `AMOS_PROTOCOL_MIN` value for a node speaking up to `version`:
/// a version between [`MIN_PROTOCOL_VERSION`] and `version`.
pub fn parse_min(text: &str, version: u16) -> Option<u16> {
    let min: u16 = text.trim().parse().ok()?;
    (MIN_PROTOCOL_VERSION..=version)
        .contains(&min)
        .then_some(min)
}

/// What this process speaks: the default, or `AMOS_PROTOCOL`'s narrowing.
pub fn speaks() -> Speaks {
    static SPEAKS: OnceLock<Speaks> = OnceLock::new();
    *SPEAKS.get_or_init(|| {
        let mut speaks = match std::env::var(ENV) {
            Err(_) => Speaks::default(),
            Ok(v) => parse(&v).unwrap_or_else(|| {
                warn!("{ENV}={v:?} is not a version this node speaks (1..={PROTOCOL_VERSION}[:HEX]): ignored");
                Speaks::default()
            }),
        };
        if let Ok(v) = std::env::var(MIN_ENV) {
            match parse_min(&v, speaks.version) {
                Some(min) => speaks.min = min,
                None => warn!(
                    "{MIN_ENV}={v:?} is not a version between {MIN_PROTOCOL_VERSION} and {}: ignored",
                    speaks.version
                ),
            }
        }
        speaks
    })
}

/// The protocol version a connection's handshake chose (its ALPN id), if it
/// names one.
pub fn negotiated(connection: &Connection) -> Option<u16> {
    connection
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol)
        .and_then(|p| alpn_version(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_setting_narrows_and_never_widens() {
        assert_eq!(parse("2"), Some(Speaks::default()));
        assert_eq!(
            parse("1"),
            Some(Speaks {
                version: 1,
                features: Features::implied_by(1),
                min: MIN_PROTOCOL_VERSION,
            })
        );
        assert_eq!(
            parse("2:0"),
            Some(Speaks {
                version: 2,
                features: Features::NONE,
                min: MIN_PROTOCOL_VERSION,
            })
        );
        assert_eq!(parse_min("2", 2), Some(2));
        assert_eq!(parse_min("1", 2), Some(1));
        assert_eq!(parse_min("2", 1), None, "never above what is spoken");
        assert_eq!(parse_min("0", 2), None);
        assert_eq!(parse_min("x", 2), None);
        // Bits this code does not decode are not announced.
        assert_eq!(parse("2:ffff").map(|s| s.features), Some(Features::ALL));
        for junk in ["", "0", "3", "x", "2:zz", "-1", "65536"] {
            assert_eq!(parse(junk), None, "{junk:?}");
        }
    }
}
