//! Canonical encoding: bincode 2, standard configuration, with a size limit
//! checked before allocation and trailing bytes refused.
//!
//! The versioned wire forms live here ([`WireFact`]); domain types may change,
//! the format only with a version bump and a test vector.

use bincode::{Decode, Encode};

use crate::{ProtocolError, SignedFact};

/// Largest encoded fact accepted from outside.
pub const MAX_FACT_BYTES: usize = 1 << 20;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FACT_BYTES>()
}

/// Encode canonically.
pub fn encode<T: Encode>(value: &T) -> Vec<u8> {
    // Encoding into a Vec only fails past the size limit, which our own
    // values never reach (they are validated first); an empty vector then
    // fails every later decode and signature check.
    bincode::encode_to_vec(value, config()).unwrap_or_default()
}

/// Decode exactly `bytes` (no trailing garbage) within the size limit.
pub fn decode<T: Decode<()>>(what: &'static str, bytes: &[u8]) -> Result<T, ProtocolError> {
    if bytes.len() > MAX_FACT_BYTES {
        return Err(ProtocolError::TooLarge {
            what,
            size: bytes.len(),
            limit: MAX_FACT_BYTES,
        });
    }
    let (value, used) =
        bincode::decode_from_slice(bytes, config()).map_err(|e| ProtocolError::Decode {
            what,
            reason: e.to_string(),
        })?;
    if used != bytes.len() {
        return Err(ProtocolError::Decode {
            what,
            reason: format!("{} trailing bytes", bytes.len() - used),
        });
    }
    Ok(value)
}

/// Decode like [`decode`], and refuse any bytes that are not exactly what
/// [`encode`] makes of the value (e.g. a non-minimal integer): one value,
/// one encoding, so what is signed or hashed cannot be re-spelled.
pub fn decode_canonical<T: Decode<()> + Encode>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, ProtocolError> {
    let value: T = decode(what, bytes)?;
    if encode(&value) != bytes {
        return Err(ProtocolError::Decode {
            what,
            reason: "non-canonical encoding".into(),
        });
    }
    Ok(value)
}

/// The versioned wire form of a signed fact.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub enum WireFact {
    /// Version 1: the fact and its ed25519 signature, bincode-encoded.
    V1(SignedFact),
}

/// Borrowing twin of [`WireFact`]: encodes to the same bytes without a clone.
#[derive(Encode)]
enum WireFactRef<'a> {
    V1(&'a SignedFact),
}

/// Encode a signed fact in its wire form (what stores keep verbatim and peers send).
pub fn encode_signed(fact: &SignedFact) -> Vec<u8> {
    encode(&WireFactRef::V1(fact))
}

/// The author of a wire-encoded signed fact (its clock's node), read from
/// the head of the bytes without decoding the rest. Not a check: nothing is
/// validated or verified, and the rest may not even decode. For choosing
/// which of our own stored facts to export, where [`decode_signed`] (a
/// whole decode and re-encode) would cost that much per row. `None` if the
/// head is not that of a `V1` fact.
pub fn author_of(bytes: &[u8]) -> Option<crate::NodeId> {
    let ((variant, clock), _): ((u32, crate::Hlc), usize) =
        bincode::decode_from_slice(bytes, config()).ok()?;
    (variant == 0).then_some(clock.node)
}

/// Decode a signed fact from its wire form. Refuses non-canonical encodings:
/// the bytes must be exactly what [`encode_signed`] would produce. Does not
/// verify the signature.
pub fn decode_signed(bytes: &[u8]) -> Result<SignedFact, ProtocolError> {
    let WireFact::V1(fact) = decode_canonical::<WireFact>("fact", bytes)?;
    Ok(fact)
}
