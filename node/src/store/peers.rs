//! The `peers` table: who our peers are, the policy we give each, where
//! they serve, how the last sync went, and both sides' watermarks. The
//! node API (`crate::api::peers`) decides; this module reads and writes.

use amos_acl::PeerPolicy;
use amos_protocol::NodeId;
use rusqlite::{OptionalExtension, params};

use crate::error::Result;

/// Register `id`, or update its address (`None` keeps it), name (`None`
/// keeps it) and policy.
pub fn upsert(
    tx: &super::Tx<'_>,
    id: &NodeId,
    addr: Option<&str>,
    name: Option<&str>,
    policy: &PeerPolicy,
    now_ms: u64,
) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "INSERT INTO peers(node_id, addr, name, policy, added_ms) VALUES (?1, ?2, coalesce(?3, ''), ?4, ?5)
         ON CONFLICT(node_id) DO UPDATE SET addr = coalesce(excluded.addr, addr),
            name = coalesce(?3, name), policy = excluded.policy",
        params![&id.0[..], addr, name, policy.to_string(), now_ms as i64],
    )?;
    Ok(())
}

/// Set the role of `id`'s link: a relay link or not, and the relay it is
/// reached through (`None`: dialled directly). Returns whether it is
/// registered.
pub fn set_link(
    tx: &super::Tx<'_>,
    id: &NodeId,
    relay: bool,
    via: Option<&NodeId>,
) -> Result<bool> {
    let conn = super::sql(tx);
    Ok(conn.execute(
        "UPDATE peers SET relay = ?2, via = ?3 WHERE node_id = ?1",
        params![&id.0[..], relay, via.map(|v| &v.0[..])],
    )? > 0)
}

/// The relay `id` is reached through, if any.
pub fn via(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<Option<NodeId>> {
    let conn = super::sql(conn);
    let v: Option<Option<Vec<u8>>> = conn
        .query_row(
            "SELECT via FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| r.get(0),
        )
        .optional()?;
    Ok(v.flatten()
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .map(NodeId))
}

/// Whether `id` is registered with a relay link (`peers add --relay`):
/// what a relay checks before it forwards for it.
pub fn is_relay(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT relay FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .is_some_and(|r| r != 0))
}

/// The peers whose link is a relay link and that have an address: those
/// this node keeps a standing connection to, `(id, addr)`.
pub fn relays_to_keep(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<(NodeId, String)>> {
    let conn = super::sql(conn);
    let mut stmt =
        conn.prepare("SELECT node_id, addr FROM peers WHERE relay != 0 AND addr IS NOT NULL")?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, addr) = row?;
        if let Ok(id) = <[u8; 32]>::try_from(id.as_slice()) {
            out.push((NodeId(id), addr));
        }
    }
    Ok(out)
}

/// Forget `id`. Returns whether it was registered.
pub fn remove(tx: &super::Tx<'_>, id: &NodeId) -> Result<bool> {
    let conn = super::sql(tx);
    crate::store::echo::forget(tx, id)?;
    Ok(conn.execute("DELETE FROM peers WHERE node_id = ?1", [&id.0[..]])? > 0)
}

/// Set the policy we give `id`. Returns whether it is registered.
pub fn set_policy(tx: &super::Tx<'_>, id: &NodeId, policy: &PeerPolicy) -> Result<bool> {
    let conn = super::sql(tx);
    Ok(conn.execute(
        "UPDATE peers SET policy = ?2 WHERE node_id = ?1",
        params![&id.0[..], policy.to_string()],
    )? > 0)
}

/// The address recorded for `id`: `None` if not registered, `Some(None)`
/// if it has none.
pub fn addr(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<Option<Option<String>>> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT addr FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| r.get(0),
        )
        .optional()?)
}

/// Set the address of a registered peer. Returns whether it changed.
pub fn set_addr(tx: &super::Tx<'_>, id: &NodeId, addr: &str) -> Result<bool> {
    let conn = super::sql(tx);
    Ok(conn.execute(
        "UPDATE peers SET addr = ?2 WHERE node_id = ?1 AND addr IS NOT ?2",
        params![&id.0[..], addr],
    )? > 0)
}

/// Record how the last sync with `id` went; `ok_at_ms` (a success) also
/// moves its last sync time.
pub fn record_result(
    tx: &super::Tx<'_>,
    id: &NodeId,
    result: &str,
    ok_at_ms: Option<i64>,
) -> Result<()> {
    let conn = super::sql(tx);
    match ok_at_ms {
        Some(now) => conn.execute(
            "UPDATE peers SET last_result = ?2, last_sync_ms = ?3 WHERE node_id = ?1",
            params![&id.0[..], result, now],
        )?,
        None => conn.execute(
            "UPDATE peers SET last_result = ?2 WHERE node_id = ?1",
            params![&id.0[..], result],
        )?,
    };
    Ok(())
}

/// Record a failed sync with `id` that started at `started_ms`, unless a
/// sync that succeeded since then is recorded (sessions overlap under push
/// on change: a dial that failed before the peer came back must not hide
/// the success that followed). Returns whether it was recorded.
pub fn record_failure_since(
    tx: &super::Tx<'_>,
    id: &NodeId,
    result: &str,
    started_ms: i64,
) -> Result<bool> {
    let conn = super::sql(tx);
    let n = conn.execute(
        "UPDATE peers SET last_result = ?2
         WHERE node_id = ?1 AND (last_sync_ms IS NULL OR last_sync_ms < ?3)",
        params![&id.0[..], result, started_ms],
    )?;
    Ok(n > 0)
}

/// What one comparison of a peer's session digest with ours found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DigestCheck {
    /// Both digests over `scopes` were equal.
    pub agree: bool,
    /// When we compared (Unix ms).
    pub at_ms: u64,
    /// The scopes compared: the policy the peer gives us (`full`: all).
    pub scopes: String,
    /// Facts the peer's digest covers.
    pub peer_facts: u64,
    /// Facts our digest covers.
    pub my_facts: u64,
}

/// Record the last digest comparison with `id`.
pub fn record_digest(tx: &super::Tx<'_>, id: &NodeId, d: &DigestCheck) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET digest_agree = ?2, digest_ms = ?3, digest_scopes = ?4,
            digest_peer_facts = ?5, digest_my_facts = ?6,
            disagree_since_ms = CASE WHEN ?2 THEN NULL ELSE COALESCE(disagree_since_ms, ?3) END
         WHERE node_id = ?1",
        params![
            &id.0[..],
            d.agree,
            d.at_ms as i64,
            d.scopes,
            d.peer_facts as i64,
            d.my_facts as i64
        ],
    )?;
    Ok(())
}

/// Forget the last digest comparison with `id` (and any disagreement, so
/// none asks for a repair): its latest digest could not be compared
/// (docs/design.md §7.3).
pub fn clear_digest(tx: &super::Tx<'_>, id: &NodeId) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET digest_agree = NULL, digest_ms = NULL, digest_scopes = NULL,
            digest_peer_facts = NULL, digest_my_facts = NULL, disagree_since_ms = NULL
         WHERE node_id = ?1",
        [&id.0[..]],
    )?;
    Ok(())
}

/// The digest columns of a `peers` row read from column `first` on
/// (`digest_agree`, `digest_ms`, `digest_scopes`, `digest_peer_facts`,
/// `digest_my_facts`): `None` if never compared.
pub(crate) fn digest_check(
    r: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<Option<DigestCheck>> {
    let agree: Option<bool> = r.get(first)?;
    let Some(agree) = agree else {
        return Ok(None);
    };
    let n = |i: usize| -> rusqlite::Result<u64> {
        Ok(r.get::<_, Option<i64>>(first + i)?.unwrap_or(0).max(0) as u64)
    };
    Ok(Some(DigestCheck {
        agree,
        at_ms: n(1)?,
        scopes: r.get::<_, Option<String>>(first + 2)?.unwrap_or_default(),
        peer_facts: n(3)?,
        my_facts: n(4)?,
    }))
}

/// The figures of the last session with a peer that completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LastSession {
    /// When it ended (Unix ms).
    pub at_ms: u64,
    /// How long it took.
    pub ms: u64,
    /// Facts received.
    pub facts_in: u64,
    /// Facts sent.
    pub facts_out: u64,
    /// Frame bytes received.
    pub bytes_in: u64,
    /// Frame bytes sent.
    pub bytes_out: u64,
}

impl LastSession {
    /// The figures of a session that ended at `at_ms` after `elapsed`.
    pub fn of(s: &crate::events::SessionStats, at_ms: u64, elapsed: std::time::Duration) -> Self {
        LastSession {
            at_ms,
            ms: elapsed.as_millis() as u64,
            facts_in: s.facts_in,
            facts_out: s.facts_out,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
        }
    }
}

/// Record the figures of a session with `id` that just completed.
pub fn record_session(tx: &super::Tx<'_>, id: &NodeId, s: &LastSession) -> Result<()> {
    let conn = super::sql(tx);
    let n = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    conn.execute(
        "UPDATE peers SET session_at_ms = ?2, session_ms = ?3, session_facts_in = ?4,
            session_facts_out = ?5, session_bytes_in = ?6, session_bytes_out = ?7
         WHERE node_id = ?1",
        params![
            &id.0[..],
            n(s.at_ms),
            n(s.ms),
            n(s.facts_in),
            n(s.facts_out),
            n(s.bytes_in),
            n(s.bytes_out)
        ],
    )?;
    Ok(())
}

/// The session columns of a `peers` row read from column `first` on
/// (`session_at_ms`, `session_ms`, `session_facts_in`, `session_facts_out`,
/// `session_bytes_in`, `session_bytes_out`): `None` if none completed.
pub(crate) fn last_session(
    r: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<Option<LastSession>> {
    let n = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(r.get::<_, Option<i64>>(first + i)?.map(|x| x.max(0) as u64))
    };
    let Some(at_ms) = n(0)? else {
        return Ok(None);
    };
    Ok(Some(LastSession {
        at_ms,
        ms: n(1)?.unwrap_or(0),
        facts_in: n(2)?.unwrap_or(0),
        facts_out: n(3)?.unwrap_or(0),
        bytes_in: n(4)?.unwrap_or(0),
        bytes_out: n(5)?.unwrap_or(0),
    }))
}

/// The `seq` of our last change of `id`'s policy: a watermark of us below
/// it predates the change.
pub fn policy_seq(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<i64> {
    let conn = super::sql(conn);
    Ok(conn.query_row(
        "SELECT policy_seq FROM peers WHERE node_id = ?1",
        [&id.0[..]],
        |r| r.get(0),
    )?)
}

/// Our watermark of `id`'s log as stored: its epoch (hex) and `seq`.
pub fn watermark(
    conn: &(impl super::Readable + ?Sized),
    id: &NodeId,
) -> Result<Option<(Option<String>, i64)>> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT their_epoch, their_seq FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// Store our watermark of `id`'s log (a sync with it just succeeded).
pub fn save_watermark(
    tx: &super::Tx<'_>,
    id: &NodeId,
    epoch_hex: &str,
    seq: i64,
    now_ms: i64,
) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET their_epoch = ?2, their_seq = ?3, last_sync_ms = ?4,
            last_result = 'ok' WHERE node_id = ?1",
        params![&id.0[..], epoch_hex, seq, now_ms],
    )?;
    Ok(())
}

/// Re-pull `id`'s log from `seq` 0 (same epoch) and note `policy_seq` as
/// the `seq` of the policy change.
pub fn reset_watermark(tx: &super::Tx<'_>, id: &NodeId, policy_seq: i64) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET their_seq = 0, policy_seq = ?2 WHERE node_id = ?1",
        params![&id.0[..], policy_seq],
    )?;
    Ok(())
}

/// Keep the proof an offline joiner carries to `id` (`join --offline`).
pub fn set_join_proof(tx: &super::Tx<'_>, id: &NodeId, proof: &[u8]) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET join_proof = ?2 WHERE node_id = ?1",
        params![&id.0[..], proof],
    )?;
    Ok(())
}

/// The proof kept for `id`, if any.
pub fn join_proof(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<Option<Vec<u8>>> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT join_proof FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// What decides whether a session with a peer repairs (docs/design.md §7.9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairState {
    /// The operator asked for a repair, not tried yet.
    pub asked: bool,
    /// When the last repair with the peer was tried (Unix ms).
    pub last_ms: Option<u64>,
    /// That repair never completed (a cut session, or a peer older than
    /// repair).
    pub tried_unfinished: bool,
    /// Sessions completed since then (or since v13).
    pub sessions_since: u64,
    /// The digests disagree, since then (Unix ms): the first of the
    /// comparisons in a row that disagreed.
    pub disagreed_ms: Option<u64>,
}

/// The repair columns of `id`'s row (`None`: not a peer).
pub fn repair_state(
    conn: &(impl super::Readable + ?Sized),
    id: &NodeId,
) -> Result<Option<RepairState>> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT repair_asked, repair_ms, sessions_since_repair, digest_agree,
                disagree_since_ms, repair_tried
             FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| {
                let agree: Option<bool> = r.get(3)?;
                let digest_ms: Option<i64> = r.get(4)?;
                Ok(RepairState {
                    asked: r.get(0)?,
                    last_ms: r.get::<_, Option<i64>>(1)?.map(|x| x.max(0) as u64),
                    sessions_since: r.get::<_, i64>(2)?.max(0) as u64,
                    disagreed_ms: match agree {
                        Some(false) => Some(digest_ms.unwrap_or(0).max(0) as u64),
                        _ => None,
                    },
                    tried_unfinished: r.get(5)?,
                })
            },
        )
        .optional()?)
}

/// Ask for a repair with `id` in its next session; returns whether it is a peer.
pub fn ask_repair(tx: &super::Tx<'_>, id: &NodeId) -> Result<bool> {
    let conn = super::sql(tx);
    Ok(conn.execute(
        "UPDATE peers SET repair_asked = 1 WHERE node_id = ?1",
        [&id.0[..]],
    )? == 1)
}

/// A session with `id` begins a repair (at `now_ms`): whatever asked for
/// it is answered — the operator's ask, the periodic count, the
/// disagreement — and it counts as unfinished until [`record_repair`].
pub fn record_repair_tried(tx: &super::Tx<'_>, id: &NodeId, now_ms: u64) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET repair_asked = 0, repair_ms = ?2, sessions_since_repair = 0,
            repair_tried = 1 WHERE node_id = ?1",
        params![&id.0[..], i64::try_from(now_ms).unwrap_or(i64::MAX)],
    )?;
    Ok(())
}

/// The next session after an unfinished repair runs without one: clear the mark.
pub fn clear_repair_tried(tx: &super::Tx<'_>, id: &NodeId) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE peers SET repair_tried = 0 WHERE node_id = ?1",
        [&id.0[..]],
    )?;
    Ok(())
}

/// A session with `id` completed: `repaired` (at `now_ms`) marks its repair
/// finished, otherwise the session counts towards the periodic one.
pub fn record_repair(tx: &super::Tx<'_>, id: &NodeId, repaired: bool, now_ms: u64) -> Result<()> {
    let conn = super::sql(tx);
    if repaired {
        conn.execute(
            "UPDATE peers SET repair_asked = 0, repair_ms = ?2, sessions_since_repair = 0,
                repair_tried = 0 WHERE node_id = ?1",
            params![&id.0[..], i64::try_from(now_ms).unwrap_or(i64::MAX)],
        )?;
    } else {
        conn.execute(
            "UPDATE peers SET sessions_since_repair = sessions_since_repair + 1
             WHERE node_id = ?1",
            [&id.0[..]],
        )?;
    }
    Ok(())
}

/// Record the protocol version and features `id` spoke in a session
/// (docs/design.md §13).
pub fn record_protocol(tx: &super::Tx<'_>, id: &NodeId, version: u16, features: u64) -> Result<()> {
    super::sql(tx).execute(
        "UPDATE peers SET protocol = ?2, features = ?3 WHERE node_id = ?1",
        params![&id.0[..], i64::from(version), features as i64],
    )?;
    Ok(())
}

/// The protocol version and features `id` spoke in its last session
/// (`None`: none recorded, or an unknown peer).
pub fn protocol(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<Option<(u16, u64)>> {
    let row = super::sql(conn)
        .query_row(
            "SELECT protocol, features FROM peers WHERE node_id = ?1",
            params![&id.0[..]],
            |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?)),
        )
        .optional()?;
    Ok(match row {
        Some((Some(v), Some(f))) => u16::try_from(v).ok().map(|v| (v, f as u64)),
        _ => None,
    })
}

/// How many facts are held back for `id` (it lacked a feature they need),
/// and those features' bits: `(0, 0)` when none, or for an unknown peer.
pub fn held_back(conn: &(impl super::Readable + ?Sized), id: &NodeId) -> Result<(u64, u64)> {
    let row = super::sql(conn)
        .query_row(
            "SELECT held_back, held_features FROM peers WHERE node_id = ?1",
            params![&id.0[..]],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()?;
    Ok(row.map_or((0, 0), |(n, f)| (u64::try_from(n).unwrap_or(0), f as u64)))
}

/// Set what is held back for `id`: `count` facts needing `features`.
pub fn set_held_back(tx: &super::Tx<'_>, id: &NodeId, count: u64, features: u64) -> Result<()> {
    super::sql(tx).execute(
        "UPDATE peers SET held_back = ?2, held_features = ?3 WHERE node_id = ?1",
        params![
            &id.0[..],
            i64::try_from(count).unwrap_or(i64::MAX),
            features as i64
        ],
    )?;
    Ok(())
}

/// Set (or, with `None`, clear) the mailbox directory of `id`. Returns
/// whether it is registered.
pub fn set_mailbox(tx: &super::Tx<'_>, id: &NodeId, dir: Option<&str>) -> Result<bool> {
    Ok(super::sql(tx).execute(
        "UPDATE peers SET mailbox = ?2 WHERE node_id = ?1",
        params![&id.0[..], dir],
    )? > 0)
}

/// The watermark of our log that `id`'s last imported mailbox bundle
/// acknowledged: our epoch as it named it (hex) and the `seq` (`None`:
/// none yet, or an unknown peer).
pub fn mailbox_ack(
    conn: &(impl super::Readable + ?Sized),
    id: &NodeId,
) -> Result<Option<(String, i64)>> {
    let row = super::sql(conn)
        .query_row(
            "SELECT mailbox_ack_epoch, mailbox_ack_seq FROM peers WHERE node_id = ?1",
            [&id.0[..]],
            |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()?;
    Ok(row.and_then(|(e, seq)| e.map(|e| (e, seq))))
}

/// Record the watermark of our log that `id`'s mailbox bundle acknowledged.
pub fn record_mailbox_ack(
    tx: &super::Tx<'_>,
    id: &NodeId,
    epoch_hex: &str,
    seq: i64,
) -> Result<()> {
    super::sql(tx).execute(
        "UPDATE peers SET mailbox_ack_epoch = ?2, mailbox_ack_seq = ?3 WHERE node_id = ?1",
        params![&id.0[..], epoch_hex, seq],
    )?;
    Ok(())
}
