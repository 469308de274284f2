//! The read audit on the node API: switched on and read back here, fed by
//! the read paths (`get`, `list`, `search`, `pack`, `timeline`; the MCP server calls the
//! same methods, so its reads are audited alike, as front end `mcp`). The
//! rows live in `store::reads`: local-only, never replicated.
//!
//! Must never make a read fail: a row that cannot be written is logged and
//! the read goes on. Records only ids the gate let through.

use amos_acl::AuthorizedScopes;
use amos_protocol::MemoryId;
use serde::Serialize;

use super::node::Node;
use crate::error::{NodeError, Result};
use crate::store::reads::{self, ReadRow};

/// Environment switch: `on` (or `1`, `true`) or `off`; overrides the store.
pub const ENV: &str = "AMOS_READ_AUDIT";

/// The audit's settings.
#[derive(Debug, Clone, Serialize)]
pub struct ReadAuditConfig {
    /// In force now (environment, else the stored setting).
    pub on: bool,
    /// The stored setting (`amos config set read-audit`).
    pub stored: bool,
    /// `AMOS_READ_AUDIT`, when set.
    pub env: Option<String>,
    /// How long audited reads are kept.
    pub retention_ms: u64,
}

fn env_switch() -> Option<bool> {
    let v = std::env::var(ENV).ok()?;
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" | "" => Some(false),
        _ => None,
    }
}

impl Node {
    /// Name the front end reads come through (default `cli`).
    pub fn set_front(&mut self, front: &'static str) {
        self.front = front;
    }

    /// The read audit's settings.
    pub fn read_audit_config(&self) -> Result<ReadAuditConfig> {
        let stored = self.store.read(|r| reads::enabled(r))?;
        Ok(ReadAuditConfig {
            on: env_switch().unwrap_or(stored),
            stored,
            env: std::env::var(ENV).ok(),
            retention_ms: self.store.read(|r| reads::retention_ms(r))?,
        })
    }

    /// Store the read audit's setting (the environment still overrides it).
    pub fn set_read_audit(&mut self, on: bool) -> Result<ReadAuditConfig> {
        self.store.write(|tx| reads::set_enabled(tx, on))?;
        self.read_audit_config()
    }

    /// Keep audited reads `ms` long.
    pub fn set_read_audit_retention(&mut self, ms: u64) -> Result<ReadAuditConfig> {
        self.store.write(|tx| reads::set_retention_ms(tx, ms))?;
        self.read_audit_config()
    }

    /// Record that `who` was shown `ids` (by `via`), if the audit is on.
    pub(crate) fn audit_reads(&self, who: &AuthorizedScopes, ids: &[MemoryId], via: &str) {
        if ids.is_empty() {
            return;
        }
        let on = match env_switch() {
            Some(on) => on,
            None => self.store.read(|r| reads::enabled(r)).unwrap_or(false),
        };
        if !on {
            return;
        }
        let agent = who.requester().map_or("(admin)", |a| a.as_str());
        if let Err(e) = reads::record(&self.store, self.now_ms(), agent, ids, self.front, via) {
            tracing::warn!(error = %e, "read audit row not written");
        }
    }

    /// Audited reads, newest first.
    pub fn read_audit(
        &self,
        agent: Option<&str>,
        memory: Option<&str>,
        since_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ReadRow>> {
        let memory = memory
            .map(|m| {
                m.parse::<MemoryId>()
                    .map_err(|_| NodeError::BadInput(format!("malformed memory id {m:?}")))
            })
            .transpose()?;
        self.store
            .read(|r| reads::list(r, agent, memory.as_ref(), since_ms, limit))
    }
}
