//! Operations on the node as a whole: status, check, doctor, index rebuild,
//! backup/restore, and the hygiene jobs (retention, consolidate).
//!
//! Hygiene jobs only touch local-only state (the `archived` flag), never a
//! replicated fact, and are dry runs unless asked to apply.

use std::path::Path;

use amos_protocol::MemoryId;
use rand::RngExt;
use rusqlite::{Connection, MAIN_DB, OpenFlags, params};
use serde::Serialize;

use crate::error::{NodeError, Result};
use crate::index::{CatchUp, RecallIndex};
use crate::node::Node;
use crate::store::{self, hex, schema::SCHEMA_VERSION};

#[derive(Debug, Serialize)]
pub struct Status {
    pub node_id: String,
    pub name: String,
    pub home: String,
    pub schema_version: u32,
    pub epoch: String,
    pub seq: i64,
    pub memories: i64,
    pub agents: i64,
    pub teams: i64,
    pub projects: i64,
    pub index_lag: i64,
    pub peers: Vec<crate::replica::PeerInfo>,
    pub quarantined: Vec<crate::replica::DeferredInfo>,
    pub audit_refusals: i64,
    /// Refusals recorded since the previous `amos status`.
    pub audit_refusals_new: i64,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub ok: bool,
    pub schema_version: u32,
    pub integrity: String,
    pub memories: i64,
    pub index_docs: u64,
    pub index_lag: i64,
    pub dangling_links: i64,
}

#[derive(Debug, Serialize)]
pub struct RebuildReport {
    pub indexed: usize,
    pub docs: u64,
    pub index_bytes: u64,
}

/// What a hygiene job did or would do to one memory.
#[derive(Debug, Serialize)]
pub struct HygieneAction {
    pub id: String,
    pub action: &'static str,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct HygieneReport {
    pub applied: bool,
    pub actions: Vec<HygieneAction>,
}

fn count(conn: &Connection, sql: &str) -> Result<i64> {
    Ok(conn.query_row(sql, [], |r| r.get(0))?)
}

impl Node {
    pub fn index_lag(&mut self) -> Result<i64> {
        let store = &self.store;
        let idx = RecallIndex::open(self.home())?;
        idx.lag(store)
    }

    pub fn status(&mut self) -> Result<Status> {
        // Refusals since the last status: remember the newest audit entry seen.
        let (newest, seen): (i64, i64) = self.store.conn().query_row(
            "SELECT coalesce((SELECT max(id) FROM audit), 0),
                    coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'status_audit_seen'), 0)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let audit_refusals_new = count(
            self.store.conn(),
            &format!("SELECT count(*) FROM audit WHERE id > {seen}"),
        )?;
        if newest > seen {
            self.store.write(|tx| {
                tx.conn().execute(
                    "INSERT INTO meta(key, value) VALUES ('status_audit_seen', ?1)
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [newest.to_string()],
                )?;
                Ok(())
            })?;
        }
        let conn = self.store.conn();
        let live = format!(
            "SELECT count(*) FROM memories WHERE {}",
            store::memory::LIVE
        );
        Ok(Status {
            node_id: self.node_id().to_string(),
            name: self.name().to_owned(),
            home: self.home().root().display().to_string(),
            schema_version: self.store.schema_version()?,
            epoch: self.store.epoch()?,
            seq: self.store.max_seq()?,
            memories: count(conn, &live)?,
            agents: count(conn, "SELECT count(*) FROM agents WHERE present = 1")?,
            teams: count(conn, "SELECT count(*) FROM teams WHERE present = 1")?,
            projects: count(conn, "SELECT count(*) FROM projects WHERE present = 1")?,
            index_lag: self.index_lag()?,
            peers: self.peer_list()?,
            quarantined: self.quarantined()?,
            audit_refusals: count(self.store.conn(), "SELECT count(*) FROM audit")?,
            audit_refusals_new,
        })
    }

    /// Integrity of store, index and links.
    pub fn check(&mut self) -> Result<CheckReport> {
        let conn = self.store.conn();
        let integrity: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        let schema_version = self.store.schema_version()?;
        let live = format!(
            "SELECT count(*) FROM memories WHERE {}",
            store::memory::LIVE
        );
        let memories = count(conn, &live)?;
        let dangling_links = count(
            conn,
            "SELECT count(*) FROM links l WHERE l.present = 1 AND (
                NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.from_id)
                OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.to_id))",
        )?;
        let index_lag = self.index_lag()?;
        let (index, store) = self.caught_up_index()?;
        let (index_docs, _) = index.stats();
        let live_unarchived = count(
            store.conn(),
            &format!(
                "SELECT count(*) FROM memories WHERE {} AND archived = 0",
                store::memory::LIVE
            ),
        )?;
        Ok(CheckReport {
            ok: integrity == "ok"
                && schema_version == SCHEMA_VERSION
                && index_docs == live_unarchived as u64,
            schema_version,
            integrity,
            memories,
            index_docs,
            index_lag,
            dangling_links,
        })
    }

    /// Drop the index and rebuild it from the store.
    pub fn index_rebuild(&mut self) -> Result<RebuildReport> {
        let (CatchUp { indexed, .. }, (docs, index_bytes)) = self.rebuild_index()?;
        Ok(RebuildReport {
            indexed,
            docs,
            index_bytes,
        })
    }

    /// Online backup to `file` (consistent while others write); atomic.
    pub fn backup(&self, file: &Path) -> Result<u64> {
        let tmp = file.with_extension("amos-backup-tmp");
        let _ = std::fs::remove_file(&tmp);
        self.store
            .conn()
            .backup(MAIN_DB, &tmp, None::<fn(rusqlite::backup::Progress)>)
            .map_err(|e| {
                NodeError::BadInput(format!("cannot write backup {}: {e}", file.display()))
            })?;
        std::fs::rename(&tmp, file)
            .map_err(NodeError::io(format!("writing {}", file.display())))?;
        Ok(std::fs::metadata(file).map(|m| m.len()).unwrap_or(0))
    }

    /// Replace the store with a backup. Refuses to overwrite a store holding
    /// memories unless `force`. Gives the store a new log epoch and drops the
    /// index (it rebuilds on next use).
    pub fn restore(&mut self, file: &Path, force: bool) -> Result<()> {
        {
            let src = Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|e| NodeError::BadInput(format!("cannot open {}: {e}", file.display())))?;
            let version: u32 = src
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|_| {
                    NodeError::BadInput(format!("{} is not an amos backup", file.display()))
                })?;
            let has_meta = src
                .query_row("SELECT count(*) FROM meta WHERE key = 'epoch'", [], |r| {
                    r.get::<_, i64>(0)
                })
                .unwrap_or(0);
            if version == 0 || version > SCHEMA_VERSION || has_meta != 1 {
                return Err(NodeError::BadInput(format!(
                    "{} is not an amos backup",
                    file.display()
                )));
            }
        }
        let live = count(self.store.conn(), "SELECT count(*) FROM memories")?;
        if live > 0 && !force {
            return Err(NodeError::Refused(
                "the store holds memories; pass --force to replace it".into(),
            ));
        }
        let conn = &mut self.store;
        conn_restore(conn, file)?;
        let epoch: [u8; 16] = rand::rng().random();
        self.store.write(|tx| {
            tx.conn().execute(
                "UPDATE meta SET value = ?1 WHERE key = 'epoch'",
                params![hex(&epoch)],
            )?;
            Ok(())
        })?;
        let _ = std::fs::remove_dir_all(self.home().index_dir());
        Ok(())
    }

    /// Archive expired memories (dry run unless `apply`).
    pub fn retention(&mut self, apply: bool) -> Result<HygieneReport> {
        let now = self.now_ms() as i64;
        let ids: Vec<Vec<u8>> = {
            let mut stmt = self.store.conn().prepare(&format!(
                "SELECT id FROM memories WHERE {} AND archived = 0 AND pinned = 0
                 AND expires_ms IS NOT NULL AND expires_ms <= ?1",
                store::memory::LIVE
            ))?;
            stmt.query_map([now], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        let ids: Vec<MemoryId> = ids.iter().filter_map(|b| MemoryId::from_slice(b)).collect();
        let actions = ids
            .iter()
            .map(|id| HygieneAction {
                id: id.to_string(),
                action: "archive",
                reason: "expired".into(),
            })
            .collect();
        self.archive_for_hygiene(&ids, actions, apply)
    }

    /// Archive exact duplicates (same owner, grants and normalised text),
    /// keeping the oldest (dry run unless `apply`).
    pub fn consolidate(&mut self, apply: bool) -> Result<HygieneReport> {
        let rows: Vec<(Vec<u8>, String, String, String)> = {
            let mut stmt = self.store.conn().prepare(&format!(
                "SELECT id, owner, grants, content FROM memories WHERE {} AND archived = 0
                 ORDER BY created_ms, id",
                store::memory::LIVE
            ))?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        let mut first: std::collections::HashMap<(String, String, String), MemoryId> =
            Default::default();
        let mut dups = Vec::new();
        for (id, owner, grants, content) in rows {
            let Some(id) = MemoryId::from_slice(&id) else {
                continue;
            };
            let norm = crate::recall::normalize_text(&content);
            match first.get(&(owner.clone(), grants.clone(), norm.clone())) {
                Some(keep) => dups.push((id, *keep)),
                None => {
                    first.insert((owner, grants, norm), id);
                }
            }
        }
        let actions = dups
            .iter()
            .map(|(id, keep)| HygieneAction {
                id: id.to_string(),
                action: "archive",
                reason: format!("duplicate of {keep}"),
            })
            .collect();
        let ids: Vec<MemoryId> = dups.iter().map(|(id, _)| *id).collect();
        self.archive_for_hygiene(&ids, actions, apply)
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

fn conn_restore(store: &mut store::Store, file: &Path) -> Result<()> {
    store.restore_from(file)
}
