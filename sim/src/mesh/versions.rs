//! What each simulated node speaks and the version a session between two
//! of them runs at: the handshake's ALPN choice and each side's
//! `negotiate`, as a node's driver does (docs/design.md §13).

use amos_protocol::wire::{
    Features, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, VersionError, alpn_offer, alpn_version,
    negotiate,
};

/// What a node speaks (docs/design.md §13; a node's `AMOS_PROTOCOL` and
/// `AMOS_PROTOCOL_MIN`): the newest protocol version it offers (it offers
/// every one down to 1), the features it decodes, the oldest version it
/// accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speaks {
    pub version: u16,
    pub features: Features,
    pub min: u16,
}

impl Speaks {
    /// This release: its version, every feature it decodes.
    pub fn current() -> Speaks {
        Speaks {
            version: PROTOCOL_VERSION,
            features: Features::ALL,
            min: MIN_PROTOCOL_VERSION,
        }
    }

    /// 545333a's, the release before negotiation (`AMOS_PROTOCOL=1`):
    /// version 1, decoding what that version implies.
    pub fn v1() -> Speaks {
        Speaks {
            version: 1,
            features: Features::implied_by(1),
            min: MIN_PROTOCOL_VERSION,
        }
    }

    /// This version without the features `lacks` (`AMOS_PROTOCOL=2:HEX`):
    /// a build from before they were added.
    pub fn lacking(lacks: Features) -> Speaks {
        Speaks {
            features: Features::ALL.without(lacks),
            ..Speaks::current()
        }
    }
}

/// The version each side of a session between a dialler speaking `a` and
/// an acceptor speaking `b` runs at: the handshake's ALPN choice (the
/// acceptor's first id, newest first, that the dialler offers, as rustls
/// chooses), then each side's `negotiate` of it against what it speaks, as
/// a node's driver does. `Err`: a side refuses the other. Two sides at
/// different versions break on the first hello.
pub fn session_versions(a: Speaks, b: Speaks) -> Result<[u16; 2], VersionError> {
    let offered = alpn_offer(a.version);
    let chosen = alpn_offer(b.version)
        .into_iter()
        .find(|id| offered.contains(id))
        .and_then(|id| alpn_version(&id))
        .unwrap_or(1);
    Ok([
        negotiate(a.min, a.version, chosen)?,
        negotiate(b.min, b.version, chosen)?,
    ])
}
