//! Parked working context (`amos context offload|reload|list`, MCP
//! `memory_offload_context` / `memory_reload_context`; docs/design.md
//! §12.4): an agent parks the text of its working context under a name, and
//! its next session brings it back.
//!
//! A parked context is an ordinary memory: private to the agent that parked
//! it (no grant), of type `context`, tagged `context:NAME`, with an expiry
//! (default [`CONTEXT_DEFAULT_TTL_MS`], at most [`CONTEXT_MAX_TTL_MS`]) and at
//! most [`CONTEXT_MAX_BYTES`] of text. Parking again under the same name
//! adds a new one that supersedes the last and forgets (tombstones) the
//! ones this node made. So the gate, expiry, replication (to the agent's
//! own `full` peers, as every private memory) and forgetting are the
//! memory's own; nothing here is a second rule.
//!
//! Invariant: only contexts the requester itself owns are ever found,
//! listed or replaced: another agent's context, even one shared with the
//! requester, answers exactly like a name never parked.
//! Boundary: no SQL; writes go through [`Node::add`] and [`Node::forget`].

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{MemoryId, MemoryType};
use serde::Serialize;

use crate::api::memories::NewMemory;
use crate::api::node::Node;
use crate::error::{NodeError, Result, UnknownKind};
use crate::store::memory::MemoryRecord;

/// The memory type of a parked context.
pub const CONTEXT_TYPE: &str = "context";
/// Most bytes of text one parked context holds (32 KiB: about 8,000
/// tokens, a working context rather than a document).
pub const CONTEXT_MAX_BYTES: usize = 32 * 1024;
/// Lifetime of a parked context when none is given: 7 days.
pub const CONTEXT_DEFAULT_TTL_MS: u64 = 7 * DAY_MS;
/// Longest lifetime of a parked context: 90 days.
pub const CONTEXT_MAX_TTL_MS: u64 = 90 * DAY_MS;
/// Longest context name, in characters.
pub const CONTEXT_NAME_MAX: usize = 56;
/// Most contexts looked at when finding one by name.
const CONTEXT_SCAN: usize = 10_000;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const TAG_PREFIX: &str = "context:";

/// A parked context, as reloaded or just parked.
#[derive(Debug, Clone, Serialize)]
pub struct ParkedContext {
    /// The memory that holds it.
    #[serde(serialize_with = "crate::recall::time::as_string")]
    pub id: MemoryId,
    /// Its name.
    pub name: String,
    /// The parked text.
    pub content: String,
    /// When it was parked (Unix ms).
    pub parked_ms: u64,
    /// When it expires (Unix ms).
    pub expires_ms: u64,
}

/// One of an agent's parked contexts, without its text.
#[derive(Debug, Clone, Serialize)]
pub struct ContextSummary {
    /// Its name.
    pub name: String,
    /// The memory that holds it.
    #[serde(serialize_with = "crate::recall::time::as_string")]
    pub id: MemoryId,
    /// When it was parked (Unix ms).
    pub parked_ms: u64,
    /// When it expires (Unix ms).
    pub expires_ms: u64,
    /// Its size in bytes.
    pub bytes: usize,
}

/// A context name: 1 to [`CONTEXT_NAME_MAX`] characters, ASCII letters,
/// digits, `-`, `_` and `.`.
pub fn check_context_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= CONTEXT_NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(NodeError::BadInput(format!(
            "bad context name {name:?}: use 1 to {CONTEXT_NAME_MAX} ASCII letters, digits, '-', '_' or '.'"
        )))
    }
}

/// The name a memory is parked under, if it is a parked context of `who`'s
/// own.
fn own_context_name(who: &AuthorizedScopes, m: &Visible<MemoryRecord>) -> Option<String> {
    if m.kind().as_str() != CONTEXT_TYPE || who.requester() != Some(m.owner()) {
        return None;
    }
    m.tags()
        .iter()
        .find_map(|t| t.strip_prefix(TAG_PREFIX))
        .map(str::to_owned)
}

impl Node {
    /// `who`'s own live parked contexts, newest first (several of one name
    /// when another node of the agent parked one too).
    fn own_contexts(&self, who: &AuthorizedScopes) -> Result<Vec<(String, Visible<MemoryRecord>)>> {
        let kind = MemoryType::parse(CONTEXT_TYPE)?;
        let mut out: Vec<(String, Visible<MemoryRecord>)> = self
            .store
            .visible_newest(who, Some(&kind), CONTEXT_SCAN, self.now_ms())?
            .into_iter()
            .filter_map(|m| own_context_name(who, &m).map(|n| (n, m)))
            .collect();
        out.sort_by_key(|(_, m)| std::cmp::Reverse((m.created_ms(), m.id())));
        Ok(out)
    }

    /// Park `content` as `who`'s working context `name`, expiring at
    /// `expires_ms` (default: in [`CONTEXT_DEFAULT_TTL_MS`]). Replaces the
    /// context of that name: the new one supersedes it and the old ones
    /// this node made are forgotten.
    pub fn offload_context(
        &mut self,
        who: &AuthorizedScopes,
        name: &str,
        content: String,
        expires_ms: Option<u64>,
    ) -> Result<ParkedContext> {
        if who.requester().is_none() {
            return Err(NodeError::BadInput(
                "a context belongs to an agent: pass --as AGENT".into(),
            ));
        }
        check_context_name(name)?;
        if content.len() > CONTEXT_MAX_BYTES {
            return Err(NodeError::BadInput(format!(
                "context {name} is {} bytes; a parked context holds at most {CONTEXT_MAX_BYTES} \
                 (32 KiB): park a summary",
                content.len()
            )));
        }
        if content.trim().is_empty() {
            return Err(NodeError::BadInput(format!(
                "context {name} is empty: nothing to park"
            )));
        }
        let now = self.now_ms();
        let expires = expires_ms.unwrap_or(now.saturating_add(CONTEXT_DEFAULT_TTL_MS));
        if expires <= now {
            return Err(NodeError::BadInput(
                "the context's expiry is in the past: give a lifetime such as 7d".into(),
            ));
        }
        if expires - now > CONTEXT_MAX_TTL_MS {
            return Err(NodeError::BadInput(
                "a parked context lives at most 90 days: give a shorter ttl".into(),
            ));
        }
        let old: Vec<Visible<MemoryRecord>> = self
            .own_contexts(who)?
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, m)| m)
            .collect();
        let mut new = NewMemory::new(content.clone());
        new.kind = MemoryType::parse(CONTEXT_TYPE)?;
        new.tags = vec![format!("{TAG_PREFIX}{name}")];
        new.expires_ms = Some(expires);
        new.supersedes = old.first().map(|m| m.id());
        let id = self.add(who, new)?;
        // The replaced ones go; one parked on another node of the agent is
        // that node's to forget (it stays superseded here until it expires).
        let me = self.node_id();
        for m in old.iter().filter(|m| m.origin() == me) {
            self.forget(who, &m.id().to_string())?;
        }
        Ok(ParkedContext {
            id,
            name: name.to_owned(),
            content,
            parked_ms: now,
            expires_ms: expires,
        })
    }

    /// `who`'s parked context `name`, or its newest one when `name` is
    /// `None`. A name `who` never parked (or whose context expired or was
    /// forgotten, or which only another agent parked) is
    /// [`NodeError::Unknown`], all alike. A read the read audit records
    /// (`get`).
    pub fn reload_context(
        &self,
        who: &AuthorizedScopes,
        name: Option<&str>,
    ) -> Result<ParkedContext> {
        if let Some(n) = name {
            check_context_name(n)?;
        }
        let found = self
            .own_contexts(who)?
            .into_iter()
            .find(|(n, _)| name.is_none_or(|want| want == n));
        let Some((name, m)) = found else {
            let (shown, message) = match name {
                Some(n) => (
                    n.to_owned(),
                    format!("no parked context {n}: park one with memory_offload_context"),
                ),
                None => (
                    String::new(),
                    "no parked context: park one with memory_offload_context".to_owned(),
                ),
            };
            return Err(NodeError::Unknown {
                kind: UnknownKind::Context,
                name: shown,
                message,
            });
        };
        self.audit_reads(who, &[m.id()], "get");
        Ok(ParkedContext {
            id: m.id(),
            name,
            content: m.content().to_owned(),
            parked_ms: m.created_ms(),
            expires_ms: m.expires_ms().unwrap_or(u64::MAX),
        })
    }

    /// `who`'s parked contexts, one per name (the newest), newest first.
    pub fn contexts(&self, who: &AuthorizedScopes) -> Result<Vec<ContextSummary>> {
        let mut out: Vec<ContextSummary> = Vec::new();
        for (name, m) in self.own_contexts(who)? {
            if out.iter().any(|c| c.name == name) {
                continue;
            }
            out.push(ContextSummary {
                name,
                id: m.id(),
                parked_ms: m.created_ms(),
                expires_ms: m.expires_ms().unwrap_or(u64::MAX),
                bytes: m.content().len(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::node::test_node;
    use crate::clock::FixedClock;

    // Past the system clock, which the set-up's writes moved the node's clock to.
    const T0: u64 = 4_000_000_000_000;

    #[test]
    fn a_context_is_parked_replaced_reloaded_and_listed() {
        let (_d, home, _n, _who) = test_node("alice");
        let at = |t| Node::open_with_clock(&home, Arc::new(FixedClock(t))).unwrap();
        let mut node = at(T0);
        let who = node.requester("alice").unwrap();
        let first = node
            .offload_context(&who, "task-42", "reading the parser".into(), None)
            .unwrap();
        assert_eq!(first.expires_ms, T0 + CONTEXT_DEFAULT_TTL_MS);
        let second = at(T0 + 1)
            .offload_context(&who, "task-42", "parser done; now the tests".into(), None)
            .unwrap();
        let mut node = at(T0 + 2);
        node.offload_context(&who, "other", "another thread".into(), None)
            .unwrap();
        let back = node.reload_context(&who, Some("task-42")).unwrap();
        assert_eq!(back.id, second.id);
        assert_eq!(back.content, "parser done; now the tests");
        // Replaced: the first is forgotten, not merely superseded.
        assert!(matches!(
            node.get(&who, &first.id.to_string()),
            Err(NodeError::NoSuchMemory(_))
        ));
        let m = node.get(&who, &second.id.to_string()).unwrap();
        assert!(m.effective().is_private(), "parked private");
        assert_eq!(m.kind().as_str(), "context");
        // No name: the newest.
        assert_eq!(node.reload_context(&who, None).unwrap().name, "other");
        let names: Vec<String> = node
            .contexts(&who)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["other", "task-42"]);
    }

    #[test]
    fn a_context_expires() {
        let (_d, home, _n, _who) = test_node("alice");
        let mut node = Node::open_with_clock(&home, Arc::new(FixedClock(T0))).unwrap();
        let who = node.requester("alice").unwrap();
        node.offload_context(&who, "w", "state".into(), Some(T0 + 60_000))
            .unwrap();
        drop(node);
        let before = Node::open_with_clock(&home, Arc::new(FixedClock(T0 + 59_999))).unwrap();
        assert!(before.reload_context(&who, Some("w")).is_ok());
        let after = Node::open_with_clock(&home, Arc::new(FixedClock(T0 + 60_000))).unwrap();
        let e = after.reload_context(&who, Some("w")).unwrap_err();
        assert!(
            matches!(&e, NodeError::Unknown { kind: UnknownKind::Context, name, .. } if name == "w"),
            "{e:?}"
        );
        assert!(after.contexts(&who).unwrap().is_empty());
    }

    #[test]
    fn bad_contexts_are_refused_and_change_nothing() {
        let (_d, _home, mut node, who) = test_node("alice");
        let seq = node.store().max_seq().unwrap();
        let now = node.now_ms();
        for (name, content, expires, why) in [
            ("", "x".to_owned(), None, "name"),
            ("a b", "x".to_owned(), None, "name"),
            ("ok", " ".to_owned(), None, "empty"),
            (
                "ok",
                "x".repeat(CONTEXT_MAX_BYTES + 1),
                None,
                "at most 32768",
            ),
            ("ok", "x".to_owned(), Some(now), "past"),
            (
                "ok",
                "x".to_owned(),
                // An hour past the limit: the clock moves between `now`
                // and the call (by a millisecond, the case was accepted).
                Some(now + CONTEXT_MAX_TTL_MS + 3_600_000),
                "90 days",
            ),
        ] {
            let e = node
                .offload_context(&who, name, content, expires)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{name:?}: {e}");
        }
        assert_eq!(node.store().max_seq().unwrap(), seq, "nothing written");
        assert!(
            node.offload_context(&who, "ok", "x".repeat(CONTEXT_MAX_BYTES), None)
                .is_ok()
        );
    }

    #[test]
    fn another_agents_context_is_never_found_listed_or_replaced() {
        let (_d, _home, mut node, alice) = test_node("alice");
        node.agent_add("bob", "test", &[]).unwrap();
        let bob = node.requester("bob").unwrap();
        let parked = node
            .offload_context(&alice, "plan", "alice's secret plan".into(), None)
            .unwrap();
        // Even shared with bob, it is alice's context, not his.
        node.set_grant(&alice, &parked.id.to_string(), "agent:bob", true)
            .unwrap();
        let missing = node.reload_context(&bob, Some("nothing")).unwrap_err();
        let theirs = node.reload_context(&bob, Some("plan")).unwrap_err();
        assert_eq!(
            theirs.to_string().replace("plan", "N"),
            missing.to_string().replace("nothing", "N")
        );
        assert!(node.reload_context(&bob, None).is_err());
        assert!(node.contexts(&bob).unwrap().is_empty());
        // bob parking under the same name replaces nothing of alice's.
        node.offload_context(&bob, "plan", "bob's plan".into(), None)
            .unwrap();
        let back = node.reload_context(&alice, Some("plan")).unwrap();
        assert_eq!(back.content, "alice's secret plan");
    }
}
