//! Figures kept on write: how many memories this node holds per
//! *standing* — the effective grants, owner and owner rule the read gate
//! decides by — and type (`figure_kinds`), per standing and UTC creation
//! day (`figure_days`), the recalls noted per standing and day
//! (`figure_recalls`, from `recall_days`), and the memories per state
//! (`memory_tally`: live, archived, forgotten). The write transaction
//! keeps them ([`Keeper`]): every write of a memory row's counted columns
//! in `store/` notes the row first, and the transaction adds up what moved
//! and writes each table once, when it commits (local writes, applied
//! facts, bundle imports, tombstones, re-judged standings, archiving,
//! recalls noted, old days dropped); their migration (schema.rs) fills
//! them from the rows a store already holds.
//!
//! A standing is judged by the gate itself: [`Standing`] is
//! [`Gated`], and a requester's figures (`store::dashboard`) add up the
//! standings `AuthorizedScopes::may_see` admits, so a kept figure counts
//! exactly the memories the gate lets through. A memory with an expiry is
//! not kept (time, not a write, takes it out of a count): [`expiring`]
//! reads those live, by index, each with its expiry for the gate.
//!
//! Must never: hand out a memory (only counts per standing), or write the
//! tables but through a [`Keeper`] (and the migration's fill).

use std::collections::HashMap;

use amos_acl::Gated;
use amos_protocol::{AgentId, Grants};
use rusqlite::{OptionalExtension, params};

use super::memory::LIVE;
use super::{Readable, split_grants, sql};
use crate::error::Result;

/// What the read gate decides a memory's visibility by, for a count of
/// memories that share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    owner: AgentId,
    effective: Grants,
    trusted: bool,
    expires_ms: Option<u64>,
}

impl Standing {
    /// The grants in force.
    pub(crate) fn effective(&self) -> &Grants {
        &self.effective
    }
}

impl Gated for Standing {
    fn owner(&self) -> &AgentId {
        &self.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.effective
    }
    fn is_tombstoned(&self) -> bool {
        // Only live memories are counted.
        false
    }
    fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
    fn owner_is_authoritative(&self) -> bool {
        self.trusted
    }
}

/// Standings decoded once per distinct stored (effective, owner, rule):
/// the kept tables repeat them per type and day. A row whose owner does
/// not parse (only a damaged store holds one) decodes to `None` and is
/// counted for no one, as the row decoder leaves it invisible.
#[derive(Default)]
struct Decoder(HashMap<(String, String, bool), Option<Standing>>);

impl Decoder {
    fn standing(&mut self, effective: String, owner: String, trusted: bool) -> Option<Standing> {
        self.0
            .entry((effective, owner, trusted))
            .or_insert_with_key(|(effective, owner, trusted)| {
                AgentId::parse(owner).ok().map(|owner| Standing {
                    owner,
                    effective: split_grants(effective),
                    trusted: *trusted,
                    expires_ms: None,
                })
            })
            .clone()
    }
}

/// Every kept count of live memories without an expiry: (standing, type,
/// how many).
pub(crate) fn by_kind(r: &(impl Readable + ?Sized)) -> Result<Vec<(Standing, String, u64)>> {
    let mut stmt =
        sql(r).prepare_cached("SELECT effective, owner, trusted, kind, n FROM figure_kinds")?;
    let mut rows = stmt.query([])?;
    let mut decode = Decoder::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(4)?;
        if let Some(s) = decode.standing(row.get(0)?, row.get(1)?, row.get(2)?) {
            out.push((s, row.get(3)?, n.max(0) as u64));
        }
    }
    Ok(out)
}

/// The kept counts of live memories without an expiry created on day
/// `first_day` (days since the epoch) or later: (standing, day, how many).
pub(crate) fn by_day(
    r: &(impl Readable + ?Sized),
    first_day: u64,
) -> Result<Vec<(Standing, u64, u64)>> {
    per_standing_and_day(
        r,
        "SELECT effective, owner, trusted, day, n FROM figure_days WHERE day >= ?1",
        first_day,
    )
}

/// The kept recalls per day (`recall_days`, from `first_day` on) of live
/// memories without an expiry: (standing, day, how many).
pub(crate) fn recalls_by_day(
    r: &(impl Readable + ?Sized),
    first_day: u64,
) -> Result<Vec<(Standing, u64, u64)>> {
    per_standing_and_day(
        r,
        "SELECT effective, owner, trusted, day, n FROM figure_recalls WHERE day >= ?1",
        first_day,
    )
}

/// The rows of a kept per-standing-and-day table (`query` selects
/// effective, owner, trusted, day, n from `first_day` on).
fn per_standing_and_day(
    r: &(impl Readable + ?Sized),
    query: &str,
    first_day: u64,
) -> Result<Vec<(Standing, u64, u64)>> {
    let mut stmt = sql(r).prepare_cached(query)?;
    let mut rows = stmt.query([first_day as i64])?;
    let mut decode = Decoder::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let (day, n): (i64, i64) = (row.get(3)?, row.get(4)?);
        if let Some(s) = decode.standing(row.get(0)?, row.get(1)?, row.get(2)?) {
            out.push((s, day.max(0) as u64, n.max(0) as u64));
        }
    }
    Ok(out)
}

/// The recalls per day (from `first_day` on) of the live memories with an
/// expiry after `now_ms`, read live: (standing with that expiry, day, how
/// many).
pub(crate) fn expiring_recalls(
    r: &(impl Readable + ?Sized),
    now_ms: u64,
    first_day: u64,
) -> Result<Vec<(Standing, u64, u64)>> {
    let mut stmt = sql(r).prepare_cached(&format!(
        "SELECT m.effective, m.owner, m.owner_trusted, m.expires_ms, d.day, d.recalls
         FROM memories m JOIN recall_days d ON d.memory = m.id
         WHERE m.expires_ms IS NOT NULL AND m.expires_ms > ?1 AND d.day >= ?2
           AND {LIVE}"
    ))?;
    let mut rows = stmt.query([now_ms as i64, first_day as i64])?;
    let mut decode = Decoder::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let (expires, day, n): (i64, i64, i64) = (row.get(3)?, row.get(4)?, row.get(5)?);
        if let Some(mut s) = decode.standing(row.get(0)?, row.get(1)?, row.get(2)?) {
            s.expires_ms = Some(expires.max(0) as u64);
            out.push((s, day.max(0) as u64, n.max(0) as u64));
        }
    }
    Ok(out)
}

/// The live memories with an expiry after `now_ms` (the ones the kept
/// counts leave out that anyone may still see), each as its standing with
/// that expiry, its type and its creation day.
pub(crate) fn expiring(
    r: &(impl Readable + ?Sized),
    now_ms: u64,
) -> Result<Vec<(Standing, String, u64)>> {
    let mut stmt = sql(r).prepare_cached(&format!(
        "SELECT effective, owner, owner_trusted, COALESCE(kind, 'note'), created_ms / {DAY},
                expires_ms
         FROM memories WHERE expires_ms IS NOT NULL AND expires_ms > ?1 AND {LIVE}",
        DAY = super::dashboard::DAY_MS,
    ))?;
    let mut rows = stmt.query([now_ms as i64])?;
    let mut decode = Decoder::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let (day, expires): (i64, i64) = (row.get(4)?, row.get(5)?);
        if let Some(mut s) = decode.standing(row.get(0)?, row.get(1)?, row.get(2)?) {
            s.expires_ms = Some(expires.max(0) as u64);
            out.push((s, row.get(3)?, day.max(0) as u64));
        }
    }
    Ok(out)
}

/// The node's memories by state, as `amos status` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Live and not archived.
    pub live: i64,
    /// Live and archived (local-only).
    pub archived: i64,
    /// Tombstoned.
    pub forgotten: i64,
}

/// The kept [`Tally`].
pub(crate) fn tally(r: &(impl Readable + ?Sized)) -> Result<Tally> {
    let mut stmt = sql(r).prepare_cached("SELECT state, n FROM memory_tally")?;
    let mut rows = stmt.query([])?;
    let mut t = Tally::default();
    while let Some(row) = rows.next()? {
        let (state, n): (String, i64) = (row.get(0)?, row.get(1)?);
        match state.as_str() {
            "live" => t.live = n,
            "archived" => t.archived = n,
            "forgotten" => t.forgotten = n,
            _ => {}
        }
    }
    Ok(t)
}

/// The kept tables as they stand, and as a count over every row would make
/// them now (the migration's fill): equal unless a write path escaped the
/// triggers. Each list sorted.
#[cfg(test)]
pub(crate) fn kept_and_recounted(
    r: &(impl Readable + ?Sized),
) -> Result<(Vec<String>, Vec<String>)> {
    let rows = |q: &str| -> Result<Vec<String>> {
        let mut stmt = sql(r).prepare(q)?;
        let out = stmt.query_map([], |row| {
            let cols = row.as_ref().column_count();
            (0..cols)
                .map(|i| {
                    Ok(match row.get_ref(i)? {
                        rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                        v => v.as_str().unwrap_or("?").to_owned(),
                    })
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(|v| v.join("|"))
        })?;
        let mut out = out.collect::<rusqlite::Result<Vec<_>>>()?;
        out.sort();
        Ok(out)
    };
    const KEPT: &str = "content_fact IS NOT NULL AND tombstone_fact IS NULL AND expires_ms IS NULL";
    let mut kept = rows("SELECT 'k', effective, owner, trusted, kind, n FROM figure_kinds")?;
    kept.extend(rows(
        "SELECT 'd', day, effective, owner, trusted, n FROM figure_days",
    )?);
    kept.extend(rows(
        "SELECT 'r', day, effective, owner, trusted, n FROM figure_recalls",
    )?);
    kept.extend(rows("SELECT 't', state, n FROM memory_tally WHERE n != 0")?);
    let mut recounted = rows(&format!(
        "SELECT 'k', effective, owner, owner_trusted, COALESCE(kind, 'note'), COUNT(*)
         FROM memories WHERE {KEPT} GROUP BY 2, 3, 4, 5"
    ))?;
    recounted.extend(rows(&format!(
        "SELECT 'd', created_ms / 86400000, effective, owner, owner_trusted, COUNT(*)
         FROM memories WHERE {KEPT} GROUP BY 2, 3, 4, 5"
    ))?);
    recounted.extend(rows(
        "SELECT 'r', d.day, m.effective, m.owner, m.owner_trusted, SUM(d.recalls)
         FROM recall_days d JOIN memories m ON m.id = d.memory
         WHERE m.content_fact IS NOT NULL AND m.tombstone_fact IS NULL AND m.expires_ms IS NULL
         GROUP BY 2, 3, 4, 5",
    )?);
    recounted.extend(rows(
        "SELECT 't', s, COUNT(*) FROM (SELECT CASE WHEN tombstone_fact IS NOT NULL THEN 'forgotten'
             WHEN content_fact IS NULL THEN NULL WHEN archived != 0 THEN 'archived'
             ELSE 'live' END AS s FROM memories) WHERE s IS NOT NULL GROUP BY s",
    )?);
    kept.sort();
    recounted.sort();
    Ok((kept, recounted))
}

// ------------------------------------------------------------ keeping them

const DAY_MS: i64 = super::dashboard::DAY_MS as i64;

/// The standing a kept table keys a count by, as stored: effective
/// grants, owner, owner rule.
type StoredStanding = (String, String, bool);

/// A memory row's part in the kept figures.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    /// Counted per standing (content, no tombstone, no expiry): the
    /// standing, its type and its UTC creation day.
    counted: Option<(StoredStanding, String, i64)>,
    /// Its state in `memory_tally` (`None`: not counted there).
    state: Option<State>,
    /// Its recalls per day (`recall_days`), when counted.
    recalls: Vec<(i64, i64)>,
}

/// What a transaction moves in the counts of one standing: per type, per
/// creation day, per recall day.
#[derive(Default)]
struct Moves {
    kinds: HashMap<String, i64>,
    days: HashMap<i64, i64>,
    recalls: HashMap<i64, i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Archived,
    Forgotten,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Live => "live",
            State::Archived => "archived",
            State::Forgotten => "forgotten",
        }
    }
}

/// What one write transaction changes in the kept figures: the tables are
/// written once, when it commits ([`Keeper::flush`]), one upsert per
/// standing, type and day it moved — not once per row (a trigger per row
/// cost a bulk sync about a second per 100,000 memories).
///
/// Every write of a memory row's counted columns (content and tombstone
/// facts, expiry, grants in force, owner, owner rule, type, creation day,
/// the archived flag) notes the row first ([`Keeper::touch`]); a row
/// written whole where none was is added as it is ([`Keeper::new_live`]);
/// a recall noted adds itself ([`Keeper::recalled`]). The property test
/// `kept_figures_equal_the_full_scan` holds the tables to a recount after
/// every kind of write.
#[derive(Default)]
pub(crate) struct Keeper {
    /// Each noted row's part when first noted.
    before: HashMap<Vec<u8>, Part>,
    /// The moves of the counts, per standing: one hash of a standing per
    /// row, copied only the first time the transaction meets it.
    moves: HashMap<StoredStanding, Moves>,
    tally: HashMap<&'static str, i64>,
    /// Recall days before this one were dropped.
    pruned_below: Option<i64>,
}

impl Keeper {
    /// Note memory `id` before its row changes (or is written where none
    /// was).
    pub(crate) fn touch(&mut self, conn: &rusqlite::Connection, id: &[u8]) -> Result<()> {
        if self.before.contains_key(id) {
            return Ok(());
        }
        let part = part(conn, id)?;
        self.before.insert(id.to_vec(), part);
        Ok(())
    }

    /// A live memory row was just written where there was none, from facts
    /// in hand: counted as it is, no row read.
    pub(crate) fn new_live(
        &mut self,
        id: &[u8],
        standing: StoredStanding,
        kind: &str,
        created_ms: u64,
        expires: bool,
    ) {
        if self.before.contains_key(id) {
            // Noted already: the flush reads what the row holds then.
            return;
        }
        let part = Part {
            counted: (!expires).then(|| (standing, kind.to_owned(), created_ms as i64 / DAY_MS)),
            state: Some(State::Live),
            recalls: Vec::new(),
        };
        self.add(&part, 1);
    }

    /// Memory `id` was recalled once more on `day`; `counted` is its
    /// standing if it is counted. A row noted before is left to the flush
    /// (it reads the row's recalls then).
    pub(crate) fn recalled(&mut self, id: &[u8], day: i64, counted: Option<StoredStanding>) {
        if self.before.contains_key(id) {
            return;
        }
        if let Some(s) = counted {
            *self
                .moves
                .entry(s)
                .or_default()
                .recalls
                .entry(day)
                .or_default() += 1;
        }
    }

    /// The recalls of the days before `day` were dropped.
    pub(crate) fn pruned_below(&mut self, day: i64) {
        self.pruned_below = Some(self.pruned_below.map_or(day, |d| d.max(day)));
    }

    fn add(&mut self, part: &Part, sign: i64) {
        if let Some((standing, kind, day)) = &part.counted {
            let moves = match self.moves.get_mut(standing) {
                Some(m) => m,
                None => self.moves.entry(standing.clone()).or_default(),
            };
            match moves.kinds.get_mut(kind.as_str()) {
                Some(n) => *n += sign,
                None => {
                    moves.kinds.insert(kind.clone(), sign);
                }
            }
            *moves.days.entry(*day).or_default() += sign;
            for &(d, n) in &part.recalls {
                *moves.recalls.entry(d).or_default() += sign * n;
            }
        }
        if let Some(s) = part.state {
            *self.tally.entry(s.name()).or_default() += sign;
        }
    }

    /// Write what the transaction changed into the kept tables, inside it,
    /// before it commits.
    pub(crate) fn flush(&mut self, conn: &rusqlite::Connection) -> Result<()> {
        for (id, was) in std::mem::take(&mut self.before) {
            let now = part(conn, &id)?;
            if now != was {
                self.add(&was, -1);
                self.add(&now, 1);
            }
        }
        // The recall days dropped go from the kept table too. A move of a
        // dropped day left in `moves` can only take a count out (the rows
        // read now hold none of those days), and a row it takes below one
        // is deleted with the others.
        if let Some(day) = self.pruned_below.take() {
            conn.prepare_cached("DELETE FROM figure_recalls WHERE day < ?1")?
                .execute([day])?;
        }
        // One prepared statement per table, its moves in key order (the
        // primary key's b-tree walked forward, not at random).
        const KIND: &str = "effective, owner, trusted, kind";
        const DAY: &str = "day, effective, owner, trusted";
        let statements = |table: &str, key: &str| -> Result<_> {
            Ok((
                conn.prepare_cached(&format!(
                    "INSERT INTO {table}({key}, n) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT({key}) DO UPDATE SET n = n + excluded.n"
                ))?,
                conn.prepare_cached(&format!(
                    "DELETE FROM {table} WHERE ({key}) = (?1, ?2, ?3, ?4) AND n <= 0"
                ))?,
            ))
        };
        let mut kinds = Vec::new();
        let mut days = Vec::new();
        let mut recalls = Vec::new();
        for ((e, o, t), m) in std::mem::take(&mut self.moves) {
            let standing = (e, o, t);
            for (kind, n) in m.kinds {
                kinds.push(((standing.clone(), kind), n));
            }
            for (day, n) in m.days {
                days.push(((day, standing.clone()), n));
            }
            for (day, n) in m.recalls {
                recalls.push(((day, standing.clone()), n));
            }
        }
        kinds.retain(|(_, n)| *n != 0);
        kinds.sort_unstable();
        let (mut upsert, mut gone) = statements("figure_kinds", KIND)?;
        for (((e, o, t), kind), n) in kinds {
            upsert.execute(params![e, o, t, kind, n])?;
            if n < 0 {
                gone.execute(params![e, o, t, kind])?;
            }
        }
        for (table, mut moves) in [("figure_days", days), ("figure_recalls", recalls)] {
            moves.retain(|(_, n)| *n != 0);
            moves.sort_unstable();
            let (mut upsert, mut gone) = statements(table, DAY)?;
            for ((day, (e, o, t)), n) in moves {
                upsert.execute(params![day, e, o, t, n])?;
                if n < 0 {
                    gone.execute(params![day, e, o, t])?;
                }
            }
        }
        let mut tally =
            conn.prepare_cached("UPDATE memory_tally SET n = n + ?2 WHERE state = ?1")?;
        for (state, n) in std::mem::take(&mut self.tally) {
            if n != 0 {
                tally.execute(params![state, n])?;
            }
        }
        Ok(())
    }
}

/// Memory `id`'s part in the kept figures, from its row (none: no part).
fn part(conn: &rusqlite::Connection, id: &[u8]) -> Result<Part> {
    type Row = (String, String, bool, String, i64, bool, bool, bool, bool);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT effective, owner, owner_trusted, COALESCE(kind, 'note'), created_ms,
                    content_fact IS NOT NULL, tombstone_fact IS NOT NULL, expires_ms IS NULL,
                    archived != 0
             FROM memories WHERE id = ?1",
        )?
        .query_row([id], |r| Row::try_from(r))
        .optional()?;
    let Some((effective, owner, trusted, kind, created_ms, content, tomb, no_expiry, archived)) =
        row
    else {
        return Ok(Part {
            counted: None,
            state: None,
            recalls: Vec::new(),
        });
    };
    let state = match (tomb, content, archived) {
        (true, _, _) => Some(State::Forgotten),
        (false, false, _) => None,
        (false, true, true) => Some(State::Archived),
        (false, true, false) => Some(State::Live),
    };
    let counted = (content && !tomb && no_expiry).then_some((
        (effective, owner, trusted),
        kind,
        created_ms / DAY_MS,
    ));
    let recalls = match counted {
        Some(_) => conn
            .prepare_cached("SELECT day, recalls FROM recall_days WHERE memory = ?1")?
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?,
        None => Vec::new(),
    };
    Ok(Part {
        counted,
        state,
        recalls,
    })
}
