//! Time on the node: supersession (`amos supersede`) and the timeline
//! (`amos timeline`, MCP `memory_timeline`): a requester's visible memories
//! and their supersessions in valid-time order.
//!
//! Boundary: only memories the gate lets the requester see take part, as
//! subjects and as superseders; the decisions are `crate::recall::time`'s.

use std::collections::HashSet;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{MemoryId, Scope, Validity};
use serde::Serialize;

use crate::api::memories::NewMemory;
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::recall::time::{self, TimeQuery};
use crate::store::memory::MemoryRecord;

/// What happened to a memory at a point of valid time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimelineEvent {
    /// Its valid time starts.
    Starts,
    /// A visible superseder replaced it.
    Superseded,
    /// Its own `valid_to` passed.
    Ends,
}

/// One line of a timeline.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineEntry {
    /// When it happened (Unix ms).
    pub at_ms: u64,
    /// What happened.
    pub event: TimelineEvent,
    /// The memory.
    #[serde(serialize_with = "crate::recall::time::as_string")]
    pub memory: amos_protocol::MemoryId,
    /// Its owner.
    pub owner: String,
    /// Its text.
    pub text: String,
    /// The memory that replaced it (`superseded` events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Most memories a timeline looks at.
pub const TIMELINE_MAX: usize = 100_000;

impl Node {
    /// Replace memory `id` (visible to `who`) with a new memory of `text`
    /// that names it in its own signed content. The old memory is not
    /// written to. The new one takes the old one's type and tags, and its
    /// grants when `who` owns it and `share` is `None`.
    pub fn supersede(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        text: String,
        share: Option<Vec<Scope>>,
        validity: Validity,
    ) -> Result<MemoryId> {
        let old = self.gated(who, id)?;
        let mut new = NewMemory::new(text);
        new.kind = old.kind().clone();
        new.tags = old.tags().to_vec();
        new.share = match share {
            Some(s) => s
                .iter()
                .map(|s| {
                    self.store.read(|r| {
                        crate::api::scopes::canonical_scope(
                            r,
                            s,
                            crate::api::scopes::Unheld::AsTyped,
                        )
                    })
                })
                .collect::<Result<_>>()?,
            None if who.owns(&*old) => old.grants().iter().cloned().collect(),
            None => Vec::new(),
        };
        new.supersedes = Some(old.id());
        new.validity = validity;
        self.add(who, new)
    }

    /// The timeline of `who`'s visible memories, optionally only events in
    /// `[since, until]` and only memories shared with `scope` (`private`:
    /// those `who` owns and shares with no one): the first `limit` events
    /// in valid-time order over every visible, unarchived memory. The
    /// memories are read in the order their valid time starts, a page at a
    /// time, until `limit` events are settled — not all of them.
    pub fn timeline(
        &self,
        who: &AuthorizedScopes,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
        scope: Option<&Scope>,
        limit: usize,
    ) -> Result<Vec<TimelineEntry>> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        if let (Some(s), Some(u)) = (since_ms, until_ms)
            && u < s
        {
            return Err(NodeError::BadInput("--until is before --since".into()));
        }
        let scope = scope
            .map(|s| {
                self.store.read(|r| {
                    crate::api::scopes::canonical_scope(r, s, crate::api::scopes::Unheld::AsTyped)
                })
            })
            .transpose()?;
        self.timeline_walk(
            who,
            (since_ms, until_ms),
            scope.as_ref(),
            limit,
            limit.clamp(64, 4_096),
        )
    }

    /// [`Node::timeline`] on a canonical scope, reading `first_page` rows
    /// first (twice as many each page after).
    fn timeline_walk(
        &self,
        who: &AuthorizedScopes,
        (since_ms, until_ms): (Option<u64>, Option<u64>),
        scope: Option<&Scope>,
        limit: usize,
        first_page: usize,
    ) -> Result<Vec<TimelineEntry>> {
        let now = self.now_ms();
        let in_window =
            |at: u64| since_ms.is_none_or(|t| at >= t) && until_ms.is_none_or(|t| at <= t);
        // Walk the visible memories in the order their valid time starts,
        // a page at a time, until `limit` events are settled: every event
        // before `bound` (the start of the last memory read) is known once
        // every memory starting before it was read — a memory's own end is
        // after its start, and a memory superseded before `bound` is
        // replaced by one starting before it, whose target is read too.
        let mut seen: HashSet<MemoryId> = HashSet::new();
        let mut out: Vec<TimelineEntry> = Vec::new();
        let mut after = None;
        let mut page_rows = first_page.max(1);
        let bound = loop {
            let page = self
                .store
                .visible_by_valid_start(who, after, page_rows, now)?;
            let bound = if page.exhausted {
                None
            } else {
                page.last.map(|(start, _)| start)
            };
            after = page.last.or(after);
            let mut fresh: Vec<Visible<MemoryRecord>> = page
                .memories
                .into_iter()
                .filter(|m| seen.insert(m.id()))
                .collect();
            for m in self.store.visible_superseded_before(who, bound, now)? {
                if seen.insert(m.id()) {
                    fresh.push(m);
                }
            }
            let viewed = self
                .store
                .read(|r| time::view(r, who, fresh, &TimeQuery::default(), now))?;
            for (m, vt) in viewed {
                if !in_scope(&m, scope) {
                    continue;
                }
                let entry = |at_ms, event, by: Option<String>| TimelineEntry {
                    at_ms,
                    event,
                    memory: m.id(),
                    owner: m.owner().to_string(),
                    text: m.content().to_owned(),
                    by,
                };
                out.push(entry(vt.from_ms, TimelineEvent::Starts, None));
                if let Some(end) = vt.to_ms {
                    match vt.superseded_by {
                        Some(s) => out.push(entry(
                            end,
                            TimelineEvent::Superseded,
                            Some(s.id.to_string()),
                        )),
                        None => out.push(entry(end, TimelineEvent::Ends, None)),
                    }
                }
            }
            let Some(b) = bound else { break None };
            let settled = out
                .iter()
                .filter(|e| e.at_ms < b && in_window(e.at_ms))
                .count();
            if settled >= limit || until_ms.is_some_and(|u| u < b) {
                break Some(b);
            }
            page_rows = page_rows.saturating_mul(2).min(65_536);
        };
        out.retain(|e| bound.is_none_or(|b| e.at_ms < b) && in_window(e.at_ms));
        out.sort_by(|a, b| {
            (a.at_ms, a.event as u8, a.memory).cmp(&(b.at_ms, b.event as u8, b.memory))
        });
        out.truncate(limit);
        let mut shown: Vec<MemoryId> = out.iter().map(|e| e.memory).collect();
        shown.sort();
        shown.dedup();
        self.audit_reads(who, &shown, "timeline");
        Ok(out)
    }
}

fn in_scope(m: &Visible<MemoryRecord>, scope: Option<&Scope>) -> bool {
    match scope {
        None => true,
        Some(Scope::Private) => m.effective().is_private(),
        Some(s) => m.effective().iter().any(|g| g == s),
    }
}

#[cfg(test)]
mod walk_tests {
    use amos_protocol::{MemoryId, Scope, Validity};

    use super::{TIMELINE_MAX, TimelineEntry, in_scope};
    use crate::api::NewMemory;
    use crate::api::node::test_node;
    use crate::recall::time::{self, TimeQuery};
    use crate::{Node, api::TimelineEvent};

    use crate::api::node::TestRng;

    type Line = (u64, TimelineEvent, MemoryId, Option<String>);

    fn lines(v: Vec<TimelineEntry>) -> Vec<Line> {
        v.into_iter()
            .map(|e| (e.at_ms, e.event, e.memory, e.by))
            .collect()
    }

    /// The timeline as it was made before the ordered walk: every visible,
    /// unarchived memory (up to `TIMELINE_MAX`, newest first) through the
    /// time view, its events sorted, the first `limit` kept.
    fn all_at_once(
        node: &Node,
        who: &amos_acl::AuthorizedScopes,
        (since, until): (Option<u64>, Option<u64>),
        scope: Option<&Scope>,
        limit: usize,
    ) -> Vec<Line> {
        let now = node.now_ms();
        let recs = node
            .store
            .visible_newest(who, None, TIMELINE_MAX, now)
            .unwrap();
        let viewed = node
            .store
            .read(|r| time::view(r, who, recs, &TimeQuery::default(), now))
            .unwrap();
        let mut out = Vec::new();
        for (m, vt) in viewed {
            if !in_scope(&m, scope) {
                continue;
            }
            out.push((vt.from_ms, TimelineEvent::Starts, m.id(), None));
            if let Some(end) = vt.to_ms {
                match vt.superseded_by {
                    Some(s) => out.push((
                        end,
                        TimelineEvent::Superseded,
                        m.id(),
                        Some(s.id.to_string()),
                    )),
                    None => out.push((end, TimelineEvent::Ends, m.id(), None)),
                }
            }
        }
        out.retain(|e| since.is_none_or(|t| e.0 >= t) && until.is_none_or(|t| e.0 <= t));
        out.sort_by_key(|a| (a.0, a.1 as u8, a.2));
        out.truncate(limit);
        out
    }

    /// The timeline read by walking the memories in valid-start order, a
    /// page at a time, lists the same events in the same order as reading
    /// every visible memory at once, for every agent, page size, limit,
    /// window and scope — over memories with valid times in any order,
    /// ends, superseders that start before the memory they replace,
    /// archived ones (out of the timeline, yet ending what they replace),
    /// expired ones and memories of others private or shared — and never
    /// names a memory the agent cannot see.
    #[test]
    fn the_ordered_walk_lists_what_reading_everything_listed() {
        let (_dir, _home, mut node, alice) = test_node("alice");
        node.team_create("apollo", None).unwrap();
        node.agent_add("bob", "agent", &["apollo".into()]).unwrap();
        node.agent_add("carol", "agent", &[]).unwrap();
        let agents = ["alice", "bob", "carol"];
        let now = node.now_ms();
        let day = 86_400_000u64;
        let base = now - 40 * day;
        let _ = &alice;
        let shares: [&[&str]; 4] = [&[], &["team:apollo"], &["global"], &["agent:bob"]];
        let mut rng = TestRng::new(0x7151_e11e);
        let mut made: Vec<(String, MemoryId)> = Vec::new();
        // Starts on whole days (many memories share one: pages end inside
        // a tie); superseders often start before what they replace.
        let mut starts: std::collections::HashMap<MemoryId, u64> = Default::default();
        let mut moved_later = Vec::new();
        for i in 0..160 {
            let agent = agents[rng.below(agents.len())];
            let who = node.requester(agent).unwrap();
            let own: Vec<MemoryId> = made
                .iter()
                .filter(|(o, _)| o == agent)
                .map(|(_, id)| *id)
                .collect();
            let replaced = (rng.below(3) == 0)
                .then(|| own.get(rng.below(own.len().max(1))).copied())
                .flatten();
            let from = match replaced.and_then(|old| starts.get(&old)) {
                Some(old_start) if rng.below(2) == 0 => {
                    old_start.saturating_sub((1 + rng.below(4) as u64) * day)
                }
                _ => base + rng.below(12) as u64 * day,
            };
            let validity = Validity {
                from_ms: (rng.below(5) != 0).then_some(from),
                to_ms: (rng.below(4) == 0).then_some(from.max(now) + 1 + rng.below(5) as u64 * day),
            };
            let id = match replaced {
                Some(old) => node
                    .supersede(&who, &old.to_string(), format!("m{i}"), None, validity)
                    .ok(),
                None => {
                    let mut m = NewMemory::new(format!("m{i}"));
                    m.share = shares[rng.below(shares.len())]
                        .iter()
                        .map(|s| s.parse().unwrap())
                        .collect();
                    m.validity = validity;
                    if rng.below(12) == 0 {
                        m.expires_ms = Some(now + day);
                    }
                    node.add(&who, m).ok()
                }
            };
            let Some(id) = id else { continue };
            if rng.below(10) == 0 {
                node.set_archived(&who, &id.to_string(), true).unwrap();
            }
            starts.insert(id, validity.from_ms.unwrap_or(now));
            if let Some(old) = replaced {
                moved_later.push((agent, old));
            }
            made.push((agent.to_owned(), id));
        }
        // A replaced memory's start moved past its superseder's (a revision
        // may, as may a peer's fact): it is superseded before it starts, and
        // the walk reaches it through its superseder.
        let mut later = 0;
        for (agent, old) in moved_later {
            let who = node.requester(agent).unwrap();
            let Some(start) = starts.get(&old) else {
                continue;
            };
            let validity = Validity {
                from_ms: Some(start + (2 + rng.below(6) as u64) * day),
                to_ms: None,
            };
            if node
                .revise(&who, &old.to_string(), None, Some(validity), 1 << 20)
                .is_ok()
            {
                later += 1;
            }
        }
        assert!(
            later > 5,
            "{later} replaced memories moved past their superseders"
        );
        let scopes: [Option<Scope>; 3] = [
            None,
            Some("team:apollo".parse().unwrap()),
            Some(Scope::Private),
        ];
        let (mut compared, mut superseded) = (0, 0);
        for agent in agents {
            let who = node.requester(agent).unwrap();
            for limit in [1, 7, 40, 500] {
                for page in [1, 3, 16, 64] {
                    let window = match rng.below(4) {
                        0 => (None, None),
                        1 => (Some(base + 10 * day), None),
                        2 => (None, Some(base + 20 * day)),
                        _ => (Some(base + 5 * day), Some(base + 25 * day)),
                    };
                    let scope = scopes[rng.below(scopes.len())].as_ref();
                    let walked = lines(
                        node.timeline_walk(&who, window, scope, limit, page)
                            .unwrap(),
                    );
                    let all = all_at_once(&node, &who, window, scope, limit);
                    assert_eq!(
                        walked, all,
                        "{agent}, limit {limit}, page {page}, {window:?}, {scope:?}"
                    );
                    compared += walked.len();
                    superseded += walked
                        .iter()
                        .filter(|l| l.1 == TimelineEvent::Superseded)
                        .count();
                    for (_, _, id, by) in &walked {
                        assert!(
                            node.gated(&who, &id.to_string()).is_ok(),
                            "{agent} sees {id}"
                        );
                        if let Some(by) = by {
                            assert!(node.gated(&who, by).is_ok(), "{agent} sees {by}");
                        }
                    }
                }
            }
        }
        assert!(compared > 300, "the walk listed {compared} events in all");
        assert!(superseded > 10, "{superseded} supersessions listed");
        let _ = alice;
    }

    /// A memory whose start moved past its superseder's (a revision may
    /// move it, a peer's fact may carry it) is superseded before it
    /// starts: the walk, stopping long before that start, still lists its
    /// `superseded` event, found through the superseder it read.
    #[test]
    fn a_memory_superseded_before_it_starts_is_listed_when_its_superseder_is() {
        let (_dir, _home, mut node, alice) = test_node("alice");
        let day = 86_400_000u64;
        let base = node.now_ms() - 40 * day;
        let at = |d: u64| Validity {
            from_ms: Some(base + d * day),
            to_ms: None,
        };
        let mut old = NewMemory::new("the old plan");
        old.validity = at(0);
        let old = node.add(&alice, old).unwrap();
        let new = node
            .supersede(&alice, &old.to_string(), "the new plan".into(), None, at(1))
            .unwrap();
        for d in 2..30 {
            let mut m = NewMemory::new(format!("day {d}"));
            m.validity = at(d);
            node.add(&alice, m).unwrap();
        }
        node.revise(&alice, &old.to_string(), None, Some(at(35)), 1 << 20)
            .unwrap();
        let walked = lines(
            node.timeline_walk(&alice, (None, None), None, 3, 1)
                .unwrap(),
        );
        assert_eq!(walked, all_at_once(&node, &alice, (None, None), None, 3));
        assert!(
            walked.contains(&(
                base + day,
                TimelineEvent::Superseded,
                old,
                Some(new.to_string())
            )),
            "{walked:?}"
        );
    }
}
