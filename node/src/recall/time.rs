//! Time in recall (docs/design.md §12): a memory's valid time, the end a
//! superseder gives it, and the time filters of `search`, `pack`, `list`
//! and `timeline` (`--since`, `--until`, `--valid-at`, `--known-at`).
//!
//! The decisions are pure ([`valid_time`], [`admits`]); [`view`] joins them
//! with what the store holds: the superseders the gate lets `who` see
//! (`store::memory::visible_superseders`) and, for `--known-at`, an edited
//! memory's text as it stood then (`store::text_log::content_at`).
//!
//! Invariant: nothing here can widen what a requester sees. Every filter
//! only removes memories from what the gate let through, and a superseder
//! counts only if it reached this module, i.e. passed the gate.

use std::collections::HashMap;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use serde::Serialize;

use crate::error::Result;
use crate::store::Readable;
use crate::store::memory::{MemoryRecord, visible_superseders};
use crate::store::text_log::content_at;

/// A superseded memory's score is multiplied by this in default recall
/// (down-weighted, never hidden).
pub const SUPERSEDED_FACTOR: f32 = 0.5;

/// The time filters of one query; all optional, all in Unix milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeQuery {
    /// Only memories whose valid time starts at or after this.
    pub since_ms: Option<u64>,
    /// Only memories whose valid time starts at or before this.
    pub until_ms: Option<u64>,
    /// Only what was true then: started, not ended (by `valid_to`, or by a
    /// visible superseder's start).
    pub valid_at_ms: Option<u64>,
    /// Answer with what the mesh's records held then (record time: the
    /// facts' clocks), as far back as the stored history reaches.
    pub known_at_ms: Option<u64>,
}

impl TimeQuery {
    /// No filter at all: today's answer.
    pub fn is_empty(&self) -> bool {
        *self == TimeQuery::default()
    }
}

/// A visible memory that replaces another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Superseder {
    /// The replacing memory.
    #[serde(serialize_with = "as_string")]
    pub id: MemoryId,
    /// Its start of valid time: the replaced memory's end.
    pub valid_from_ms: u64,
    /// When its record was made (its creation).
    pub created_ms: u64,
}

/// A memory id as its text, for serde's `serialize_with`.
pub(crate) fn as_string<S: serde::Serializer>(id: &MemoryId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

/// The superseders of each replaced memory, as the gate let them through.
#[derive(Debug, Clone, Default)]
pub struct Supersessions {
    by_replaced: HashMap<MemoryId, Vec<Superseder>>,
}

impl Supersessions {
    /// From (replaced, superseder) pairs. Order does not matter.
    pub fn new(pairs: impl IntoIterator<Item = (MemoryId, Superseder)>) -> Supersessions {
        let mut by_replaced: HashMap<MemoryId, Vec<Superseder>> = HashMap::new();
        for (old, s) in pairs {
            by_replaced.entry(old).or_default().push(s);
        }
        for v in by_replaced.values_mut() {
            v.sort_by_key(|s| (s.valid_from_ms, s.id));
        }
        Supersessions { by_replaced }
    }

    /// The superseder that ends `id` first, counting only those on record
    /// by `known_at_ms` (all when `None`). Ties go to the smaller id, so
    /// concurrent supersessions resolve the same way everywhere.
    pub fn first(&self, id: &MemoryId, known_at_ms: Option<u64>) -> Option<Superseder> {
        self.by_replaced
            .get(id)?
            .iter()
            .find(|s| known_at_ms.is_none_or(|t| s.created_ms <= t))
            .copied()
    }
}

/// A memory's effective valid time: `[from, to)`, `to` = `None` while still
/// true. `to` is the earlier of its signed `valid_to` and the start of its
/// first visible superseder; a memory is never written to for this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ValidTime {
    /// Start of valid time (ms since 1970): the memory's `valid_from`.
    pub from_ms: u64,
    /// End of valid time, exclusive (`None`: still true).
    pub to_ms: Option<u64>,
    /// The superseder that ended it, if one did (before its own `valid_to`).
    pub superseded_by: Option<Superseder>,
}

impl ValidTime {
    /// Whether the memory was true at `t`.
    pub fn holds_at(&self, t: u64) -> bool {
        self.from_ms <= t && self.to_ms.is_none_or(|end| t < end)
    }
}

/// The effective valid time of `m` given the visible supersessions.
pub fn valid_time(m: &MemoryRecord, sup: &Supersessions, known_at_ms: Option<u64>) -> ValidTime {
    let from_ms = m.valid_from_ms();
    let signed_end = m.validity().to_ms;
    let first = sup.first(&m.id(), known_at_ms);
    match (signed_end, first) {
        (Some(end), Some(s)) if end <= s.valid_from_ms => ValidTime {
            from_ms,
            to_ms: Some(end),
            superseded_by: None,
        },
        (_, Some(s)) => ValidTime {
            from_ms,
            to_ms: Some(s.valid_from_ms),
            superseded_by: Some(s),
        },
        (end, None) => ValidTime {
            from_ms,
            to_ms: end,
            superseded_by: None,
        },
    }
}

/// Whether `m` answers query `q` by time. `known_at` membership (record
/// time) is the caller's: it needs the memory's history.
pub fn admits(q: &TimeQuery, m: &MemoryRecord, sup: &Supersessions) -> bool {
    if q.known_at_ms.is_some_and(|t| m.created_ms() > t) {
        return false;
    }
    let vt = valid_time(m, sup, q.known_at_ms);
    if q.since_ms.is_some_and(|t| vt.from_ms < t) || q.until_ms.is_some_and(|t| vt.from_ms > t) {
        return false;
    }
    q.valid_at_ms.is_none_or(|t| vt.holds_at(t))
}

/// The memories among `recs` (already through the gate) that answer `q`,
/// each with its effective valid time. Under `--known-at T` a memory made
/// after T is left out and an edited one reads as its records stood at T
/// (its text and validity then), re-admitted through the gate.
pub fn view(
    conn: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    recs: Vec<Visible<MemoryRecord>>,
    q: &TimeQuery,
    now_ms: u64,
) -> Result<Vec<(Visible<MemoryRecord>, ValidTime)>> {
    let recs = match q.known_at_ms {
        None => recs,
        Some(t) => {
            let mut out = Vec::with_capacity(recs.len());
            for v in recs {
                if v.created_ms() > t {
                    continue;
                }
                match content_at(conn, &v.id(), t)? {
                    None => out.push(v),
                    Some((text, validity)) => {
                        let mut m = v.into_inner();
                        m.content = text;
                        m.validity = validity;
                        out.extend(who.admit(m, now_ms));
                    }
                }
            }
            out
        }
    };
    let ids: Vec<MemoryId> = recs.iter().map(|m| m.id()).collect();
    let sup = Supersessions::new(
        visible_superseders(conn, who, &ids, now_ms)?
            .into_iter()
            .map(|(old, s)| {
                (
                    old,
                    Superseder {
                        id: s.id(),
                        valid_from_ms: s.valid_from_ms(),
                        created_ms: s.created_ms(),
                    },
                )
            }),
    );
    Ok(recs
        .into_iter()
        .filter(|m| admits(q, m, &sup))
        .map(|m| {
            let vt = valid_time(&m, &sup, q.known_at_ms);
            (m, vt)
        })
        .collect())
}

/// Whether a memory counts as superseded for a query about time `at`: a
/// visible superseder had started by then. Such a memory is down-weighted
/// by [`SUPERSEDED_FACTOR`], never hidden.
pub fn superseded_at(vt: &ValidTime, at_ms: u64) -> Option<Superseder> {
    vt.superseded_by.filter(|s| s.valid_from_ms <= at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u64, from: u64, created: u64) -> Superseder {
        Superseder {
            id: MemoryId::new(id, [0; 10]),
            valid_from_ms: from,
            created_ms: created,
        }
    }

    #[test]
    fn the_earliest_superseder_ends_a_memory_whatever_the_order() {
        let old = MemoryId::new(1, [1; 10]);
        let a = Supersessions::new([(old, s(5, 300, 300)), (old, s(6, 200, 250))]);
        let b = Supersessions::new([(old, s(6, 200, 250)), (old, s(5, 300, 300))]);
        assert_eq!(a.first(&old, None), Some(s(6, 200, 250)));
        assert_eq!(b.first(&old, None), a.first(&old, None));
        // Before the earlier superseder was on record, only the other counts.
        assert_eq!(a.first(&old, Some(260)), Some(s(6, 200, 250)));
        assert_eq!(a.first(&old, Some(240)), None);
        // Equal starts: the smaller id wins, everywhere.
        let c = Supersessions::new([(old, s(9, 200, 200)), (old, s(7, 200, 200))]);
        assert_eq!(
            c.first(&old, None).map(|x| x.id),
            Some(MemoryId::new(7, [0; 10]))
        );
    }

    #[test]
    fn holds_at_is_half_open() {
        let vt = ValidTime {
            from_ms: 10,
            to_ms: Some(20),
            superseded_by: None,
        };
        assert!(!vt.holds_at(9));
        assert!(vt.holds_at(10));
        assert!(vt.holds_at(19));
        assert!(!vt.holds_at(20));
    }
}
