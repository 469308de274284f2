//! Time on the node: supersession (`amos supersede`) and the timeline
//! (`amos timeline`, MCP `memory_timeline`): a requester's visible memories
//! and their supersessions in valid-time order.
//!
//! Boundary: only memories the gate lets the requester see take part, as
//! subjects and as superseders; the decisions are `crate::recall::time`'s.

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{MemoryId, Scope, Validity};
use serde::Serialize;

use crate::api::memories::NewMemory;
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::recall::time::TimeQuery;
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
    /// those `who` owns and shares with no one).
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
        let scope = scope.as_ref();
        let recs = self.visible_in_time(who, None, TIMELINE_MAX, &TimeQuery::default())?;
        let mut out = Vec::new();
        for (m, vt) in recs {
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
        out.retain(|e| {
            since_ms.is_none_or(|t| e.at_ms >= t) && until_ms.is_none_or(|t| e.at_ms <= t)
        });
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
