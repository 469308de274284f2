//! Agent tokens (`amos agent token create|list|revoke`): bearer tokens an
//! agent's HTTP clients present to `amos serve --http` (the JSON API and
//! MCP over HTTP), and the one check of a token ([`Node::authenticate`]),
//! which turns it into its agent's gate. A token *is* its requester: no
//! request names another agent.
//!
//! A token is `amos_<id>_<secret>`: a public id (8 random bytes, hex: what
//! `amos agent token list` shows and `revoke` names) and a secret of 32
//! random bytes (hex). The node keeps the id and a BLAKE3 hash of the
//! secret, bound to the id by BLAKE3's key derivation mode. A plain hash
//! is enough: the secret has 256 random bits, so no guess or table
//! reaches it from the hash, and a slow password hash or a server-side
//! key would add nothing; a copy of the database (a backup) yields no
//! usable token. The hashes are compared in constant time
//! (`blake3::Hash`'s equality).
//!
//! Must never: store, log or return a token's secret after `create`
//! returned it; say whether a token that does not match was unknown or
//! wrong (one answer for both); write a fact (tokens are local-only).

use amos_acl::AuthorizedScopes;
use amos_protocol::AgentId;
use rand::RngExt;
use serde::Serialize;

use crate::api::node::{Node, unknown_agent};
use crate::clock::rfc3339;
use crate::error::{NodeError, Result, Rule};
use crate::store::org;
use crate::store::tokens::{self, StoredToken};

/// What every token starts with.
const PREFIX: &str = "amos_";
/// Longest label.
const MAX_LABEL: usize = 100;
/// The key derivation context the secret's hash is made in.
const HASH_CONTEXT: &str = "amos agent token v1";

/// A token as `amos agent token list` shows it (never its secret).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TokenInfo {
    /// The public id.
    pub id: String,
    /// The agent it acts as.
    pub agent: String,
    /// The operator's label.
    pub name: Option<String>,
    /// When it was made (RFC 3339).
    pub created: String,
    /// When it stops working (RFC 3339), if ever.
    pub expires: Option<String>,
    /// When it was revoked (RFC 3339), if it was.
    pub revoked: Option<String>,
    /// `active`, `expired` or `revoked`.
    pub state: &'static str,
}

impl TokenInfo {
    fn of(t: &StoredToken, now_ms: u64) -> TokenInfo {
        TokenInfo {
            id: t.id.clone(),
            agent: t.agent.clone(),
            name: t.label.clone(),
            created: rfc3339(t.created_ms),
            expires: t.expires_ms.map(rfc3339),
            revoked: t.revoked_ms.map(rfc3339),
            state: state(t, now_ms),
        }
    }
}

fn state(t: &StoredToken, now_ms: u64) -> &'static str {
    if t.revoked_ms.is_some() {
        "revoked"
    } else if t.expires_ms.is_some_and(|e| e <= now_ms) {
        "expired"
    } else {
        "active"
    }
}

/// A token just made: the only time its secret is seen.
#[derive(Debug, Clone, Serialize)]
pub struct NewToken {
    /// The whole token, to give the agent's client.
    pub token: String,
    /// What the list shows of it.
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// A request's token, checked: who it acts as.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The agent's gate, built from the org graph as stored now.
    pub who: AuthorizedScopes,
    /// The agent's id.
    pub agent: String,
    /// The token's public id.
    pub token: String,
}

fn hash(id: &str, secret: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_derive_key(HASH_CONTEXT);
    h.update(id.as_bytes());
    h.update(secret);
    h.finalize()
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `(id, secret)` of a well-formed token.
fn split(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(PREFIX)?.split_once('_')?;
    (is_hex(id, 16) && is_hex(secret, 64)).then_some((id, secret))
}

fn refused(message: &str) -> NodeError {
    NodeError::refused(Rule::BadToken, message.to_owned())
}

impl Node {
    /// Make a token for registered agent `agent`, valid until `expires_ms`
    /// (`None`: until revoked), labelled `name`. The secret is in the
    /// answer and nowhere else.
    pub fn token_create(
        &mut self,
        agent: &str,
        expires_ms: Option<u64>,
        name: Option<&str>,
    ) -> Result<NewToken> {
        let agent = AgentId::parse(agent)?;
        let node_id = self.node_id();
        self.store.read(|r| {
            if !org::agent_present(r, &agent)? {
                return Err(unknown_agent(r, node_id, &agent));
            }
            Ok(())
        })?;
        let now = self.now_ms();
        if let Some(e) = expires_ms
            && e <= now
        {
            return Err(NodeError::BadInput(format!(
                "--expires {} is not in the future",
                rfc3339(e)
            )));
        }
        let label = name.map(str::trim).filter(|l| !l.is_empty());
        if let Some(l) = label
            && (l.chars().count() > MAX_LABEL || l.chars().any(char::is_control))
        {
            return Err(NodeError::BadInput(format!(
                "--name must be at most {MAX_LABEL} characters on one line"
            )));
        }
        let id = data_encoding::HEXLOWER.encode(&rand::rng().random::<[u8; 8]>());
        let secret = data_encoding::HEXLOWER.encode(&rand::rng().random::<[u8; 32]>());
        let row = StoredToken {
            hash: hash(&id, secret.as_bytes()).as_bytes().to_vec(),
            id: id.clone(),
            agent: agent.to_string(),
            label: label.map(str::to_owned),
            created_ms: now,
            expires_ms,
            revoked_ms: None,
        };
        self.store.write(|tx| tokens::insert(tx, &row))?;
        Ok(NewToken {
            token: format!("{PREFIX}{id}_{secret}"),
            info: TokenInfo::of(&row, now),
        })
    }

    /// The tokens made here (of `agent` only, if given), oldest first.
    pub fn token_list(&self, agent: Option<&str>) -> Result<Vec<TokenInfo>> {
        let agent = agent.map(AgentId::parse).transpose()?;
        let now = self.now_ms();
        Ok(self
            .store
            .read(|r| tokens::list(r, agent.as_ref().map(AgentId::as_str)))?
            .iter()
            .map(|t| TokenInfo::of(t, now))
            .collect())
    }

    /// Revoke `agent`'s token `id`, or with `None` every token of
    /// `agent`'s; returns the ids revoked now. Naming a token that is not
    /// `agent`'s is bad input; one already revoked stays as it was.
    pub fn token_revoke(&mut self, agent: &str, id: Option<&str>) -> Result<Vec<String>> {
        let agent = AgentId::parse(agent)?;
        let now = self.now_ms();
        self.store.write(|tx| {
            if let Some(id) = id
                && tokens::get(tx, id)?.is_none_or(|t| t.agent != agent.as_str())
            {
                return Err(NodeError::BadInput(format!(
                    "agent {agent} has no token {id} (amos agent token list --agent {agent})"
                )));
            }
            tokens::revoke(tx, agent.as_str(), id, now)
        })
    }

    /// Check a bearer token: its agent's gate, or [`Rule::BadToken`] when
    /// it is malformed, unknown, wrong, revoked or expired, or its agent is
    /// no longer registered. Unknown and wrong read the same. A token
    /// accepted before, under the same gate stamp, is not read again
    /// ([`crate::api::gates`]); its expiry is checked every time.
    pub fn authenticate(&self, token: &str) -> Result<Authenticated> {
        let unknown = || refused("unknown token: not one this node issued");
        let (id, secret) = split(token.trim()).ok_or_else(unknown)?;
        let presented = hash(id, secret.as_bytes());
        let now = self.now_ms();
        let (stamp, row, who, kept) = self.store.read(|r| {
            let stamp = org::gate_stamp(r)?;
            if let Some((row, who)) = self.gates.borrow().token(stamp, id, &presented) {
                return Ok((stamp, row.clone(), who.clone(), true));
            }
            let row = tokens::get(r, id)?.ok_or_else(unknown)?;
            let stored: [u8; 32] = row.hash.as_slice().try_into().map_err(|_| unknown())?;
            if blake3::Hash::from_bytes(stored) != presented {
                return Err(unknown());
            }
            usable(&row, now)?;
            let gone = || {
                NodeError::refused(
                    Rule::BadToken,
                    format!(
                        "the token's agent {} is no longer registered on this node",
                        row.agent
                    ),
                )
            };
            let agent = AgentId::parse(&row.agent).map_err(|_| gone())?;
            let who = self.gate_in(r, &agent).map_err(|e| match e {
                NodeError::Unknown { .. } | NodeError::BadInput(_) => gone(),
                e => e,
            })?;
            Ok((stamp, row, who, false))
        })?;
        usable(&row, now)?;
        if !kept {
            self.gates
                .borrow_mut()
                .keep_token(stamp, presented, row.clone(), who.clone());
        }
        Ok(Authenticated {
            who,
            agent: row.agent,
            token: row.id,
        })
    }
}

/// Refuse a revoked or expired token.
fn usable(row: &StoredToken, now_ms: u64) -> Result<()> {
    match state(row, now_ms) {
        "revoked" => Err(refused("token revoked")),
        "expired" => Err(refused("token expired")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node::test_node;

    fn rule(e: NodeError) -> (Option<Rule>, String) {
        (e.rule(), e.to_string())
    }

    #[test]
    fn a_token_is_its_agent_until_revoked_and_its_secret_is_never_stored() {
        let (_d, _h, mut node, _) = test_node("alice");
        node.agent_add("bob", "test", &[]).unwrap();
        let t = node.token_create("alice", None, Some("laptop")).unwrap();
        assert!(
            t.token.starts_with("amos_") && t.token.len() == 86,
            "{}",
            t.token
        );
        assert_eq!(t.info.state, "active");
        assert_eq!(t.info.name.as_deref(), Some("laptop"));
        let a = node.authenticate(&t.token).unwrap();
        assert_eq!((a.agent.as_str(), a.token.as_str()), ("alice", &*t.info.id));
        assert_eq!(a.who.requester().map(|x| x.as_str()), Some("alice"));
        // The row holds the hash, not the secret.
        let (_, secret) = split(&t.token).unwrap();
        let row = node
            .store
            .read(|r| tokens::get(r, &t.info.id))
            .unwrap()
            .unwrap();
        assert_ne!(row.hash, secret.as_bytes());
        assert_eq!(row.hash.len(), 32);

        // A wrong secret, a flipped id, garbage: one answer, no hint.
        let wrong = format!("{}0", &t.token[..t.token.len() - 1]);
        let wrong = if wrong == t.token {
            format!("{}1", &t.token[..t.token.len() - 1])
        } else {
            wrong
        };
        let unknown = (
            Some(Rule::BadToken),
            "refused: unknown token: not one this node issued".to_owned(),
        );
        for bad in [wrong.as_str(), "amos_", "", "Bearer x", &t.token[..40]] {
            assert_eq!(rule(node.authenticate(bad).unwrap_err()), unknown, "{bad}");
        }

        // bob's token is bob; revoking bob's leaves alice's.
        let b = node.token_create("bob", None, None).unwrap();
        assert_eq!(node.authenticate(&b.token).unwrap().agent, "bob");
        assert_eq!(
            node.token_revoke("bob", None).unwrap(),
            vec![b.info.id.clone()]
        );
        assert_eq!(
            rule(node.authenticate(&b.token).unwrap_err()),
            (Some(Rule::BadToken), "refused: token revoked".into())
        );
        assert!(node.authenticate(&t.token).is_ok());
        // alice's id named as bob's: refused, nothing revoked.
        let e = node.token_revoke("bob", Some(&t.info.id)).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(node.authenticate(&t.token).is_ok());
        let listed = node.token_list(None).unwrap();
        let mut states: Vec<(&str, &str)> = listed.iter().map(|t| (&*t.agent, t.state)).collect();
        // Made in the same millisecond, they list in the order of their ids.
        states.sort();
        assert_eq!(states, [("alice", "active"), ("bob", "revoked")]);
    }

    /// The scopes a gate gives, as text.
    fn scopes(who: &AuthorizedScopes) -> Vec<String> {
        who.scopes().map(ToString::to_string).collect()
    }

    #[test]
    fn a_kept_gate_gives_way_to_the_next_change_from_this_process_or_another() {
        let (_d, home, mut node, _) = test_node("alice");
        node.agent_add("bob", "test", &[]).unwrap();
        let team = node.team_create("apollo", None).unwrap().to_string();
        let t = node.token_create("alice", None, None).unwrap();
        let b = node.token_create("bob", None, None).unwrap();
        let solo = scopes(&node.authenticate(&t.token).unwrap().who);
        let in_team = |s: &[String]| s.iter().any(|x| x.starts_with("team:"));
        assert!(!in_team(&solo), "{solo:?}");
        // Kept: the second check answers the same from the cache.
        assert_eq!(scopes(&node.authenticate(&t.token).unwrap().who), solo);
        assert_eq!(scopes(&node.requester("alice").unwrap()), solo);
        assert!(
            node.gates
                .borrow()
                .token(stamp(&node), &t.info.id, &hash_of(&t.token))
                .is_some()
        );
        // Another process (another connection to the store) adds alice to
        // the team: her very next check carries it, by token and by name.
        let mut other = Node::open(&home).unwrap();
        // (Each asked first by name, then by token: one kept gate read
        // under a new stamp empties the cache of both.)
        other.team_member(&team, "alice", true).unwrap();
        let joined = scopes(&node.requester("alice").unwrap());
        assert!(in_team(&joined), "{joined:?}");
        assert_eq!(scopes(&node.requester("alice").unwrap()), joined);
        other.team_member(&team, "alice", false).unwrap();
        assert_eq!(scopes(&node.authenticate(&t.token).unwrap().who), solo);
        other.team_member(&team, "alice", true).unwrap();
        assert_eq!(scopes(&node.authenticate(&t.token).unwrap().who), joined);
        // ...and removes her again.
        other.team_member(&team, "alice", false).unwrap();
        assert_eq!(scopes(&node.requester("alice").unwrap()), solo);
        assert_eq!(scopes(&node.authenticate(&t.token).unwrap().who), solo);
        // Revoked by the other: refused on the next check; bob's, kept
        // too, still works.
        assert!(node.authenticate(&b.token).is_ok());
        other.token_revoke("alice", None).unwrap();
        assert_eq!(
            rule(node.authenticate(&t.token).unwrap_err()),
            (Some(Rule::BadToken), "refused: token revoked".into())
        );
        assert_eq!(node.authenticate(&b.token).unwrap().agent, "bob");
        // Revoked by this node itself: the same.
        node.token_revoke("bob", None).unwrap();
        assert_eq!(
            rule(node.authenticate(&b.token).unwrap_err()),
            (Some(Rule::BadToken), "refused: token revoked".into())
        );
        // A wrong secret for a kept token's id is refused as unknown.
        let c = node.token_create("alice", None, None).unwrap();
        assert!(node.authenticate(&c.token).is_ok());
        let last = if c.token.ends_with('0') { '1' } else { '0' };
        let wrong = format!("{}{last}", &c.token[..c.token.len() - 1]);
        assert_eq!(
            rule(node.authenticate(&wrong).unwrap_err()),
            (
                Some(Rule::BadToken),
                "refused: unknown token: not one this node issued".into()
            )
        );
    }

    fn stamp(node: &Node) -> i64 {
        node.store.read(|r| org::gate_stamp(r)).unwrap()
    }

    fn hash_of(token: &str) -> blake3::Hash {
        let (id, secret) = split(token).unwrap();
        hash(id, secret.as_bytes())
    }

    #[test]
    fn an_expired_token_fails_and_a_past_expiry_or_unknown_agent_is_refused() {
        use crate::clock::MovingClock;
        use std::sync::atomic::{AtomicU64, Ordering};
        let (_d, home, node, _) = test_node("alice");
        drop(node);
        let now = 1_800_000_000_000;
        let clock = std::sync::Arc::new(MovingClock(AtomicU64::new(now)));
        let mut node = Node::open_with_clock(&home, clock.clone()).unwrap();
        let e = node.token_create("alice", Some(now), None).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        let unknown = node.token_create("zed", None, None).unwrap_err();
        assert!(matches!(unknown, NodeError::Unknown { .. }), "{unknown:?}");
        let t = node.token_create("alice", Some(now + 1000), None).unwrap();
        clock.0.store(now + 999, Ordering::Relaxed);
        assert!(node.authenticate(&t.token).is_ok());
        clock.0.store(now + 1000, Ordering::Relaxed);
        assert_eq!(
            rule(node.authenticate(&t.token).unwrap_err()),
            (Some(Rule::BadToken), "refused: token expired".into())
        );
        assert_eq!(node.token_list(Some("alice")).unwrap()[0].state, "expired");
    }
}
