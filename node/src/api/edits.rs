//! Editing a memory's text and reading its history (docs/design.md §4,
//! "Concurrent content edits"): a local edit becomes an automerge change in
//! a signed content fact; the origin compacts a history that outgrew its
//! budget by signing a snapshot.
//!
//! Boundary: which facts make up the text and what it reads is
//! `amos_sync::text`'s; storage is `store::text_log`'s. The gate runs before
//! anything here: only a visible memory is edited or shown.

use crate::error::Rule;
use amos_acl::AuthorizedScopes;
use amos_protocol::check_text;
use amos_protocol::{Fact, FactBody, MemoryContent, MemoryId, MemoryText, Validity};
use amos_sync::text::LogKey;
use serde::Serialize;

use crate::api::memories::{check_supersession, check_validity};
use crate::api::node::Node;
use crate::api::signing::admit_local;
use crate::error::{NodeError, Result};
use crate::store::memory::MemoryRecord;
use crate::store::text_log::{self as stored, HistoryEntry};

/// Compact an edited memory's history once its log holds more than this
/// many bytes of facts (`amos update --compact-at`, `AMOS_TEXT_COMPACT_BYTES`).
pub const DEFAULT_COMPACT_BYTES: u64 = 64 * 1024;

/// One line of `amos history`.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryLine {
    /// `created` (the plain base), `edit` or `snapshot`.
    pub kind: &'static str,
    /// The author node (full NodeId).
    pub author: String,
    /// Wall time of the fact's clock (Unix ms).
    pub wall_ms: u64,
    /// Logical part of the fact's clock.
    pub logical: u32,
    /// Bytes the fact carries (text, change or saved document); `null` for
    /// a base compacted into the snapshot. Compacted edits are not listed:
    /// the snapshot line stands for them.
    pub bytes: Option<usize>,
    /// Whether the base was compacted into the snapshot.
    pub compacted: bool,
}

impl From<HistoryEntry> for HistoryLine {
    fn from(e: HistoryEntry) -> Self {
        HistoryLine {
            kind: match e.key {
                LogKey::Base => "created",
                LogKey::Snapshot => "snapshot",
                LogKey::Edit(_) => "edit",
            },
            author: e.clock.node.to_string(),
            wall_ms: e.clock.wall_ms,
            logical: e.clock.logical,
            bytes: e.bytes,
            compacted: e.bytes.is_none(),
        }
    }
}

fn content_of(rec: &MemoryRecord, text: MemoryText) -> FactBody {
    FactBody::MemoryContent(MemoryContent {
        id: rec.id,
        fixed: amos_protocol::MemoryFixed {
            owner: rec.owner.clone(),
            created_ms: rec.created_ms,
            origin: rec.origin,
        },
        kind: rec.kind.clone(),
        text,
        tags: rec.tags.clone(),
        importance: rec.importance,
        confidence: rec.confidence,
        pinned: rec.pinned,
        expires_ms: rec.expires_ms,
        supersedes: rec.supersedes,
        validity: rec.validity,
    })
}

fn text_error(e: amos_sync::text::TextError) -> NodeError {
    match e {
        // Not damage: an edit arrived before the memory's first version.
        amos_sync::text::TextError::Incomplete => NodeError::Failed(format!(
            "memory text: {e}; sync with the memory's origin, then edit again"
        )),
        e => NodeError::Corrupt(format!("memory text: {e}")),
    }
}

impl Node {
    /// Edit a memory's text (owner, or the local admin), on the memory's
    /// origin or on a `full` peer of it. The edit travels as an automerge
    /// change (see this module), so a concurrent edit elsewhere is kept
    /// too; the origin compacts the history once it outgrows
    /// `compact_bytes`.
    pub fn update(&mut self, who: &AuthorizedScopes, id: &str, text: &str) -> Result<MemoryId> {
        self.update_with(who, id, text, DEFAULT_COMPACT_BYTES)
    }

    /// [`Node::update`] with an explicit compaction budget.
    pub fn update_with(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        text: &str,
        compact_bytes: u64,
    ) -> Result<MemoryId> {
        self.revise(who, id, Some(text), None, compact_bytes)
    }

    /// Change a memory's text, its valid time, or both (`amos update`); of
    /// `validity`, the ends given are set and the others kept:
    /// one signed content fact, as [`Node::update`] makes. A change of valid
    /// time alone travels as an empty edit (`MemoryText::Edit` with no
    /// change), so it merges like any edit.
    pub fn revise(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        text: Option<&str>,
        validity: Option<Validity>,
        compact_bytes: u64,
    ) -> Result<MemoryId> {
        if let Some(text) = text {
            check_text(text)?;
        }
        let mut rec = self.text_editable(who, id)?;
        // The ends given change; the others stay.
        let validity = validity.map(|v| Validity {
            from_ms: v.from_ms.or(rec.validity.from_ms),
            to_ms: v.to_ms.or(rec.validity.to_ms),
        });
        if let Some(v) = &validity {
            check_validity(v, rec.created_ms)?;
            // A superseder's start stays at or after the start of the
            // memory it replaces, if the requester still sees that one.
            if let Some(old) = rec.supersedes {
                match self.gated(who, &old.to_string()) {
                    Ok(old) => check_supersession(&old, v.from_ms.unwrap_or(rec.created_ms))?,
                    Err(NodeError::NoSuchMemory(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let revalidated = validity.is_some_and(|v| v != rec.validity);
        if let Some(v) = validity {
            rec.validity = v;
        }
        self.write_content(&rec, text, revalidated, compact_bytes)?;
        Ok(rec.id)
    }

    /// Pin or unpin a memory (owner, or the local admin; where its text may
    /// be edited): one signed content fact with the `pinned` register
    /// changed, travelling as an empty edit like a change of valid time.
    /// Returns whether anything changed (pinning a pinned memory signs
    /// nothing).
    pub fn set_pinned(&mut self, who: &AuthorizedScopes, id: &str, pinned: bool) -> Result<bool> {
        let mut rec = self.text_editable(who, id)?;
        if rec.pinned == pinned {
            return Ok(false);
        }
        rec.pinned = pinned;
        self.write_content(&rec, None, true, DEFAULT_COMPACT_BYTES)?;
        Ok(true)
    }

    /// Sign and store one content fact for `rec` as it now stands: an edit
    /// to `text` if given and different, else (when `fields_changed`) an
    /// empty edit carrying the changed registers; nothing otherwise.
    fn write_content(
        &mut self,
        rec: &MemoryRecord,
        text: Option<&str>,
        fields_changed: bool,
        compact_bytes: u64,
    ) -> Result<()> {
        let now = self.now_ms();
        let me = self.node_id();
        let identity = &self.identity;
        self.store.write(|tx| {
            let clock = tx.tick(now, me)?;
            let mut state = tx.text_state(&rec.id)?;
            let epoch = tx.epoch()?;
            let change = match text {
                Some(text) => state
                    .doc
                    .edit_as(text, &me, epoch.as_bytes(), &clock)
                    .map_err(text_error)?,
                None => None,
            };
            let change = match change {
                Some(change) => change,
                None if fields_changed => Vec::new(),
                None => return Ok(()),
            };
            let edit = identity.sign(Fact {
                clock,
                body: content_of(rec, MemoryText::Edit(change)),
            })?;
            tx.put_local_edit(&admit_local(identity, edit)?, state)?;
            // Only the origin compacts (a snapshot from anyone else is refused).
            if rec.origin == me {
                let (log_bytes, _) = stored::stored_bytes(tx, &rec.id)?;
                if log_bytes > compact_bytes {
                    let mut state = tx.text_state(&rec.id)?;
                    let saved = state.doc.save();
                    if saved.len() <= amos_protocol::MAX_SNAPSHOT_BYTES {
                        let snap = identity.sign(Fact {
                            clock: tx.tick(now, me)?,
                            body: content_of(rec, MemoryText::Snapshot(saved)),
                        })?;
                        tx.put(&admit_local(identity, snap)?)?;
                    }
                }
            }
            Ok(())
        })
    }

    /// The memory `who` may edit the text of: owner (or the local admin),
    /// and originating here or at a `full` peer (whose facts this node's
    /// peers accept from us as from our own operator).
    fn text_editable(&self, who: &AuthorizedScopes, id: &str) -> Result<MemoryRecord> {
        let rec = self.gated(who, id)?.into_inner();
        if !(who.owns(&rec) || who.is_admin()) {
            return Err(NodeError::refused(
                Rule::NotOwner,
                format!(
                    "only the owner ({o}) may edit memory {}, or the local administrator \
                 (docs/design.md §5.1): run it --as {o}, or with --admin",
                    rec.id,
                    o = rec.owner
                ),
            ));
        }
        if rec.origin != self.node_id() && !rec.owner_trusted {
            return Err(NodeError::refused(
                Rule::NotAFullPeer,
                format!(
                    "memory {} originates at node {o}, which is not a full peer of this node: only \
                 its origin or a full peer of it may edit it (docs/design.md §5.1); run it on \
                 node {o} and sync",
                    rec.id,
                    o = rec.origin.short()
                ),
            ));
        }
        Ok(rec)
    }

    /// The edits of a memory visible to `who`, oldest first.
    pub fn history(
        &self,
        who: &AuthorizedScopes,
        id: &str,
    ) -> Result<(MemoryId, Vec<HistoryLine>)> {
        let rec = self.gated(who, id)?.into_inner();
        let lines = self
            .store
            .read(|r| stored::history(r, &rec.id))?
            .into_iter()
            .map(HistoryLine::from)
            .collect();
        Ok((rec.id, lines))
    }
}
