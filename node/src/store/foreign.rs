//! Reading another system's SQLite database, read-only, for `amos import`:
//! today agent-memory-os's `memories.db`. Each row comes out as a JSON
//! object with the column names as keys (the shape agent-memory-os's own
//! bundle records have), so one mapper serves both its database and its
//! bundles.
//!
//! Must never write to, lock for writing, or migrate the foreign database:
//! it is opened with `SQLITE_OPEN_READ_ONLY` and only `SELECT`ed from.

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

use crate::error::{NodeError, Result};

/// A foreign database opened read-only.
pub struct ForeignDb(Connection);

impl ForeignDb {
    pub fn open(path: &Path) -> Result<ForeignDb> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| NodeError::BadInput(format!("cannot open {}: {e}", path.display())))?;
        // A file that is not SQLite fails on its first read.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(|e| {
            NodeError::BadInput(format!("{} is not an SQLite database: {e}", path.display()))
        })?;
        Ok(ForeignDb(conn))
    }

    /// Whether `table` exists.
    pub fn has_table(&self, table: &str) -> Result<bool> {
        Ok(self.0.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    /// Every row of `table` as a JSON object, in rowid order. `table` must be
    /// one the caller names literally (it is checked to be an identifier).
    pub fn rows(&self, table: &str) -> Result<Vec<Map<String, Value>>> {
        if !table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(NodeError::BadInput(format!("bad table name {table:?}")));
        }
        let mut stmt = self.0.prepare(&format!("SELECT * FROM {table}"))?;
        let names: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut obj = Map::new();
            for (i, name) in names.iter().enumerate() {
                let v = match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(x) => Value::from(x),
                    ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => Value::Null,
                };
                obj.insert(name.clone(), v);
            }
            out.push(obj);
        }
        Ok(out)
    }
}
