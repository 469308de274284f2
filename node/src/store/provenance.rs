//! What the store holds about where one memory comes from, for the
//! console's "why do we believe this": the signed facts of its content and
//! acl registers exactly as they were admitted (verified at the door:
//! `Tx::put` takes only an `Admission`, which only a `Verified` fact
//! makes), its local-only recall count, and the local-only `arrived_from`:
//! the peer whose applied batch first moved the row here
//! ([`note_arrivals`], in the transaction that applied it).
//!
//! Must never: be read for a memory the caller has not passed through the
//! read gate first (nothing here gates), or be taken as a replacement for
//! the gate; move `seq`, a fact or a digest when noting an arrival.

use amos_protocol::{MemoryId, NodeId};
use rusqlite::{OptionalExtension, params};

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
    /// Local-only: the peer whose batch first moved the row here.
    pub arrived_from: Option<NodeId>,
}

/// The stored facts of live memory `id` (`None`: no live row).
pub fn signed_registers(
    r: &(impl Readable + ?Sized),
    id: &MemoryId,
) -> Result<Option<SignedRegisters>> {
    let conn = super::sql(r);
    Ok(conn
        .prepare_cached(&format!(
            "SELECT content_fact, acl_fact, recall_count, arrived_from FROM memories \
             WHERE id = ?1 AND {LIVE}"
        ))?
        .query_row([&id.0[..]], |row| {
            Ok(SignedRegisters {
                content: row.get(0)?,
                acl: row.get(1)?,
                recall_count: row.get::<_, i64>(2)?.max(0) as u64,
                arrived_from: row
                    .get::<_, Option<Vec<u8>>>(3)?
                    .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
                    .map(NodeId),
            })
        })
        .optional()?)
}

/// Note that the rows a batch from peer `from` moved (`seq`s
/// `first..=last`, taken in this transaction) arrived from it, unless an
/// arrival is noted already or the memory originates at `me`.
pub(crate) fn note_arrivals(
    tx: &super::Tx<'_>,
    from: &NodeId,
    me: &NodeId,
    first: i64,
    last: i64,
) -> Result<()> {
    super::sql(tx)
        .prepare_cached(
            "UPDATE memories SET arrived_from = ?1
             WHERE seq BETWEEN ?2 AND ?3 AND arrived_from IS NULL AND origin != ?4",
        )?
        .execute(params![&from.0[..], first, last, &me.0[..]])?;
    Ok(())
}
