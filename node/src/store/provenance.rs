//! What the store holds about where one memory comes from, for the
//! console's "why do we believe this": the signed facts of its content and
//! acl registers exactly as they were admitted (verified at the door:
//! `Tx::put` takes only an `Admission`, which only a `Verified` fact
//! makes), and its local-only recall count.
//!
//! Must never: be read for a memory the caller has not passed through the
//! read gate first (nothing here gates), or be taken as a replacement for
//! the gate.

use amos_protocol::MemoryId;
use rusqlite::OptionalExtension;

use super::Readable;
use super::memory::LIVE;
use crate::error::Result;

/// A live memory's signed register facts and its recall count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignedRegisters {
    /// The content register's fact, as stored (canonical bytes).
    pub content: Option<Vec<u8>>,
    /// The acl register's fact, as stored.
    pub acl: Option<Vec<u8>>,
    /// Local-only: how many recalls were noted.
    pub recall_count: u64,
}

/// The stored facts of live memory `id` (`None`: no live row).
pub fn signed_registers(
    r: &(impl Readable + ?Sized),
    id: &MemoryId,
) -> Result<Option<SignedRegisters>> {
    let conn = super::sql(r);
    Ok(conn
        .prepare_cached(&format!(
            "SELECT content_fact, acl_fact, recall_count FROM memories WHERE id = ?1 AND {LIVE}"
        ))?
        .query_row([&id.0[..]], |row| {
            Ok(SignedRegisters {
                content: row.get(0)?,
                acl: row.get(1)?,
                recall_count: row.get::<_, i64>(2)?.max(0) as u64,
            })
        })
        .optional()?)
}
