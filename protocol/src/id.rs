//! Identifiers: node ids (ed25519 public keys), memory ids (UUIDv7) and the
//! user-chosen slugs that name agents, teams, projects and memory types.

use std::fmt;
use std::str::FromStr;

use bincode::{Decode, Encode};
use data_encoding::{Encoding, Specification};

use crate::ProtocolError;

fn base32_lower() -> Encoding {
    let mut spec = Specification::new();
    spec.symbols.push_str("abcdefghijklmnopqrstuvwxyz234567");
    // The specification is a constant and always valid.
    #[allow(clippy::expect_used)]
    spec.encoding().expect("valid base32 spec")
}

/// Lowercase RFC 4648 base32 without padding (the alphabet NodeIds are shown in).
pub fn base32_encode(bytes: &[u8]) -> String {
    base32_lower().encode(bytes)
}

/// Inverse of [`base32_encode`]; accepts upper case too.
pub fn base32_decode(text: &str) -> Result<Vec<u8>, ProtocolError> {
    base32_lower()
        .decode(text.to_ascii_lowercase().as_bytes())
        .map_err(|e| ProtocolError::malformed(format!("bad base32: {e}")))
}

/// A node's identity: its ed25519 public key. Self-certifying.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct NodeId(pub [u8; 32]);

impl NodeId {
    /// The first 10 characters of the base32 form, for humans.
    pub fn short(&self) -> String {
        let mut s = self.to_string();
        s.truncate(10);
        s
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base32_encode(&self.0))
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

impl FromStr for NodeId {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = base32_decode(s.trim())
            .map_err(|_| ProtocolError::malformed(format!("malformed node id {s:?}")))?;
        let arr: [u8; 32] = bytes.try_into().map_err(|_| {
            ProtocolError::malformed(format!("malformed node id {s:?}: wrong length"))
        })?;
        Ok(NodeId(arr))
    }
}

/// A memory's id: 128-bit UUIDv7 (time-ordered, random), made at its origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct MemoryId(pub [u8; 16]);

impl MemoryId {
    /// A new id from the creation time and 10 random bytes (supplied by the caller).
    pub fn new(unix_ms: u64, random: [u8; 10]) -> Self {
        MemoryId(
            *uuid::Builder::from_unix_timestamp_millis(unix_ms, &random)
                .as_uuid()
                .as_bytes(),
        )
    }

    /// The id's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The id whose bytes these are, if there are exactly 16.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(MemoryId)
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        uuid::Uuid::from_bytes(self.0).hyphenated().fmt(f)
    }
}

impl fmt::Debug for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemoryId({self})")
    }
}

impl FromStr for MemoryId {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s.trim())
            .map(|u| MemoryId(*u.as_bytes()))
            .map_err(|_| ProtocolError::malformed(format!("malformed memory id {s:?}")))
    }
}

/// A user-chosen name, global across the mesh: `[a-z0-9][a-z0-9._-]{0,63}`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Slug(String);

impl Slug {
    /// Longest slug, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Parse a slug (lowercase ASCII letters, digits, `.`, `_`, `-`; at most [`Slug::MAX_LEN`]); `what` names the value in the error.
    pub fn parse(what: &str, s: &str) -> Result<Self, ProtocolError> {
        if Self::is_valid(s) {
            Ok(Slug(s.to_owned()))
        } else {
            Err(ProtocolError::malformed(format!(
                "malformed {what} {s:?}: use 1-64 characters from a-z 0-9 . _ - starting with a letter or digit"
            )))
        }
    }

    /// Whether `s` is a valid slug.
    pub fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= Self::MAX_LEN
            && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
    }

    /// The slug's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
        pub struct $name(Slug);

        impl $name {
            /// Parse and validate.
            pub fn parse(s: &str) -> Result<Self, ProtocolError> {
                Slug::parse($what, s).map($name)
            }
            /// The slug's text.
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
            /// Whether the decoded value obeys the slug rule.
            pub fn is_valid(&self) -> bool {
                Slug::is_valid(self.0.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ProtocolError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0.as_str())
            }
        }
    };
}

slug_id!(
    /// An agent id (`claude-1`, `hermes.ops`).
    AgentId,
    "agent id"
);
/// How many characters of its origin's NodeId text (base32) a qualified
/// team or project id carries after the `@`: 12, that is 60 bits of the
/// origin's public key (docs/design.md §3).
pub const QUALIFIER_LEN: usize = 12;

/// The qualifier a scope created by `origin` carries: the first
/// [`QUALIFIER_LEN`] characters of its NodeId text.
pub fn qualifier_of(origin: &NodeId) -> String {
    let mut s = origin.to_string();
    s.truncate(QUALIFIER_LEN);
    s
}

/// Whether `q` is a well-formed qualifier: exactly [`QUALIFIER_LEN`]
/// characters of the lowercase base32 alphabet.
fn is_qualifier(q: &str) -> bool {
    q.len() == QUALIFIER_LEN
        && q.bytes()
            .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c))
}

/// A team or project id: a legacy slug (`apollo`, made before ids were
/// qualified, still valid and meaning the team its origin created), or a
/// qualified id `NAME@QUALIFIER` (`apollo@3f2a…`): a slug, `@`, and the
/// first [`QUALIFIER_LEN`] characters of the creating node's NodeId. Two
/// nodes creating `apollo` independently make two distinct ids; a record's
/// qualifier must name its own origin (`Fact::validate`). Encoded as its
/// text, as a slug was.
macro_rules! org_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
        pub struct $name(String);

        impl $name {
            /// Parse and validate: a slug, or a slug `@` a qualifier.
            pub fn parse(s: &str) -> Result<Self, ProtocolError> {
                if Self::valid_text(s) {
                    Ok($name(s.to_owned()))
                } else {
                    Err(ProtocolError::malformed(format!(
                        "malformed {} {s:?}: use 1-64 characters from a-z 0-9 . _ - starting with a letter or digit (or NAME@{} characters of its origin's node id)",
                        $what, QUALIFIER_LEN
                    )))
                }
            }
            /// The id a scope named `name` gets when `origin` creates it:
            /// `name@` the origin's qualifier. `name` must be a slug.
            pub fn qualified(name: &str, origin: &NodeId) -> Result<Self, ProtocolError> {
                Slug::parse($what, name)?;
                Ok($name(format!("{name}@{}", qualifier_of(origin))))
            }
            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
            /// The display name: the part before `@` (the whole id of a legacy one).
            pub fn name(&self) -> &str {
                self.0.split_once('@').map_or(self.0.as_str(), |(n, _)| n)
            }
            /// The qualifier after `@`, if the id is qualified.
            pub fn qualifier(&self) -> Option<&str> {
                self.0.split_once('@').map(|(_, q)| q)
            }
            /// Whether the id is qualified (`NAME@QUALIFIER`), not legacy.
            pub fn is_qualified(&self) -> bool {
                self.qualifier().is_some()
            }
            /// Whether a record of this id may name `origin` as its origin:
            /// always for a legacy id; for a qualified one, only the node
            /// whose NodeId text begins with the qualifier.
            pub fn admits_origin(&self, origin: &NodeId) -> bool {
                self.qualifier().is_none_or(|q| q == qualifier_of(origin))
            }
            /// Whether the decoded value is a valid id.
            pub fn is_valid(&self) -> bool {
                Self::valid_text(&self.0)
            }
            fn valid_text(s: &str) -> bool {
                match s.split_once('@') {
                    None => Slug::is_valid(s),
                    Some((n, q)) => Slug::is_valid(n) && is_qualifier(q),
                }
            }
        }

        impl FromStr for $name {
            type Err = ProtocolError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

org_id!(
    /// A team id (`apollo@3f2a…`, or a legacy `apollo`).
    TeamId,
    "team id"
);
org_id!(
    /// A project id (`apollo-ui@3f2a…`, or a legacy `apollo-ui`).
    ProjectId,
    "project id"
);
slug_id!(
    /// A memory type (`note`, `decision`, `procedure`, …): free-form but a slug.
    MemoryType,
    "memory type"
);
slug_id!(
    /// A link relation (`related`, `supports`, `contradicts`, …).
    Relation,
    "relation"
);

impl Default for MemoryType {
    fn default() -> Self {
        MemoryType(Slug("note".to_owned()))
    }
}

impl Default for Relation {
    fn default() -> Self {
        Relation(Slug("related".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_rules() {
        for ok in ["a", "0", "apollo", "agent-07", "a.b_c-d", &"x".repeat(64)] {
            assert!(Slug::is_valid(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "A",
            "a b",
            "a:b",
            "é",
            &"x".repeat(65),
            "a/b",
        ] {
            assert!(!Slug::is_valid(bad), "{bad}");
        }
    }

    #[test]
    fn node_id_text_round_trip() {
        let id = NodeId([7; 32]);
        let s = id.to_string();
        assert_eq!(s.len(), 52);
        assert_eq!(s, s.to_lowercase());
        assert_eq!(s.parse::<NodeId>().unwrap(), id);
        assert_eq!(id.short().len(), 10);
        assert!("abc".parse::<NodeId>().is_err());
    }

    #[test]
    fn org_ids_are_legacy_slugs_or_qualified_by_their_origin() {
        let origin = NodeId([7; 32]);
        let other = NodeId([8; 32]);
        let q = TeamId::qualified("zeus", &origin).unwrap();
        assert_eq!(q.name(), "zeus");
        assert_eq!(q.qualifier().unwrap().len(), QUALIFIER_LEN);
        assert!(origin.to_string().starts_with(q.qualifier().unwrap()));
        assert!(q.is_qualified() && q.is_valid());
        assert_eq!(TeamId::parse(q.as_str()).unwrap(), q);
        assert!(q.admits_origin(&origin));
        assert!(!q.admits_origin(&other));
        assert_ne!(q, TeamId::qualified("zeus", &other).unwrap());
        let legacy = TeamId::parse("zeus").unwrap();
        assert!(!legacy.is_qualified() && legacy.admits_origin(&other));
        assert_eq!(legacy.name(), "zeus");
        for bad in [
            "zeus@",
            "zeus@abc",
            "zeus@ABCDEFGHIJKL",
            "zeus@abcdefghijk1",
            "zeus@abcdefghijklm",
            "@abcdefghijkl",
            "Zeus@abcdefghijkl",
            "zeus@abcdefghijkl@abcdefghijkl",
        ] {
            assert!(TeamId::parse(bad).is_err(), "{bad}");
            assert!(ProjectId::parse(bad).is_err(), "{bad}");
        }
        assert!(TeamId::qualified("a@b", &origin).is_err());
        assert!(ProjectId::parse("ui@abcdefgh2345").is_ok());
        // Encoded as its text, as the slug it replaced.
        let a = crate::codec::encode(&legacy);
        let b = crate::codec::encode(&Slug::parse("team id", "zeus").unwrap());
        assert_eq!(a, b);
    }

    #[test]
    fn memory_id_is_time_ordered() {
        let a = MemoryId::new(1_000, [0xff; 10]);
        let b = MemoryId::new(1_001, [0; 10]);
        assert!(a < b);
        assert_eq!(a.to_string().parse::<MemoryId>().unwrap(), a);
        assert!("not-a-uuid".parse::<MemoryId>().is_err());
    }
}
