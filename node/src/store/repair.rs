//! The store's side of a range-based repair (docs/design.md §7.9): the
//! repair set — the facts a peer may receive from us, as `(clock, id)`
//! items — and the facts of that set a reconciliation found the peer
//! lacks, fetched by id.
//!
//! Must never: list or send a fact outside the export filter
//! (`replica::export_facts` with the peer's policy and retractions, exactly
//! what an export from `seq` 0 would send): both the items and the fetch by
//! id go through it, so a peer that asks for an id it guessed gets nothing
//! it could not have received anyway. Decides nothing: reconciling is
//! `amos_sync::repair`'s.

use std::collections::HashSet;

use amos_acl::PeerPolicy;
use amos_sync::repair::{self, ItemId, ItemSet};

use crate::error::{NodeError, Result};
use crate::store::replica::{ExportSpec, export_facts};

/// Read in batches of this many facts.
const SCAN_BATCH: usize = 4096;

fn spec(policy: &PeerPolicy) -> ExportSpec<'_> {
    ExportSpec {
        policy,
        since: 0,
        retractions: true,
        skip_author: None,
        echo: None,
        until: None,
    }
}

/// The repair set for a peer we give `policy`, and the highest `seq` it
/// covers. Call inside one read transaction (a snapshot).
pub fn repair_set(
    conn: &(impl super::Readable + ?Sized),
    policy: &PeerPolicy,
) -> Result<(ItemSet, i64)> {
    let conn = super::sql(conn);
    let mut items = Vec::new();
    let high = export_facts(conn, &spec(policy), SCAN_BATCH, |facts| {
        for f in &facts {
            items.push(
                repair::item_of(f)
                    .map_err(|e| NodeError::Corrupt(format!("a stored fact: {e}")))?,
            );
        }
        Ok(())
    })?;
    Ok((ItemSet::new(items), high))
}

/// Emit, in batches of at most `batch`, the facts of the repair set for
/// `policy` whose id is in `ids` (ids outside the set are ignored); returns
/// how many.
pub fn repair_facts(
    conn: &(impl super::Readable + ?Sized),
    policy: &PeerPolicy,
    ids: &[ItemId],
    batch: usize,
    mut emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
) -> Result<u64> {
    let conn = super::sql(conn);
    let wanted: HashSet<&ItemId> = ids.iter().collect();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut n = 0u64;
    export_facts(conn, &spec(policy), SCAN_BATCH, |facts| {
        for f in facts {
            if wanted.contains(&repair::fact_id(&f)) {
                out.push(f);
                n += 1;
                if out.len() >= batch {
                    emit(std::mem::take(&mut out))?;
                }
            }
        }
        Ok(())
    })?;
    if !out.is_empty() {
        emit(out)?;
    }
    Ok(n)
}
