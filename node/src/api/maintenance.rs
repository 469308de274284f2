//! Operations on the node as a whole: status, check, doctor, index rebuild,
//! backup/restore, and the hygiene jobs (retention, consolidate).
//!
//! Hygiene jobs are dry runs unless asked to apply. Retention touches only
//! local-only state (the `archived` flag). Consolidation archives sources
//! locally and links the survivor to each (a signed link fact); it never
//! tombstones or edits a memory.

use crate::error::Rule;
use std::path::Path;

use amos_acl::AuthorizedScopes;
use amos_protocol::{FactBody, Hlc, LinkFact, MemoryId, Relation};
use rand::RngExt;
use serde::Serialize;

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::index::{CatchUp, RecallIndex};
use crate::progress::{Feedback, Progress};
use crate::recall::similarity::{NEAR_DUPLICATE, near_duplicates, normalize_text, token_set};
use crate::store::{self, hygiene, schema::SCHEMA_VERSION, status};

/// What `amos status` shows: the node at a glance.
#[derive(Debug, Serialize)]
pub struct Status {
    /// This node's id.
    pub node_id: String,
    /// Its name.
    pub name: String,
    /// Its home directory.
    pub home: String,
    /// The store's schema version.
    pub schema_version: u32,
    /// The store's log epoch (new after a restore).
    pub epoch: String,
    /// The store's latest `seq`.
    pub seq: i64,
    /// Memories held with their content: live and archived.
    pub memories: i64,
    /// Of `memories`, those recall finds (not archived).
    pub memories_live: i64,
    /// Of `memories`, those archived (kept, out of recall).
    pub memories_archived: i64,
    /// Forgotten memories: tombstones, their content erased (not in `memories`).
    pub memories_forgotten: i64,
    /// Agents known.
    pub agents: i64,
    /// Teams known.
    pub teams: i64,
    /// Projects known.
    pub projects: i64,
    /// Memory rows the full-text index has yet to catch up.
    pub index_lag: i64,
    /// The registered peers.
    pub peers: Vec<crate::store::replica::PeerInfo>,
    /// Facts deferred until they can be applied.
    pub quarantined: Vec<crate::store::replica::DeferredInfo>,
    /// Refused facts in the audit log.
    pub audit_refusals: i64,
    /// Refusals recorded since the previous `amos status`.
    pub audit_refusals_new: i64,
    /// The sentence encoder's name and its memories encoded and pending
    /// (pending ones are found by their static vectors until `serve`'s
    /// background catch-up or `amos index catch-up` encodes them); `None`
    /// when the encoder is off on this node.
    pub encoder: Option<crate::api::node::EncoderStatus>,
}

/// What `amos check` found.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// Integrity ok, schema current, index complete, no dangling link.
    pub ok: bool,
    /// The store's schema version.
    pub schema_version: u32,
    /// SQLite's `quick_check` (`ok` when sound).
    pub integrity: String,
    /// Memories held.
    pub memories: i64,
    /// Documents in the full-text index, caught up.
    pub index_docs: u64,
    /// The index's lag once `check` has caught it up (0 unless that failed).
    pub index_lag: i64,
    /// The lag `check` found and caught up before it counted the index.
    pub index_caught_up: i64,
    /// Links to a memory this store does not hold.
    pub dangling_links: i64,
    /// Present links whose endpoint memory is missing (at most 100 listed).
    pub dangling: Vec<DanglingLink>,
}

/// A present link that points to a memory this store does not hold.
#[derive(Debug, Serialize)]
pub struct DanglingLink {
    /// The memory it starts from.
    pub from: String,
    /// The memory it points to (not held).
    pub to: String,
    /// Its relation.
    pub relation: String,
}

/// What `amos index rebuild` did.
#[derive(Debug, Serialize)]
pub struct RebuildReport {
    /// Memories indexed.
    pub indexed: usize,
    /// Documents in the new full-text index.
    pub docs: u64,
    /// Its size.
    pub index_bytes: u64,
    /// Vectors made by the embedding model (memories with no token it knows
    /// get none).
    pub vectors: u64,
    /// Size of the vector index file.
    pub vector_bytes: u64,
    /// Memories left for the encoder (`amos index catch-up`, or `serve`'s
    /// background catch-up); `None` when the encoder is off.
    pub encoder_pending: Option<u64>,
}

/// What `amos index catch-up` did.
#[derive(Debug, Serialize)]
pub struct EncoderCatchUpReport {
    /// The encoder; `None` when it is off on this node.
    pub model: Option<String>,
    /// Memories encoded now.
    pub encoded: usize,
    /// Memories still waiting (0 unless `--max` stopped it).
    pub pending: u64,
    /// Wall time.
    pub seconds: f64,
}

/// What a hygiene job did or would do to one memory.
#[derive(Debug, Serialize)]
pub struct HygieneAction {
    /// The memory.
    pub id: String,
    /// What is done to it (`archive`).
    pub action: &'static str,
    /// Why.
    pub reason: String,
    /// For consolidation: the surviving memory this one merges into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
}

/// What `amos retention` or `amos consolidate` did, or would do.
#[derive(Debug, Serialize)]
pub struct HygieneReport {
    /// Whether the actions were carried out (`--apply`).
    pub applied: bool,
    /// One per memory.
    pub actions: Vec<HygieneAction>,
}

/// A consolidation's merge: (source, survivor).
type Merge = (MemoryId, MemoryId);

/// The relation of the link from a consolidation's survivor to each source.
pub const CONSOLIDATES: &str = "consolidates";

/// Default idle period after which `amos retention` archives a memory: 90 days.
pub const DEFAULT_IDLE_MS: u64 = 90 * crate::recall::rank::DAY_MS;

/// What retention archives besides expired memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Archive memories idle (not recalled, not edited) this long; `None`
    /// archives only expired ones.
    pub idle_ms: Option<u64>,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            idle_ms: Some(DEFAULT_IDLE_MS),
        }
    }
}

/// What `amos backup` wrote and which rotated backups it removed.
#[derive(Debug, Serialize)]
pub struct BackupReport {
    /// The backup file written.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// Older backups removed by rotation.
    pub removed: Vec<String>,
}

/// `YYYYMMDDTHHMMSSmmmZ` for a Unix time in ms (sorts by time).
fn backup_stamp(ms: u64) -> String {
    crate::clock::rfc3339(ms)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect()
}

fn is_backup_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 19
        && b[8] == b'T'
        && b[18] == b'Z'
        && b[..8].iter().chain(&b[9..18]).all(u8::is_ascii_digit)
}

impl Node {
    /// Memory rows the full-text index has yet to catch up.
    pub fn index_lag(&mut self) -> Result<i64> {
        let store = &self.store;
        let idx = RecallIndex::open(self.home())?;
        idx.lag(store)
    }

    /// `amos status`: the node at a glance; moves the "new refusals" mark.
    pub fn status(&mut self) -> Result<Status> {
        self.status_marking(true)
    }

    /// The same as [`Node::status`] without moving the "new refusals" mark
    /// (for a page that only looks: the console).
    pub fn status_peek(&mut self) -> Result<Status> {
        self.status_marking(false)
    }

    fn status_marking(&mut self, mark_seen: bool) -> Result<Status> {
        // Refusals since the last status: remember the newest audit entry seen.
        let mark = self.store.read(|r| status::audit_mark(r))?;
        let audit_refusals_new = self
            .store
            .read(|r| status::audit_refusals_after(r, mark.seen))?;
        if mark_seen && mark.newest > mark.seen {
            self.store
                .write(|tx| status::mark_audit_seen(tx, mark.newest))?;
        }
        let org = self.store.read(|r| status::org_counts(r))?;
        let counts = self.store.read(|r| status::memory_counts(r))?;
        Ok(Status {
            node_id: self.node_id().to_string(),
            name: self.name().to_owned(),
            home: self.home().root().display().to_string(),
            schema_version: self.store.schema_version()?,
            epoch: self.store.epoch()?,
            seq: self.store.max_seq()?,
            memories: counts.live + counts.archived,
            memories_live: counts.live,
            memories_archived: counts.archived,
            memories_forgotten: counts.forgotten,
            agents: org.agents,
            teams: org.teams,
            projects: org.projects,
            index_lag: self.index_lag()?,
            peers: self.peer_list()?,
            quarantined: self.quarantined()?,
            audit_refusals: self.store.read(|r| status::audit_refusals(r))?,
            audit_refusals_new,
            encoder: self.encoder_status()?,
        })
    }

    /// Integrity of store, index and links.
    pub fn check(&mut self) -> Result<CheckReport> {
        let integrity = self.store.read(|r| status::quick_check(r))?;
        let schema_version = self.store.schema_version()?;
        let memories = self.store.read(|r| status::live_memories(r))?;
        let dangling_links = self.store.read(|r| status::dangling_links(r))?;
        let show = |b: &[u8]| {
            MemoryId::from_slice(b)
                .map_or_else(|| data_encoding::HEXLOWER.encode(b), |id| id.to_string())
        };
        let dangling = self
            .store
            .read(|r| status::dangling_link_rows(r, 100))?
            .into_iter()
            .map(|row| DanglingLink {
                from: show(&row.from),
                to: show(&row.to),
                relation: row.relation,
            })
            .collect();
        // The index is counted caught up, so that `index_docs` compares with
        // the store; the lag reported is the index's after it (as `status`
        // and `doctor` would then say), the lag found before apart.
        let index_caught_up = self.index_lag()?;
        let (index, store) = self.caught_up_index()?;
        let (index_docs, _) = index.stats();
        let live_unarchived = store.read(|r| status::live_unarchived_memories(r))?;
        let index_lag = self.index_lag()?;
        Ok(CheckReport {
            ok: integrity == "ok"
                && schema_version == SCHEMA_VERSION
                && index_docs == live_unarchived as u64
                && dangling_links == 0,
            schema_version,
            integrity,
            memories,
            index_docs,
            index_lag,
            index_caught_up,
            dangling_links,
            dangling,
        })
    }

    /// Drop the index and rebuild it from the store (a progress bar on
    /// stderr when `feedback` allows and it is a terminal).
    pub fn index_rebuild(&mut self, feedback: Feedback) -> Result<RebuildReport> {
        let progress = Progress::bar(feedback, "index", "memories", 0);
        let (CatchUp { indexed, .. }, (docs, index_bytes)) = self.rebuild_index(&progress)?;
        drop(progress);
        let progress = Progress::bar(feedback, "vectors", "memories", 0);
        let (_, (vectors, vector_bytes)) = self.rebuild_vectors(&progress)?;
        drop(progress);
        self.rebuild_encoder()?;
        let encoder_pending = self.encoder_status()?.map(|s| s.progress.pending);
        Ok(RebuildReport {
            indexed,
            docs,
            index_bytes,
            vectors,
            vector_bytes,
            encoder_pending,
        })
    }

    /// Encode the memories waiting for the encoder (at most `max`), with a
    /// progress bar on stderr when `feedback` allows and it is a terminal.
    pub fn index_catch_up(
        &mut self,
        feedback: Feedback,
        max: Option<usize>,
    ) -> Result<EncoderCatchUpReport> {
        let started = std::time::Instant::now();
        let Some(before) = self.encoder_status()? else {
            return Ok(EncoderCatchUpReport {
                model: None,
                encoded: 0,
                pending: 0,
                seconds: 0.0,
            });
        };
        let max = max.unwrap_or(usize::MAX);
        let len = before.progress.pending.min(max as u64);
        let progress = Progress::bar(feedback, "encoder", "memories", len);
        let encoded = self.encoder_catch_up(max, &progress)?;
        drop(progress);
        let pending = self.encoder_status()?.map_or(0, |s| s.progress.pending);
        Ok(EncoderCatchUpReport {
            model: Some(before.model),
            encoded,
            pending,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Online backup to `file` (SQLite's online backup API: consistent while
    /// others write); atomic (written beside, then renamed).
    pub fn backup(&self, file: &Path) -> Result<u64> {
        let tmp = file.with_extension("amos-backup-tmp");
        let _ = std::fs::remove_file(&tmp);
        self.store.backup_to(&tmp)?;
        std::fs::rename(&tmp, file)
            .map_err(NodeError::io(format!("writing {}", file.display())))?;
        Ok(std::fs::metadata(file).map(|m| m.len()).unwrap_or(0))
    }

    /// `amos backup FILE [--keep N]`. Without `keep`, writes FILE. With
    /// `keep = N`, writes `FILE.<UTC time as YYYYMMDDTHHMMSSmmmZ>` (names sort
    /// by age) and deletes all but the N newest files so named beside it.
    pub fn backup_rotating(&self, file: &Path, keep: Option<usize>) -> Result<BackupReport> {
        let Some(keep) = keep else {
            let bytes = self.backup(file)?;
            return Ok(BackupReport {
                file: file.display().to_string(),
                bytes,
                removed: Vec::new(),
            });
        };
        if keep == 0 {
            return Err(NodeError::BadInput("--keep must be at least 1".into()));
        }
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| NodeError::BadInput(format!("{} is not a file name", file.display())))?;
        let target = file.with_file_name(format!("{name}.{}", backup_stamp(self.now_ms())));
        let bytes = self.backup(&target)?;
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let mut rotated: Vec<String> = std::fs::read_dir(&dir)
            .map_err(NodeError::io(format!("reading {}", dir.display())))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| {
                n.strip_prefix(name)
                    .and_then(|r| r.strip_prefix('.'))
                    .is_some_and(is_backup_stamp)
            })
            .collect();
        rotated.sort();
        let excess = rotated.len().saturating_sub(keep);
        let mut removed = Vec::new();
        for old in rotated.into_iter().take(excess) {
            let path = dir.join(&old);
            std::fs::remove_file(&path)
                .map_err(NodeError::io(format!("removing {}", path.display())))?;
            removed.push(path.display().to_string());
        }
        Ok(BackupReport {
            file: target.display().to_string(),
            bytes,
            removed,
        })
    }

    /// Replace the store with a backup. Refuses to overwrite a store holding
    /// memories unless `force`. Gives the store a new log epoch and drops the
    /// index (it rebuilds on next use).
    pub fn restore(&mut self, file: &Path, force: bool) -> Result<()> {
        if !status::is_backup(file, SCHEMA_VERSION)? {
            return Err(NodeError::BadInput(format!(
                "{} is not an amos backup",
                file.display()
            )));
        }
        if self.store.read(|r| status::memory_rows(r))? > 0 && !force {
            return Err(NodeError::refused(
                Rule::StoreNotEmpty,
                "the store holds memories and a restore replaces the whole store: pass --force \
                 to replace them (`amos backup FILE` keeps them first)"
                    .into(),
            ));
        }
        let epoch: [u8; 16] = rand::rng().random();
        self.store.restore_from(file, epoch)?;
        let _ = std::fs::remove_dir_all(self.home().index_dir());
        Ok(())
    }

    /// Archive expired memories (dry run unless `apply`); no idle rule.
    pub fn retention(&mut self, apply: bool) -> Result<HygieneReport> {
        self.retention_with(&RetentionPolicy { idle_ms: None }, apply)
    }

    /// Archive expired and long-idle memories (dry run unless `apply`).
    /// Idle: neither recalled (search, pack, feedback) nor edited for
    /// `policy.idle_ms`. Pinned memories are exempt. Archiving is local-only
    /// and undone by `amos restore-memory ID`.
    pub fn retention_with(
        &mut self,
        policy: &RetentionPolicy,
        apply: bool,
    ) -> Result<HygieneReport> {
        let now = self.now_ms();
        let mut ids = Vec::new();
        let mut actions = Vec::new();
        for row in self.store.read(|r| hygiene::retention_candidates(r))? {
            let (id, created, v, last_access, expires) = (
                row.id,
                row.created_ms,
                row.v,
                row.last_access_ms,
                row.expires_ms,
            );
            let reason = if expires.is_some_and(|e| e as u64 <= now) {
                "expired".to_owned()
            } else {
                let updated = v
                    .as_deref()
                    .and_then(Hlc::from_sort_key)
                    .map_or(0, |h| h.wall_ms);
                let active = (created.max(0) as u64)
                    .max(updated)
                    .max(last_access.unwrap_or(0).max(0) as u64);
                match policy.idle_ms {
                    Some(idle) if now.saturating_sub(active) >= idle => format!(
                        "idle: not recalled or edited for {} days",
                        now.saturating_sub(active) / crate::recall::rank::DAY_MS
                    ),
                    _ => continue,
                }
            };
            ids.push(id);
            actions.push(HygieneAction {
                id: id.to_string(),
                action: "archive",
                reason,
                into: None,
            });
        }
        self.archive_for_hygiene(&ids, actions, apply)
    }

    /// Merge exact and near duplicates (token-set Jaccard ≥
    /// [`NEAR_DUPLICATE`]) among memories with the same owner, grants and
    /// type, so that merging never changes who sees what. The oldest (pinned
    /// first) survives; each source gets a signed `consolidates` link from
    /// the survivor and is archived locally, so it stays reachable and
    /// restorable (and a restored source is not merged again); nothing is
    /// tombstoned. Pinned memories are never sources.
    /// Dry run unless `apply`.
    pub fn consolidate(&mut self, apply: bool) -> Result<HygieneReport> {
        let rows = self.store.read(|r| hygiene::consolidation_candidates(r))?;
        let (merges, actions) = self.plan_consolidation(rows)?;
        if apply && !merges.is_empty() {
            let relation = Relation::parse(CONSOLIDATES)?;
            self.commit(|tx| {
                let mut bodies = Vec::new();
                for (source, keep) in &merges {
                    tx.set_archived(source, true)?;
                    bodies.push(FactBody::Link(LinkFact {
                        from: *keep,
                        to: *source,
                        relation: relation.clone(),
                        weight: 1.0,
                        present: true,
                    }));
                }
                Ok((bodies, ()))
            })?;
        }
        Ok(HygieneReport {
            applied: apply,
            actions,
        })
    }

    /// What [`Node::consolidate`] would merge among the memories `who` may
    /// see, and nothing else (MCP `memory_consolidate`): always a dry run.
    /// The gate runs before the grouping, so a memory `who` cannot see is
    /// neither a source, nor a survivor, nor counted.
    pub fn consolidation_preview(&self, who: &AuthorizedScopes) -> Result<HygieneReport> {
        let rows = self.store.read(|r| hygiene::consolidation_candidates(r))?;
        let ids: Vec<MemoryId> = rows.iter().map(|r| r.id).collect();
        let visible: std::collections::HashSet<MemoryId> = self
            .store
            .visible(who, &ids, self.now_ms())?
            .iter()
            .map(|m| m.id())
            .collect();
        let rows = rows
            .into_iter()
            .filter(|r| visible.contains(&r.id))
            .collect();
        let (_, actions) = self.plan_consolidation(rows)?;
        Ok(HygieneReport {
            applied: false,
            actions,
        })
    }

    /// The merges (source, survivor) among `rows`, and their report lines.
    fn plan_consolidation(
        &self,
        rows: Vec<hygiene::ConsolidationCandidate>,
    ) -> Result<(Vec<Merge>, Vec<HygieneAction>)> {
        let mut ids = Vec::new();
        let mut groups = Vec::new();
        let mut norms = Vec::new();
        let mut pinned = Vec::new();
        for row in rows {
            let id = row.id;
            let content = row.content;
            ids.push(id);
            norms.push(normalize_text(&content));
            groups.push(((row.owner, row.grants, row.kind), token_set(&content)));
            pinned.push(row.pinned);
        }
        let similar = near_duplicates(&groups, NEAR_DUPLICATE);
        let mut merges: Vec<(MemoryId, MemoryId)> = Vec::new();
        let mut actions = Vec::new();
        for (i, sim) in similar.iter().enumerate() {
            let Some((keep, jaccard)) = *sim else {
                continue;
            };
            // Pinned memories are never sources; a source merged before and
            // restored since (its `consolidates` link is there) stays restored.
            if pinned[i] || self.consolidated(&ids[keep], &ids[i])? {
                continue;
            }
            let reason = if norms[i] == norms[keep] {
                format!("duplicate of {}", ids[keep])
            } else {
                format!(
                    "near-duplicate of {} (token-set Jaccard {jaccard:.2})",
                    ids[keep]
                )
            };
            merges.push((ids[i], ids[keep]));
            actions.push(HygieneAction {
                id: ids[i].to_string(),
                action: "archive",
                reason,
                into: Some(ids[keep].to_string()),
            });
        }
        Ok((merges, actions))
    }

    /// Whether `source` was already merged into `keep` by a consolidation.
    fn consolidated(&self, keep: &MemoryId, source: &MemoryId) -> Result<bool> {
        let relation = Relation::parse(CONSOLIDATES)?;
        self.store
            .read(|r| store::moves::link_present(r, keep, source, &relation))
    }

    /// The common tail of the hygiene jobs: archive `ids` (local-only state)
    /// when applying, and report `actions` either way.
    fn archive_for_hygiene(
        &mut self,
        ids: &[MemoryId],
        actions: Vec<HygieneAction>,
        apply: bool,
    ) -> Result<HygieneReport> {
        if apply {
            self.store.write(|tx| {
                for id in ids {
                    tx.set_archived(id, true)?;
                }
                Ok(())
            })?;
        }
        Ok(HygieneReport {
            applied: apply,
            actions,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::api::memories::NewMemory;
    use crate::api::node::test_node;

    #[test]
    fn a_consolidation_preview_shows_only_what_its_agent_sees_and_changes_nothing() {
        let (_d, _home, mut node, alice) = test_node("alice");
        node.agent_add("bob", "test", &[]).unwrap();
        let bob = node.requester("bob").unwrap();
        let a1 = node
            .add(&alice, NewMemory::new("alice's secret plan for friday"))
            .unwrap();
        let a2 = node
            .add(&alice, NewMemory::new("alice's secret plan for friday"))
            .unwrap();
        let b1 = node
            .add(&bob, NewMemory::new("bob restarts the queue at noon"))
            .unwrap();
        let b2 = node
            .add(&bob, NewMemory::new("bob restarts the queue at noon"))
            .unwrap();
        let seq = node.store().max_seq().unwrap();
        let ids = |who| -> Vec<(String, Option<String>)> {
            let r = node.consolidation_preview(who).unwrap();
            assert!(!r.applied);
            r.actions.into_iter().map(|a| (a.id, a.into)).collect()
        };
        assert_eq!(ids(&bob), vec![(b2.to_string(), Some(b1.to_string()))]);
        assert_eq!(ids(&alice), vec![(a2.to_string(), Some(a1.to_string()))]);
        assert_eq!(
            node.store().max_seq().unwrap(),
            seq,
            "a dry run writes nothing"
        );
        // The operator's run sees both.
        assert_eq!(node.consolidate(false).unwrap().actions.len(), 2);
    }
}
