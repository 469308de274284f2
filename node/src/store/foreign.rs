//! Reading another system's SQLite database, read-only, for `amos import`:
//! today agent-memory-os's `memories.db`. Each row comes out as a JSON
//! object with the column names as keys (the shape agent-memory-os's own
//! bundle records have), so one mapper serves both its database and its
//! bundles.
//!
//! The file is untrusted input. What a read may cost is bounded here:
//! no value (nor a row's record) longer than [`MAX_VALUE_BYTES`] is ever
//! built (`SQLITE_LIMIT_LENGTH` on this connection: past it SQLite stops
//! with "too big" instead of allocating); a table with a generated column
//! (computed on every read, e.g. `printf('%.*c', 999999999, 'a')`) or a
//! virtual table is refused before its first row; rows are handed to the
//! caller one at a time. What stays in memory is then what the file holds.
//!
//! Must never write to, lock for writing, or migrate the foreign database:
//! it is opened with `SQLITE_OPEN_READ_ONLY` and only `SELECT`ed from.

use std::path::{Path, PathBuf};

use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

use crate::error::{NodeError, Result};

/// The longest string, blob or row record SQLite builds on a foreign
/// connection: 1 MiB, sixteen times the longest memory text amos accepts
/// (`MAX_TEXT_BYTES`, 64 KiB), so a row holding an acceptable memory plus
/// its tags, source, JSON fields and an embedding blob fits with room to
/// spare, while a crafted value costs at most this much.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// A foreign database opened read-only.
pub struct ForeignDb {
    conn: Connection,
    path: PathBuf,
}

impl ForeignDb {
    pub fn open(path: &Path) -> Result<ForeignDb> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| NodeError::BadInput(format!("cannot open {}: {e}", path.display())))?;
        // Before the first read: nothing longer is ever allocated.
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES as i32)?;
        // A file that is not SQLite fails on its first read.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(|e| {
            NodeError::BadInput(format!("{} is not an SQLite database: {e}", path.display()))
        })?;
        Ok(ForeignDb {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Whether `table` exists.
    pub fn has_table(&self, table: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    fn bad(&self, why: impl std::fmt::Display) -> NodeError {
        NodeError::BadInput(format!("{}: {why}", self.path.display()))
    }

    /// Refuse a table whose rows are not only stored values: a virtual
    /// table, or one with a generated (or hidden) column.
    fn check_stored(&self, table: &str) -> Result<()> {
        let sql: String = self.conn.query_row(
            "SELECT coalesce(sql, '') FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        if sql
            .trim_start()
            .get(..14)
            .is_some_and(|s| s.eq_ignore_ascii_case("create virtual"))
        {
            return Err(self.bad(format!(
                "table {table} is a virtual table: refused (amos reads only stored rows)"
            )));
        }
        let mut stmt = self
            .conn
            .prepare("SELECT name, hidden FROM pragma_table_xinfo(?1)")?;
        let mut cols = stmt.query([table])?;
        while let Some(c) = cols.next()? {
            let hidden: i64 = c.get(1)?;
            if hidden != 0 {
                let name: String = c.get(0)?;
                let what = if hidden == 1 { "hidden" } else { "generated" };
                return Err(self.bad(format!(
                    "table {table} has a {what} column {name:?}: refused (amos reads only stored values)"
                )));
            }
        }
        Ok(())
    }

    /// Hand every row of `table` to `each` as a JSON object, one at a time,
    /// in rowid order (`each` gets the row's 0-based number too). `table`
    /// must be one the caller names literally (it is checked to be an
    /// identifier). A value longer than [`MAX_VALUE_BYTES`] stops the read
    /// with an error naming the row.
    pub fn each_row(
        &self,
        table: &str,
        mut each: impl FnMut(usize, Map<String, Value>) -> Result<()>,
    ) -> Result<()> {
        if !table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(NodeError::BadInput(format!("bad table name {table:?}")));
        }
        self.check_stored(table)?;
        let mut stmt = self.conn.prepare(&format!("SELECT * FROM {table}"))?;
        let names: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
        let mut rows = stmt.query([])?;
        let mut n = 0;
        let too_big = |n: usize, e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::TooBig) => self.bad(format!(
                "{table} row {}: a value longer than {} bytes: refused",
                n + 1,
                MAX_VALUE_BYTES
            )),
            _ => self.bad(format!("{table} row {}: unreadable: {e}", n + 1)),
        };
        while let Some(r) = rows.next().map_err(|e| too_big(n, e))? {
            let mut obj = Map::new();
            for (i, name) in names.iter().enumerate() {
                let v = match r.get_ref(i).map_err(|e| too_big(n, e))? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(x) => Value::from(x),
                    ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => Value::Null,
                };
                obj.insert(name.clone(), v);
            }
            each(n, obj)?;
            n += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(sql: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memories.db");
        Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        (dir, path)
    }

    fn read_all(path: &Path, table: &str) -> Result<usize> {
        let db = ForeignDb::open(path)?;
        let mut n = 0;
        db.each_row(table, |_, _| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }

    #[test]
    fn a_generated_column_is_refused_before_any_row_is_read() {
        for kind in ["VIRTUAL", "STORED"] {
            let (_d, path) = db(&format!(
                "CREATE TABLE memories(id TEXT, owner TEXT, content TEXT GENERATED ALWAYS AS
                   (printf('%.*c', 999, 'a')) {kind});
                 INSERT INTO memories(id, owner) VALUES ('m1', 'alice');"
            ));
            let e = read_all(&path, "memories").unwrap_err().to_string();
            assert!(e.contains("generated column \"content\""), "{kind}: {e}");
        }
    }

    #[test]
    fn a_value_longer_than_the_limit_is_never_built() {
        // Stored: a plain row too long to read.
        let (_d, path) = db(&format!(
            "CREATE TABLE memories(id TEXT, content TEXT);
             INSERT INTO memories VALUES ('ok', 'fine');
             INSERT INTO memories VALUES ('big', printf('%.*c', {}, 'a'));",
            MAX_VALUE_BYTES + 1
        ));
        let e = read_all(&path, "memories").unwrap_err().to_string();
        assert!(e.contains("memories row 2: a value longer than"), "{e}");
        // Computed while reading (what a generated column would do): SQLite
        // stops at the limit instead of allocating a gigabyte.
        let db = ForeignDb::open(&path).unwrap();
        let e = db
            .conn
            .query_row("SELECT printf('%.*c', 999999999, 'a')", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap_err();
        assert_eq!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::TooBig));
    }
}
