//! The one connection factory: every connection amos opens to a store's
//! file — the [`Store`](super::Store) itself, its checkpoint thread, a
//! backup written or restored, a serving node's watchers, the metrics
//! health probe — is made by `connect` from a [`Connect`]: the open
//! flags, the busy timeout and the per-connection pragmas, in one place.
//!
//! Boundary: opens connections only; the file-wide settings (WAL, the
//! schema) are `Store::create`'s and `Store::open`'s.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::{Readable, sealed};
use crate::error::Result;

/// SQLite's page cache per connection, in KiB.
const PAGE_CACHE_KIB: i64 = 32 * 1024;

/// Prepared statements kept per connection. rusqlite keeps 16 by default,
/// fewer than one sync batch's write transaction runs in turn (the apply,
/// the figures' flush, the echo ranges, the arrivals, the counters): each
/// transaction then prepared again what the last one had evicted.
const STATEMENT_CACHE: usize = 256;

/// How long a writer waits for another process's write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a connection may create the file, write it, or only read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create the file if it is missing (`amos init`, a new store).
    Create,
    /// Read and write an existing file; never create one.
    Existing,
    /// Read an existing file; never write or create.
    ReadOnly,
}

/// How a connection to a store's file is opened. Every connection amos
/// opens to a store file goes through `connect` with one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// Whether the file may be created or written.
    pub access: Access,
    /// How long a statement waits for another process's lock.
    pub wait: Duration,
}

impl Connect {
    /// `access`, waiting up to `wait` for another process's lock.
    pub const fn new(access: Access, wait: Duration) -> Connect {
        Connect { access, wait }
    }

    /// The store itself ([`Store::open`](super::Store::open)) and its checkpoint thread.
    pub const EXISTING: Connect = Connect::new(Access::Existing, BUSY_TIMEOUT);
    /// A new store ([`Store::create`](super::Store::create)).
    pub const CREATE: Connect = Connect::new(Access::Create, BUSY_TIMEOUT);
    /// A file read and never written: a backup about to be restored.
    pub const READ_ONLY: Connect = Connect::new(Access::ReadOnly, BUSY_TIMEOUT);
    /// A watcher beside a serving node (the handshake acceptor, the `seq`
    /// poller, the health probe): it reads one small table and must answer
    /// soon, so it waits [`WATCH_WAIT`] for a writer, not [`BUSY_TIMEOUT`],
    /// and fails that read instead (the next poll or handshake reads again).
    pub const WATCH: Connect = Connect::new(Access::Existing, WATCH_WAIT);
}

/// How long a watcher's read ([`Connect::WATCH`]) waits for a writer.
pub const WATCH_WAIT: Duration = Duration::from_secs(2);

/// How often a watcher reads the store's `seq` counter (one indexed read of
/// one row): `serve`'s push on change and its encoder catch-up.
pub const SEQ_POLL: Duration = Duration::from_millis(50);

/// The one connection factory: the flags of `how.access` (never shared
/// between threads: `NO_MUTEX`), its busy timeout, and the per-connection
/// pragmas every connection runs with. The file-wide settings (WAL, the
/// schema) are [`Store::create`](super::Store::create)'s and [`Store::open`](super::Store::open)'s.
pub(in crate::store) fn connect(path: &Path, how: Connect) -> rusqlite::Result<Connection> {
    let flags = match how.access {
        Access::Create => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Access::Existing => OpenFlags::SQLITE_OPEN_READ_WRITE,
        Access::ReadOnly => OpenFlags::SQLITE_OPEN_READ_ONLY,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(how.wait)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // NORMAL in WAL mode: a committed write survives a crash of the
    // process; a power cut may lose the last commits but never corrupts.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Recall re-reads every candidate row: keep the hot pages cached
    // (SQLite's default is 2 MiB).
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(conn)
}

/// A connection for a thread beside the node that only watches (the serving
/// node's handshake acceptor and `seq` poller, the health probe): opened by
/// `connect` with [`Connect::WATCH`]; reads through [`Readable`](super::Readable).
pub struct Watch {
    conn: Connection,
}

impl Watch {
    /// Open the store file at `path` to watch it (read-only).
    pub fn open(path: &Path) -> Result<Watch> {
        Ok(Watch {
            conn: connect(path, Connect::WATCH)?,
        })
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

impl Readable for Watch {
    fn connection(&self, _: sealed::Key) -> &Connection {
        &self.conn
    }
}
