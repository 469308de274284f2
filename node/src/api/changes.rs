//! What changed for an agent since a time T (`amos changes --since T`, MCP
//! `memory_changes_since`; docs/design.md §12.3): the difference between
//! what it could see at T and what it sees now, gated both times —
//! `added` (visible now, not then), `edited` (visible both times, its
//! text or fields changed since), `superseded` (visible both times, a
//! superseder it sees was made since) and `revoked` (visible then, not
//! now: unshared, forgotten, or its origin re-judged).
//!
//! T is record time, as `--known-at` reads it: a memory's creation and a
//! change's fact clock. "Visible then" is judged by the gate over the
//! standing the memory had at T ([`crate::store::history`]) and the org
//! graph as it stood at T as far as known
//! ([`crate::store::org::StoredOrgAt`]: a membership changed since T counts
//! as absent then), so it never says "visible then" of a memory the agent
//! could not see at T.
//!
//! Invariant: a memory the agent cannot see now is reported only as
//! `revoked`, only if it could see it at T, and by its id and the time
//! alone: never its content, owner, grants or type. Nothing else the agent
//! cannot see is read into an answer, a count or an order.
//! Boundary: no SQL; the gate is amos-acl's.

use std::collections::{HashMap, HashSet};

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use serde::Serialize;

use crate::api::node::Node;
use crate::api::time::TIMELINE_MAX;
use crate::error::{NodeError, Result};
use crate::recall::time::TimeQuery;
use crate::store::history::{self, PastStanding};
use crate::store::memory::MemoryRecord;
use crate::store::org::StoredOrgAt;

/// What happened to a memory, for one agent, since T.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Visible now, not at T: made since, or shared with the agent since.
    Added,
    /// Visible both times; its content register changed since.
    Edited,
    /// Visible both times; a superseder the agent sees was made since.
    Superseded,
    /// Visible at T, not now.
    Revoked,
}

/// One change.
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub kind: ChangeKind,
    /// When (Unix ms, record time).
    pub at_ms: u64,
    /// The memory.
    pub id: MemoryId,
    /// The memory as the agent sees it now; `None` for `revoked`.
    pub memory: Option<Visible<MemoryRecord>>,
    /// The superseder (`superseded`).
    pub by: Option<MemoryId>,
}

/// The answer of [`Node::changes_since`].
#[derive(Debug, Clone)]
pub struct Changes {
    /// T (Unix ms).
    pub since_ms: u64,
    /// Now, when the answer was made (Unix ms).
    pub until_ms: u64,
    /// Oldest first, at most the limit asked.
    pub changes: Vec<Change>,
    /// Whether more changes than the limit were found.
    pub truncated: bool,
}

impl Node {
    /// What became visible to `who` since `since_ms`, changed, or stopped
    /// being visible: oldest first, at most `limit`. A read the read audit
    /// records (`changes`) for the memories shown.
    pub fn changes_since(
        &self,
        who: &AuthorizedScopes,
        since_ms: u64,
        limit: usize,
    ) -> Result<Changes> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        let now = self.now_ms();
        if since_ms > now {
            return Err(NodeError::BadInput(
                "--since is in the future: nothing has changed since then yet".into(),
            ));
        }
        let Some(agent) = who.requester() else {
            return Err(NodeError::BadInput(
                "changes are an agent's: pass --as AGENT".into(),
            ));
        };
        // The org then and the grants then, read in one snapshot.
        let (then, past) = self.store.read(|r| {
            Ok((
                AuthorizedScopes::for_agent(agent.clone(), &StoredOrgAt(r, since_ms)),
                history::changed_since(r, since_ms)?,
            ))
        })?;
        let past: HashMap<MemoryId, PastStanding> = past.into_iter().map(|p| (p.id, p)).collect();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (m, vt) in self.visible_in_time(who, None, TIMELINE_MAX, &TimeQuery::default())? {
            seen.insert(m.id());
            let standing = past.get(&m.id());
            let visible_then = m.created_ms() <= since_ms
                && match standing {
                    Some(p) => then.may_see(p, since_ms),
                    None => then.may_see(&*m, since_ms),
                };
            if !visible_then {
                let at = if m.created_ms() > since_ms {
                    m.created_ms()
                } else {
                    standing.map_or(m.created_ms(), |p| p.changed_ms)
                };
                out.push(change(ChangeKind::Added, at, &m, None));
                continue;
            }
            if m.updated_ms() > since_ms {
                out.push(change(ChangeKind::Edited, m.updated_ms(), &m, None));
            }
            if let Some(s) = vt.superseded_by.filter(|s| s.created_ms > since_ms) {
                out.push(change(ChangeKind::Superseded, s.created_ms, &m, Some(s.id)));
            }
        }
        // Visible then and not listed now: revoked, unless the agent still
        // sees it (an archived memory is out of the list, not out of sight).
        let gone: Vec<&PastStanding> = past
            .values()
            .filter(|p| !seen.contains(&p.id) && then.may_see(*p, since_ms))
            .collect();
        let gone_ids: Vec<MemoryId> = gone.iter().map(|p| p.id).collect();
        let still: HashSet<MemoryId> = self
            .store
            .visible(who, &gone_ids, now)?
            .iter()
            .map(|m| m.id())
            .collect();
        for p in gone.into_iter().filter(|p| !still.contains(&p.id)) {
            out.push(Change {
                kind: ChangeKind::Revoked,
                at_ms: p.changed_ms,
                id: p.id,
                memory: None,
                by: None,
            });
        }
        out.sort_by_key(|c| (c.at_ms, c.kind, c.id));
        let truncated = out.len() > limit;
        out.truncate(limit);
        let mut shown: Vec<MemoryId> = out
            .iter()
            .filter(|c| c.memory.is_some())
            .map(|c| c.id)
            .collect();
        shown.sort();
        shown.dedup();
        self.audit_reads(who, &shown, "changes");
        Ok(Changes {
            since_ms,
            until_ms: now,
            changes: out,
            truncated,
        })
    }
}

fn change(kind: ChangeKind, at_ms: u64, m: &Visible<MemoryRecord>, by: Option<MemoryId>) -> Change {
    Change {
        kind,
        at_ms,
        id: m.id(),
        memory: Some(m.clone()),
        by,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::memories::NewMemory;
    use crate::api::node::test_node;
    use crate::clock::FixedClock;

    // Past the system clock, which the set-up's writes moved the node's clock to.
    const T0: u64 = 4_000_000_000_000;

    fn at(home: &crate::Home, t: u64) -> Node {
        Node::open_with_clock(home, Arc::new(FixedClock(t))).unwrap()
    }

    fn kinds(c: &Changes) -> Vec<(ChangeKind, MemoryId)> {
        c.changes.iter().map(|c| (c.kind, c.id)).collect()
    }

    #[test]
    fn added_edited_superseded_and_revoked_are_the_difference_between_then_and_now() {
        let (_d, home, mut setup, _) = test_node("alice");
        setup.agent_add("bob", "test", &[]).unwrap();
        drop(setup);
        let mut n = at(&home, T0);
        let (alice, bob) = (n.requester("alice").unwrap(), n.requester("bob").unwrap());
        let share = |text: &str| {
            let mut m = NewMemory::new(text);
            m.share = vec!["agent:bob".parse().unwrap()];
            m
        };
        let kept = n.add(&alice, share("kept as it was")).unwrap();
        let edited = n.add(&alice, share("the port is 80")).unwrap();
        let replaced = n.add(&alice, share("deploys on friday")).unwrap();
        let revoked = n.add(&alice, share("soon unshared")).unwrap();
        let forgotten = n.add(&alice, share("soon forgotten")).unwrap();
        let private = n.add(&alice, NewMemory::new("alice alone")).unwrap();
        let later_shared = n.add(&alice, NewMemory::new("shared later")).unwrap();
        let t = T0 + 1_000;
        let mut n = at(&home, T0 + 2_000);
        n.revise(
            &alice,
            &edited.to_string(),
            Some("the port is 8080"),
            None,
            crate::api::DEFAULT_COMPACT_BYTES,
        )
        .unwrap();
        let mut sup = share("deploys on monday");
        sup.supersedes = Some(replaced);
        let superseder = n.add(&alice, sup).unwrap();
        n.set_grant(&alice, &revoked.to_string(), "agent:bob", false)
            .unwrap();
        n.forget(&alice, &forgotten.to_string()).unwrap();
        n.set_grant(&alice, &later_shared.to_string(), "agent:bob", true)
            .unwrap();
        n.forget(&alice, &private.to_string()).unwrap();
        let c = at(&home, T0 + 3_000).changes_since(&bob, t, 100).unwrap();
        let mut got = kinds(&c);
        got.sort();
        let mut want = vec![
            (ChangeKind::Added, superseder),
            (ChangeKind::Added, later_shared),
            (ChangeKind::Edited, edited),
            (ChangeKind::Superseded, replaced),
            (ChangeKind::Revoked, revoked),
            (ChangeKind::Revoked, forgotten),
        ];
        want.sort();
        assert_eq!(got, want, "{c:?}");
        assert!(
            !kinds(&c)
                .iter()
                .any(|(_, id)| *id == kept || *id == private)
        );
        // Revoked: the id and the time, nothing of the memory.
        for ch in c.changes.iter().filter(|c| c.kind == ChangeKind::Revoked) {
            assert!(ch.memory.is_none());
        }
        // Nothing changed since now.
        let none = at(&home, T0 + 3_000)
            .changes_since(&bob, T0 + 3_000, 100)
            .unwrap();
        assert!(none.changes.is_empty(), "{none:?}");
    }

    #[test]
    fn a_memory_the_agent_never_saw_is_never_reported_revoked() {
        let (_d, home, mut setup, _) = test_node("alice");
        setup.agent_add("bob", "test", &[]).unwrap();
        drop(setup);
        let mut n = at(&home, T0);
        let (alice, bob) = (n.requester("alice").unwrap(), n.requester("bob").unwrap());
        let hidden = n.add(&alice, NewMemory::new("never bob's")).unwrap();
        let mut eve_only = NewMemory::new("for someone else");
        n.agent_add("eve", "test", &[]).unwrap();
        eve_only.share = vec!["agent:eve".parse().unwrap()];
        let other = n.add(&alice, eve_only).unwrap();
        // Shared with bob and revoked again, both after T: bob could not
        // see it at T, so it is not "revoked" for him.
        let brief = n.add(&alice, NewMemory::new("briefly bob's")).unwrap();
        let mut n = at(&home, T0 + 2_000);
        n.set_grant(&alice, &brief.to_string(), "agent:bob", true)
            .unwrap();
        let mut n = at(&home, T0 + 3_000);
        n.set_grant(&alice, &brief.to_string(), "agent:bob", false)
            .unwrap();
        n.set_grant(&alice, &other.to_string(), "agent:eve", false)
            .unwrap();
        n.forget(&alice, &hidden.to_string()).unwrap();
        let c = at(&home, T0 + 4_000)
            .changes_since(&bob, T0 + 1_000, 100)
            .unwrap();
        assert!(c.changes.is_empty(), "{c:?}");
        // alice sees her own changes: the forgotten one is revoked for her.
        let c = at(&home, T0 + 4_000)
            .changes_since(&alice, T0 + 1_000, 100)
            .unwrap();
        assert_eq!(kinds(&c), vec![(ChangeKind::Revoked, hidden)], "{c:?}");
    }

    #[test]
    fn a_team_joined_since_t_makes_its_memories_added() {
        let (_d, home, mut setup, _) = test_node("alice");
        setup.agent_add("bob", "test", &[]).unwrap();
        drop(setup);
        let mut n = at(&home, T0);
        let alice = n.requester("alice").unwrap();
        n.team_create("apollo", None).unwrap();
        n.team_member("apollo", "alice", true).unwrap();
        let mut m = NewMemory::new("the team's runbook");
        m.share = vec!["team:apollo".parse().unwrap()];
        let id = n.add(&alice, m).unwrap();
        let mut n = at(&home, T0 + 2_000);
        n.team_member("apollo", "bob", true).unwrap();
        let n = at(&home, T0 + 3_000);
        let bob = n.requester("bob").unwrap();
        let c = n.changes_since(&bob, T0 + 1_000, 100).unwrap();
        assert_eq!(kinds(&c), vec![(ChangeKind::Added, id)], "{c:?}");
    }

    #[test]
    fn the_limit_truncates_and_says_so() {
        let (_d, home, _n, _) = test_node("alice");
        let mut n = at(&home, T0 + 1);
        let alice = n.requester("alice").unwrap();
        for i in 0..3 {
            n.add(&alice, NewMemory::new(format!("note {i}"))).unwrap();
        }
        let c = n.changes_since(&alice, T0, 2).unwrap();
        assert_eq!(c.changes.len(), 2);
        assert!(c.truncated);
        assert!(n.changes_since(&alice, T0 + 10, 1).is_err(), "future");
        assert!(n.changes_since(&alice, T0, 0).is_err());
    }
}
