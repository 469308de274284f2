//! The gates a node built, kept for its next requests: each agent's
//! `AuthorizedScopes` that [`Node::requester`] built, and each token that
//! [`Node::authenticate`] accepted with its agent's gate — all of them
//! valid only under the store's gate stamp they were built under
//! (`store::org::gate_stamp`, drawn afresh by any write, from any
//! process, to an agent, team, project, membership or agent token). Every
//! use reads the stamp in the snapshot it would build the gate in; a
//! different stamp empties the cache and the gate is built from the store
//! exactly as without it, so a revoked token, a changed membership or a
//! removed agent is in force on the very next request.
//!
//! Must never: answer from an entry built under another stamp; keep a
//! refusal; hold a token's secret (an entry holds the stored hash, compared
//! with the presented one in constant time, as the store's row is); skip a
//! check the uncached path makes on every use (a token's expiry).
//!
//! [`Node::requester`]: crate::api::Node::requester
//! [`Node::authenticate`]: crate::api::Node::authenticate

use std::collections::HashMap;

use amos_acl::AuthorizedScopes;
use amos_protocol::AgentId;

use crate::store::tokens::StoredToken;

/// The most agents, and separately tokens, kept; one more empties the map.
const MAX_KEPT: usize = 1024;

/// A token accepted under the stamp: the hash of its secret as stored, its
/// row and its agent's gate.
struct KeptToken {
    hash: blake3::Hash,
    row: StoredToken,
    who: AuthorizedScopes,
}

/// The gates built under one gate stamp.
#[derive(Default)]
pub(crate) struct Gates {
    stamp: Option<i64>,
    agents: HashMap<AgentId, AuthorizedScopes>,
    tokens: HashMap<String, KeptToken>,
}

impl Gates {
    /// From now on, what is kept was built under `stamp`.
    fn under(&mut self, stamp: i64) {
        if self.stamp != Some(stamp) {
            self.agents.clear();
            self.tokens.clear();
            self.stamp = Some(stamp);
        }
    }

    /// `agent`'s gate, if one was built under `stamp`.
    pub(crate) fn agent(&self, stamp: i64, agent: &AgentId) -> Option<AuthorizedScopes> {
        if self.stamp != Some(stamp) {
            return None;
        }
        self.agents.get(agent).cloned()
    }

    /// Keep `who`, `agent`'s gate built under `stamp`.
    pub(crate) fn keep_agent(&mut self, stamp: i64, agent: AgentId, who: AuthorizedScopes) {
        self.under(stamp);
        if self.agents.len() >= MAX_KEPT {
            self.agents.clear();
        }
        self.agents.insert(agent, who);
    }

    /// Token `id`'s row and gate, if it was accepted under `stamp` and
    /// `presented` is the hash of its secret.
    pub(crate) fn token(
        &self,
        stamp: i64,
        id: &str,
        presented: &blake3::Hash,
    ) -> Option<(&StoredToken, &AuthorizedScopes)> {
        if self.stamp != Some(stamp) {
            return None;
        }
        let kept = self.tokens.get(id)?;
        // blake3::Hash's equality is constant-time.
        (kept.hash == *presented).then_some((&kept.row, &kept.who))
    }

    /// Keep token `row`, accepted under `stamp` with `hash` and `who`.
    pub(crate) fn keep_token(
        &mut self,
        stamp: i64,
        hash: blake3::Hash,
        row: StoredToken,
        who: AuthorizedScopes,
    ) {
        self.under(stamp);
        if self.tokens.len() >= MAX_KEPT {
            self.tokens.clear();
        }
        self.tokens
            .insert(row.id.clone(), KeptToken { hash, row, who });
    }
}
