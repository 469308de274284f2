//! What the store holds about where one memory comes from, for the
//! console's "why do we believe this": the signed facts of its content and
//! acl registers exactly as they were admitted (verified at the door:
//! `Tx::put` takes only an `Admission`, which only a `Verified` fact
//! makes), its local-only recall count, and the local-only `arrived_from`:
//! the peer whose applied batch first moved the row here
//! ([`arriving_from`] and [`note_arrivals`], in the transaction that
//! applied it).
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

/// The peer whose facts a write transaction applies, from
/// [`arriving_from`] to [`note_arrivals`].
#[derive(Debug, Clone, Copy)]
pub(in crate::store) struct Arrival {
    from: NodeId,
    me: NodeId,
    /// A memory row was written other than whole and new (which names
    /// `from` as it is inserted: `Tx::put_new_memory`).
    rows_changed: bool,
}

impl Arrival {
    /// The peer a new row of a memory from `origin` arrived from: none for
    /// a memory of this node's.
    pub(in crate::store) fn names(&self, origin: &NodeId) -> Option<NodeId> {
        (*origin != self.me).then_some(self.from)
    }

    /// A memory row is about to change in place (`Tx::touch_memory`).
    pub(in crate::store) fn row_changed(&mut self) {
        self.rows_changed = true;
    }
}

/// The facts `tx` applies from now on come from peer `from` (this node is
/// `me`): a memory row it writes new names `from` as it is inserted, and
/// [`note_arrivals`] names it in the rest.
pub(crate) fn arriving_from(tx: &mut super::Tx<'_>, from: &NodeId, me: &NodeId) {
    tx.arrival = Some(Arrival {
        from: *from,
        me: *me,
        rows_changed: false,
    });
}

/// Note that the rows the facts from the peer [`arriving_from`] named
/// moved (`seq`s `first..=last`, taken in this transaction) arrived from
/// it, unless an arrival is noted already or the memory originates here. A
/// row written new is named already: when every memory row moved was, no
/// row is read.
pub(crate) fn note_arrivals(tx: &mut super::Tx<'_>, first: i64, last: i64) -> Result<()> {
    let Some(a) = tx.arrival.as_mut() else {
        return Ok(());
    };
    if !std::mem::take(&mut a.rows_changed) {
        return Ok(());
    }
    let (from, me) = (a.from, a.me);
    super::sql(tx)
        .prepare_cached(
            "UPDATE memories SET arrived_from = ?1
             WHERE seq BETWEEN ?2 AND ?3 AND arrived_from IS NULL AND origin != ?4",
        )?
        .execute(params![&from.0[..], first, last, &me.0[..]])?;
    Ok(())
}
