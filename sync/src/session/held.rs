//! What a side holds back for a peer that lacks a feature (docs/design.md
//! §13), carried from session to session: the one rule `amos serve`'s
//! session driver and amos-sim's both follow.
//!
//! A fact the peer cannot decode ([`Features::split_decodable`]) is not
//! sent, and counted with the features it needs. The watermark moves past it
//! as usual; once the peer's hello names those features (it was upgraded),
//! the session's export starts from the beginning, so what was held back
//! goes, and the count starts again from what that export held back. While
//! anything is held back for the peer, no digest is exchanged with it: the
//! two would disagree by design, and a repair could not help.
//!
//! Boundary: pure; the driver stores the count (the node in the peer's row)
//! and carries out what it says.

use amos_protocol::wire::Features;

use super::SKIP_EXPORT;

/// Facts held back for one peer: how many, and the features they need that
/// the peer lacked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldBack {
    /// Facts held back.
    pub facts: u64,
    /// The features they need that the peer lacked.
    pub needs: Features,
}

impl HeldBack {
    /// Where this session's export to a peer whose hello names `decodes`
    /// starts, given the session's `since`: from the beginning once the peer
    /// decodes everything held back for it; a skipped export
    /// ([`SKIP_EXPORT`]: the session repairs) stays skipped.
    pub fn export_from(self, since: i64, decodes: Features) -> i64 {
        if since != SKIP_EXPORT && self.facts > 0 && decodes.contains(self.needs) {
            0
        } else {
            since
        }
    }

    /// What is held back after an export from `since` (as
    /// [`HeldBack::export_from`] gave it) that held back `facts` facts
    /// needing `needs`: an export from the beginning counts anew, a later
    /// one adds to what was; a skipped export changes nothing.
    pub fn after_export(self, since: i64, facts: u64, needs: Features) -> HeldBack {
        match since {
            SKIP_EXPORT => self,
            0 => HeldBack { facts, needs },
            _ => HeldBack {
                facts: self.facts.saturating_add(facts),
                needs: self.needs.union(needs),
            },
        }
    }

    /// Whether a digest is sent to, or compared with, the peer: only while
    /// nothing is held back for it.
    pub fn allows_digest(self) -> bool {
        self.facts == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VT: Features = Features::VALID_TIME;

    #[test]
    fn what_is_held_back_goes_once_the_peer_decodes_it_and_is_counted_until_then() {
        let none = HeldBack::default();
        assert!(none.allows_digest());
        assert_eq!(
            none.export_from(7, Features::NONE),
            7,
            "nothing held: as asked"
        );
        // An export from 7 holds back 2 facts needing valid time.
        let held = none.after_export(7, 2, VT);
        assert_eq!(
            held,
            HeldBack {
                facts: 2,
                needs: VT
            }
        );
        assert!(!held.allows_digest());
        // The peer still lacks it: the export goes on from its watermark,
        // and what it holds back adds up.
        assert_eq!(held.export_from(9, Features::NONE), 9);
        let more = held.after_export(9, 1, VT);
        assert_eq!(more.facts, 3);
        // A repair skips the export: nothing changes, nothing is re-sent.
        assert_eq!(more.export_from(SKIP_EXPORT, VT), SKIP_EXPORT);
        assert_eq!(more.after_export(SKIP_EXPORT, 0, Features::NONE), more);
        // Upgraded: the export starts from the beginning and counts anew.
        assert_eq!(more.export_from(12, VT), 0);
        let after = more.after_export(0, 0, Features::NONE);
        assert_eq!(after, HeldBack::default());
        assert!(after.allows_digest());
    }
}
