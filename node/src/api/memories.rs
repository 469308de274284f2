//! Memory writes on the node (`impl Node`): add (one or many), share and
//! unshare, forget, link and archive — each turned into signed facts by
//! [`Node::commit`].
//!
//! Invariant: a memory the requester cannot see is reported exactly like one
//! that does not exist; owner-only operations on a visible memory refuse
//! others with [`NodeError::Refused`].

use crate::error::Rule;
use std::collections::HashMap;

use amos_acl::AuthorizedScopes;
use amos_acl::Visible;
use amos_protocol::{
    Fact, FactBody, Grants, LinkFact, MemoryAcl, MemoryContent, MemoryFixed, MemoryId, MemoryText,
    MemoryTombstone, MemoryType, Relation, Scope, Validity, check_tags, check_text, check_unit,
};
use rand::RngExt;
use serde::Serialize;

use crate::api::recall::access_terms;
use crate::error::{NodeError, Result};
use crate::store::memory::MemoryRecord;

use crate::api::node::Node;
use crate::api::signing::{admit_local, sign_each};

/// A new memory as a caller describes it.
#[derive(Debug, Clone)]
pub struct NewMemory {
    /// The text.
    pub text: String,
    /// Its memory type.
    pub kind: MemoryType,
    /// The scopes it is shared with (empty: private).
    pub share: Vec<Scope>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Importance, a factor of its score.
    pub importance: f32,
    /// Pinned: no freshness decay, first into a pack.
    pub pinned: bool,
    /// When it stops being visible (Unix ms; `None`: never).
    pub expires_ms: Option<u64>,
    /// The memory this one replaces (it must be visible to the requester).
    pub supersedes: Option<MemoryId>,
    /// When the content was true in the world.
    pub validity: Validity,
}

impl NewMemory {
    /// A private `note` of importance 0.5, with no tags, pin or expiry.
    pub fn new(text: impl Into<String>) -> Self {
        NewMemory {
            text: text.into(),
            kind: MemoryType::default(),
            share: Vec::new(),
            tags: Vec::new(),
            importance: 0.5,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Validity::default(),
        }
    }
}

/// A validity's ends must be in order; an unset start is the memory's
/// creation at `created_ms`.
pub(crate) fn check_validity(v: &Validity, created_ms: u64) -> Result<()> {
    if let Some(to) = v.to_ms
        && to <= v.from_ms.unwrap_or(created_ms)
    {
        return Err(NodeError::BadInput(match v.from_ms {
            Some(_) => "valid-to must be later than valid-from".into(),
            None => {
                "valid-to must be later than valid-from, which defaults to the memory's creation"
                    .into()
            }
        }));
    }
    Ok(())
}

/// A superseder's valid time must not start before the memory it replaces
/// starts (`old`, as the requester sees it): the old one's valid time ends
/// where the new one's starts (docs/design.md §12), and would end before it
/// began. Starting at the same time is allowed: the old one was never true.
pub(crate) fn check_supersession(old: &MemoryRecord, new_from_ms: u64) -> Result<()> {
    let old_from = old.valid_from_ms();
    if new_from_ms >= old_from {
        return Ok(());
    }
    let at = crate::clock::rfc3339;
    Err(NodeError::BadInput(format!(
        "memory {}, which this one replaces, starts at {}: a valid-from of {} would end it \
         before it starts; give one at or after {}",
        old.id,
        at(old_from),
        at(new_from_ms),
        at(old_from)
    )))
}

/// The encoder similarity (cosine, all-MiniLM-L6-v2's scale) from which a
/// visible memory is reported as saying nearly what a new one says. Set on
/// node/eval/deep's 406 English memories, all distinct statements: each
/// one's nearest other memory is at 0.532 (median), 0.674 (90th
/// percentile), 0.724 (95th), 0.766 (98th) — so at 0.72 about one write in
/// twenty of a distinct fact gets a hint, while a restatement or a changed
/// fact about the same thing (0.71–0.85 in the tests) gets one.
pub const SIMILAR_THRESHOLD: f32 = 0.72;

/// At most this many similar memories are reported on a write.
pub const SIMILAR_MAX: usize = 3;

/// How many nearest memories the lookup reads first (then four times as
/// many while the gate leaves too few above the threshold).
const SIMILAR_POOL: usize = 10;

/// The characters of a similar memory's excerpt.
const EXCERPT_CHARS: usize = 80;

/// A visible memory close to a new one ([`Node::add_noting_similar`]).
#[derive(Debug, Clone, Serialize)]
pub struct Similar {
    /// The similar memory.
    #[serde(serialize_with = "as_string")]
    pub id: MemoryId,
    /// Encoder cosine similarity of the two texts.
    pub similarity: f32,
    /// Its first words on one line (`…` when cut).
    pub excerpt: String,
}

/// What [`Node::add_noting_similar`] wrote and found.
#[derive(Debug, Clone)]
pub struct Added {
    /// The new memory.
    pub id: MemoryId,
    /// Visible memories that say nearly the same, most similar first.
    pub similar: Vec<Similar>,
}

fn as_string<S: serde::Serializer>(id: &MemoryId, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(id)
}

/// `text` on one line, at most `max` characters (then `…`).
fn excerpt(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

impl Node {
    // ---------------------------------------------------------------- memories

    /// Store a new memory owned by the requester. Default visibility: private.
    pub fn add(&mut self, who: &AuthorizedScopes, new: NewMemory) -> Result<MemoryId> {
        self.add_encoded(who, new).map(|(id, _)| id)
    }

    /// [`Node::add`], and the new memory's encoder vector (its first
    /// window), if the encoder took it now. One memory is encoded at once;
    /// bulk writes leave theirs pending.
    fn add_encoded(
        &mut self,
        who: &AuthorizedScopes,
        new: NewMemory,
    ) -> Result<(MemoryId, Option<Vec<f32>>)> {
        let ids = self.add_many(vec![(who, new)])?;
        let id = ids
            .into_iter()
            .next()
            .ok_or_else(|| NodeError::Corrupt("add produced no id".into()))?;
        Ok((id, self.encode_now(id)))
    }

    /// [`Node::add`], and the memories the writer can see that say nearly
    /// the same ([`Added::similar`]): a hint to supersede one of them
    /// instead of piling up contradictions (issue 39 item 7). Never fails
    /// the write it follows: a failed lookup is logged and finds none.
    pub fn add_noting_similar(&mut self, who: &AuthorizedScopes, new: NewMemory) -> Result<Added> {
        let supersedes = new.supersedes;
        let (id, vector) = self.add_encoded(who, new)?;
        let skip: Vec<MemoryId> = std::iter::once(id).chain(supersedes).collect();
        let similar = match vector.map(|v| self.similar_to(who, &v, &skip)) {
            None => Vec::new(),
            Some(Ok(similar)) => similar,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "similar memories not looked up");
                Vec::new()
            }
        };
        Ok(Added { id, similar })
    }

    /// The visible, unarchived memories whose encoder similarity to
    /// `vector` (an encoder vector) reaches [`SIMILAR_THRESHOLD`], most
    /// similar first, at most [`SIMILAR_MAX`], leaving out `skip`. The
    /// encoder index offers only memories carrying the requester's access
    /// terms and the gate reads each before it counts, so nothing the
    /// requester cannot see is read, compared or reported. A memory still
    /// pending has no encoder vector and is not compared (the static
    /// model's cosines are on another scale). Nothing is ranked: the index
    /// is asked for more until every memory above the threshold is read or
    /// [`SIMILAR_MAX`] of them are visible.
    fn similar_to(
        &mut self,
        who: &AuthorizedScopes,
        vector: &[f32],
        skip: &[MemoryId],
    ) -> Result<Vec<Similar>> {
        let now = self.now_ms();
        let access = access_terms(who);
        let Some((index, _, store)) = self.encoder_parts()? else {
            return Ok(Vec::new());
        };
        let mut limit = SIMILAR_POOL;
        let mut found: Vec<(f32, Visible<MemoryRecord>)> = loop {
            let near = index.search(vector, access.as_deref(), skip, limit)?;
            let exhausted = near.len() < limit;
            let close: HashMap<MemoryId, f32> = near
                .into_iter()
                .filter(|(_, s)| *s >= SIMILAR_THRESHOLD)
                .collect();
            let beyond = close.len() < limit;
            let mut ids: Vec<MemoryId> = close.keys().copied().collect();
            ids.sort_unstable();
            let found: Vec<_> = store
                .visible(who, &ids, now)?
                .into_iter()
                .filter(|m| !m.archived)
                .filter_map(|m| close.get(&m.id).map(|s| (*s, m)))
                .collect();
            if exhausted || beyond || found.len() >= SIMILAR_MAX {
                break found;
            }
            limit *= 4;
        };
        found.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        found.truncate(SIMILAR_MAX);
        let shown: Vec<MemoryId> = found.iter().map(|(_, m)| m.id).collect();
        self.audit_reads(who, &shown, "add");
        Ok(found
            .into_iter()
            .map(|(similarity, m)| Similar {
                id: m.id,
                similarity,
                excerpt: excerpt(&m.content, EXCERPT_CHARS),
            })
            .collect())
    }

    /// Store several memories in one transaction (all or none), each owned by
    /// its requester. The same checks and facts as [`Node::add`].
    pub fn add_many(
        &mut self,
        items: Vec<(&AuthorizedScopes, NewMemory)>,
    ) -> Result<Vec<MemoryId>> {
        let now = self.now_ms();
        let origin = self.node_id();
        let mut rng = rand::rng();
        let mut prepared = Vec::with_capacity(items.len());
        for (who, new) in items {
            let owner = who.requester().cloned().ok_or_else(|| {
                NodeError::BadInput("a memory needs an owner: pass --as AGENT".into())
            })?;
            check_text(&new.text)?;
            check_tags(&new.tags)?;
            check_unit("importance", new.importance)?;
            if new.expires_ms.is_some_and(|e| e <= now) {
                return Err(NodeError::BadInput(
                    "expiry is in the past: a memory must expire after it is made".into(),
                ));
            }
            check_validity(&new.validity, now)?;
            if let Some(old) = new.supersedes {
                // Only what the requester can see may be replaced: a hidden
                // id reads as missing, as everywhere else.
                let old = self.gated(who, &old.to_string())?;
                check_supersession(&old, new.validity.from_ms.unwrap_or(now))?;
            }
            let id = MemoryId::new(now, rng.random());
            let fixed = MemoryFixed {
                owner,
                created_ms: now,
                origin,
            };
            let grants = new
                .share
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
                .collect::<Result<Grants>>()?;
            prepared.push((id, fixed, grants, new));
        }
        let ids = prepared.iter().map(|p| p.0).collect();
        let me = self.identity.node_id();
        let identity = &self.identity;
        self.store.write(|tx| {
            let mut checked: Vec<Scope> = Vec::new();
            let mut unsigned = Vec::with_capacity(2 * prepared.len());
            for (id, fixed, grants, new) in prepared {
                for s in grants.iter() {
                    if !checked.contains(s) {
                        Self::check_grant_target(tx, s)?;
                        checked.push(s.clone());
                    }
                }
                let content = FactBody::MemoryContent(MemoryContent {
                    id,
                    fixed: fixed.clone(),
                    kind: new.kind,
                    text: MemoryText::Plain(new.text),
                    tags: new.tags,
                    importance: new.importance,
                    confidence: 1.0,
                    pinned: new.pinned,
                    expires_ms: new.expires_ms,
                    supersedes: new.supersedes,
                    validity: new.validity,
                });
                let acl = FactBody::MemoryAcl(MemoryAcl { id, fixed, grants });
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: content,
                });
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: acl,
                });
            }
            // Fresh ids: each memory is one new row (content, then acl; a
            // chunk is even, so a pair never straddles two).
            sign_each(identity, unsigned, |chunk| {
                let mut facts = chunk.into_iter();
                while let Some(content) = facts.next() {
                    let acl = facts.next().ok_or_else(|| {
                        NodeError::Corrupt("a memory's content fact came without its acl".into())
                    })?;
                    tx.put_new_memory(
                        &admit_local(identity, content)?,
                        &admit_local(identity, acl)?,
                    )?;
                }
                Ok(())
            })
        })?;
        Ok(ids)
    }

    /// The memory, visible to `who`, that `who` may change: owner (or the
    /// explicit local admin when `admin_ok`), and authored here.
    fn editable(&self, who: &AuthorizedScopes, id: &str, admin_ok: bool) -> Result<MemoryRecord> {
        let rec = self.gated(who, id)?.into_inner();
        if !(who.owns(&rec) || (admin_ok && who.is_admin())) {
            return Err(NodeError::refused(
                Rule::NotOwner,
                format!(
                    "only the owner ({o}) may share, unshare or forget memory {} (docs/design.md \
                 §5.1): run it --as {o}",
                    rec.id,
                    o = rec.owner(),
                ),
            ));
        }
        if rec.origin != self.node_id() {
            return Err(NodeError::refused(
                Rule::MemoryOrigin,
                format!(
                    "memory {} originates at node {o}, and only its origin speaks for its grants and \
                 its tombstone (docs/design.md §6.2): this replica is read-only; run it on node \
                 {o} and sync",
                    rec.id,
                    o = rec.origin.short()
                ),
            ));
        }
        Ok(rec)
    }

    /// Add (`share`) or remove a grant. Owner only. Returns the new grants.
    pub fn set_grant(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        scope: &str,
        share: bool,
    ) -> Result<(MemoryId, Grants)> {
        let scope: Scope = self.resolve_scope(scope)?;
        let rec = self.editable(who, id, false)?;
        let mut grants = rec.grants.clone();
        if share {
            grants.insert(scope.clone());
        } else if scope == Scope::Private {
            return Err(NodeError::BadInput(
                "cannot unshare private; share with a scope instead".into(),
            ));
        } else {
            grants.remove(&scope);
        }
        let fixed = fixed_of(&rec);
        let out = grants.clone();
        self.commit(|tx| {
            if share {
                Self::check_grant_target(tx, &scope)?;
            }
            Ok((
                vec![FactBody::MemoryAcl(MemoryAcl {
                    id: rec.id,
                    fixed,
                    grants,
                })],
                (),
            ))
        })?;
        Ok((rec.id, out))
    }

    /// Tombstone a memory (owner only): terminal, content erased.
    pub fn forget(&mut self, who: &AuthorizedScopes, id: &str) -> Result<MemoryId> {
        let rec = self.editable(who, id, false)?;
        let body = FactBody::MemoryTombstone(MemoryTombstone {
            id: rec.id,
            fixed: fixed_of(&rec),
        });
        self.commit(|_| Ok((vec![body], ())))?;
        Ok(rec.id)
    }

    /// Link two memories the requester can both see.
    pub fn link(
        &mut self,
        who: &AuthorizedScopes,
        a: &str,
        b: &str,
        relation: Option<&str>,
        weight: f32,
    ) -> Result<()> {
        let relation = relation
            .map(Relation::parse)
            .transpose()?
            .unwrap_or_default();
        check_unit("weight", weight)?;
        let from = self.gated(who, a)?.id;
        let to = self.gated(who, b)?.id;
        if from == to {
            return Err(NodeError::BadInput("cannot link a memory to itself".into()));
        }
        self.commit(|_| {
            Ok((
                vec![FactBody::Link(LinkFact {
                    from,
                    to,
                    relation,
                    weight,
                    present: true,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    /// Archive or restore a memory locally (local-only state).
    pub fn set_archived(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        archived: bool,
    ) -> Result<bool> {
        let rec = self.gated(who, id)?;
        if !who.owns(&*rec) && !who.is_admin() {
            return Err(NodeError::refused(
                Rule::NotOwner,
                format!(
                    "only the owner ({o}) may archive or restore memory {}, or the local \
                 administrator (docs/design.md §5.1): run it --as {o}, or with --admin",
                    rec.id,
                    o = rec.owner
                ),
            ));
        }
        let mid = rec.id;
        self.store.write(|tx| tx.set_archived(&mid, archived))
    }
}

fn fixed_of(rec: &MemoryRecord) -> MemoryFixed {
    MemoryFixed {
        owner: rec.owner.clone(),
        created_ms: rec.created_ms,
        origin: rec.origin,
    }
}
