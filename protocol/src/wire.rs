//! Wire messages of a live sync session (DESIGN.md §7), versioned.
//!
//! One session = both sides pull. Each side opens with [`SyncV1::Hello`]
//! naming its log epoch and the watermark it holds for the other side (the
//! other's epoch and the highest of the other's `seq` it has applied). Each
//! side answers with the facts changed since that watermark that the
//! asker's policy admits ([`SyncV1::Facts`] batches, wire-encoded signed
//! facts), then [`SyncV1::Done`] with the `seq` they cover, which the asker
//! stores as its new watermark once every batch has committed. An idle sync
//! is a `Hello` and a `Done` each way: bytes independent of the store's size.
//!
//! Frames carrying these are length-prefixed by the transport; this module
//! only encodes and decodes one message, with the size limit of [`codec`].

use bincode::{Decode, Encode};

use crate::{ProtocolError, codec};

/// A log epoch: random, changes when a store is restored or reset.
pub type Epoch = [u8; 16];

/// What a side knows of the other's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Watermark {
    pub epoch: Epoch,
    pub seq: i64,
}

/// Version 1 of the session messages.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum SyncV1 {
    /// Opening: my epoch, and what I hold of yours (`None`: nothing yet).
    Hello {
        epoch: Epoch,
        have: Option<Watermark>,
    },
    /// A batch of wire-encoded signed facts (each verified by the receiver).
    Facts { facts: Vec<Vec<u8>> },
    /// All facts up to `upto` of my log (in `epoch`) that you may receive
    /// were sent; store it as your watermark of me.
    Done { upto: Watermark },
    /// The sender refuses to continue; a one-line reason.
    Refused { reason: String },
    /// Pairing (DESIGN.md §7), the first message of a joiner that holds a
    /// code: which invite it answers, and a proof of the invite's secret
    /// bound to this TLS session ([`crate::pairing::join_proof`]). Never part
    /// of a sync session.
    Join {
        invite: [u8; 16],
        proof: [u8; 32],
        /// The joiner's display name.
        name: String,
        /// The UDP port the joiner serves on, if it serves (the inviter
        /// records the address it saw with this port).
        listen_port: Option<u16>,
    },
    /// The inviter accepted a `Join`: both sides record each other with
    /// `policy`; the inviter hands over its mesh key.
    Welcome {
        policy: String,
        name: String,
        mesh_key: Option<[u8; 32]>,
    },
}

/// The versioned envelope.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum SyncMessage {
    V1(SyncV1),
}

impl SyncMessage {
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decode one message (canonical, size-limited, no trailing bytes).
    /// Non-minimal integer encodings are refused, as for facts: one message,
    /// one encoding.
    pub fn decode(bytes: &[u8]) -> Result<SyncMessage, ProtocolError> {
        codec::decode_canonical("sync message", bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip() {
        let w = Watermark {
            epoch: [7; 16],
            seq: 42,
        };
        for m in [
            SyncV1::Hello {
                epoch: [1; 16],
                have: None,
            },
            SyncV1::Hello {
                epoch: [1; 16],
                have: Some(w),
            },
            SyncV1::Facts {
                facts: vec![vec![1, 2, 3], vec![]],
            },
            SyncV1::Done { upto: w },
            SyncV1::Refused {
                reason: "no".into(),
            },
            SyncV1::Join {
                invite: [5; 16],
                proof: [6; 32],
                name: "laptop".into(),
                listen_port: Some(4747),
            },
            SyncV1::Welcome {
                policy: "team:apollo".into(),
                name: "server".into(),
                mesh_key: None,
            },
        ] {
            let m = SyncMessage::V1(m);
            assert_eq!(SyncMessage::decode(&m.encode()).unwrap(), m);
        }
    }

    /// Found by the `sync_message` fuzz target: a `Facts` batch whose length
    /// is a non-minimal varint (0 written in five bytes) decoded to the same
    /// message as the minimal form.
    #[test]
    fn non_canonical_lengths_are_refused() {
        assert!(SyncMessage::decode(&[0, 1, 252, 0, 0, 0, 0]).is_err());
        assert_eq!(
            SyncMessage::decode(&[0, 1, 0]).unwrap(),
            SyncMessage::V1(SyncV1::Facts { facts: vec![] })
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = SyncMessage::decode(&bytes);
        }
    }
}
