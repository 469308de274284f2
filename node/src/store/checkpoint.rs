//! Checkpoints beside the writer: copying the write-ahead log back into the
//! database file on a thread of the store's own, so that the commit which
//! fills the log does not wait for the copy and its two `fsync`s.
//!
//! SQLite's default (`wal_autocheckpoint`, 1,000 pages) runs the checkpoint
//! inside the commit that crossed the mark. A recall's bookkeeping commit
//! (noting its hits as recalled, a few dozen scattered rows) crosses it
//! every few dozen recalls, and that recall then waits for 4 MB to be
//! copied and both files synced: 10–25 ms at 100k and 1M memories on a
//! 2-core virtual machine, the whole of search's and pack's p99 there
//! (docs/bench.md, "Checkpoints beside the writer").
//!
//! Here the connection's WAL hook (which replaces the automatic checkpoint)
//! only wakes the checkpoint thread once the log holds [`WAKE_AT_PAGES`];
//! the thread, started at the first wake (a process that never fills the
//! log starts none), runs a passive checkpoint on a connection of its own.
//! Should the log still grow to [`INLINE_AT_PAGES`], the committing
//! connection checkpoints in line, as SQLite would have. Under writes that
//! never pause it does, once in about ten rounds: SQLite restarts the log
//! only at a write that begins with every frame copied, and with commits
//! arriving during each checkpoint none does, so the log grows a round at
//! a time until then.
//!
//! Invariant: the hook never fails a commit. Whatever a checkpoint returns
//! (busy, an I/O error) is logged and dropped: the commit has already
//! happened, and an unfinished checkpoint loses nothing (the frames stay in
//! the log until the next one).
//!
//! Boundary: this module moves pages, never rows; it reads and writes no
//! table and knows nothing of what the store holds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

/// Pages in the log at which the checkpoint thread is woken (SQLite's own
/// automatic checkpoint mark).
pub(crate) const WAKE_AT_PAGES: i32 = 1_000;

/// Pages in the log at which the committing connection checkpoints in line
/// after all (40 MB at 4 KiB pages).
pub(crate) const INLINE_AT_PAGES: i32 = 10_000;

/// The checkpoint thread's side of the store: install with [`install`],
/// stop with [`Checkpoints::stop`] (the store does, when dropped).
#[derive(Debug)]
pub(crate) struct Checkpoints {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
    /// Notified after each checkpoint the thread ran.
    ran: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// A checkpoint was asked for and not yet started.
    pending: bool,
    /// The store is closing: the thread ends.
    closed: bool,
    thread: Option<JoinHandle<()>>,
    /// Checkpoints the thread has run (for tests).
    runs: u64,
}

/// Replace `conn`'s automatic checkpoint (on the database file `path`) with
/// one on a thread beside it.
pub(crate) fn install(conn: &mut Connection, path: &Path) -> rusqlite::Result<Checkpoints> {
    let shared = Arc::new(Shared {
        path: path.to_owned(),
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        ran: Condvar::new(),
    });
    let hook = Arc::clone(&shared);
    // The log's size at the last ask: commits made while the thread copies
    // do not ask again (that would run a second checkpoint, two more
    // `fsync`s, for the few frames they added), only a log restarted and
    // filled again, or one that grew by another mark's worth (the thread
    // could not finish: a reader was still in the log).
    let mut asked_at = 0;
    conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages < asked_at {
            asked_at = 0;
        }
        if pages >= INLINE_AT_PAGES {
            if let Err(e) = wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                tracing::debug!(error = %e, pages, "in-line checkpoint did not finish");
            }
        } else if pages >= asked_at + WAKE_AT_PAGES {
            asked_at = pages;
            Shared::ask(&hook);
        }
        Ok(())
    }))?;
    Ok(Checkpoints { shared })
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ask for a checkpoint, starting the thread at the first ask.
    fn ask(shared: &Arc<Shared>) {
        let mut state = shared.lock();
        if state.closed {
            return;
        }
        state.pending = true;
        if state.thread.is_none() {
            let this = Arc::clone(shared);
            match std::thread::Builder::new()
                .name("amos-checkpoint".into())
                .spawn(move || this.run())
            {
                Ok(handle) => state.thread = Some(handle),
                Err(e) => tracing::debug!(error = %e, "no checkpoint thread"),
            }
        }
        drop(state);
        shared.wake.notify_one();
    }

    /// The thread: a connection of its own, one passive checkpoint per
    /// wake (asks that arrive during one are folded into the next).
    fn run(&self) {
        let conn = match super::connect(&self.path, super::Connect::EXISTING) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "checkpoint thread cannot open the store");
                return;
            }
        };
        // A new connection reads the file's header (and so learns it is in
        // WAL mode) at its first statement; a checkpoint before that does
        // nothing (it answers -1, -1).
        match conn.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => {}
            Ok(mode) => {
                tracing::debug!(mode, "store not in WAL mode: no checkpoint thread");
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "checkpoint thread cannot read the store");
                return;
            }
        }
        loop {
            let mut state = self.lock();
            while !state.pending && !state.closed {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.closed {
                return;
            }
            state.pending = false;
            drop(state);
            match conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE) {
                Ok((log, copied)) => tracing::trace!(log, copied, "checkpoint"),
                Err(e) => tracing::debug!(error = %e, "checkpoint did not finish"),
            }
            self.lock().runs += 1;
            self.ran.notify_all();
        }
    }
}

impl Checkpoints {
    /// End the thread (after the checkpoint it is running, if any).
    pub(crate) fn stop(&self) {
        let thread = {
            let mut state = self.shared.lock();
            state.closed = true;
            state.thread.take()
        };
        self.shared.wake.notify_one();
        if let Some(t) = thread
            && t.join().is_err()
        {
            tracing::debug!("checkpoint thread panicked");
        }
    }

    /// Wait (at most `bound`) until the thread has run `n` checkpoints;
    /// how many it has run.
    #[cfg(test)]
    pub(crate) fn wait_for_runs(&self, n: u64, bound: std::time::Duration) -> u64 {
        let state = self.shared.lock();
        let (state, _) = self
            .shared
            .ran
            .wait_timeout_while(state, bound, |s| s.runs < n)
            .unwrap_or_else(PoisonError::into_inner);
        state.runs
    }

    /// Whether the thread was started.
    #[cfg(test)]
    pub(crate) fn started(&self) -> bool {
        self.shared.lock().thread.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A WAL-mode database at `dir/db` with the hook installed and a table
    /// of 4 KiB blobs to fill pages with.
    fn open(dir: &Path) -> (Connection, Checkpoints, PathBuf) {
        let path = dir.join("db");
        let mut conn = Connection::open(&path).unwrap();
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
            .unwrap();
        conn.execute_batch("CREATE TABLE pages (b BLOB NOT NULL)")
            .unwrap();
        let checkpoints = install(&mut conn, &path).unwrap();
        (conn, checkpoints, path)
    }

    /// Write `n` pages' worth of rows in one transaction.
    fn fill(conn: &mut Connection, n: usize) {
        let tx = conn.transaction().unwrap();
        for _ in 0..n {
            tx.execute("INSERT INTO pages (b) VALUES (zeroblob(4000))", [])
                .unwrap();
        }
        tx.commit().unwrap();
    }

    fn db_bytes(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn a_full_log_wakes_the_thread_which_copies_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, checkpoints, path) = open(dir.path());
        fill(&mut conn, 1_500);
        // The commit woke the thread (the automatic checkpoint it replaces
        // would have copied the log in line, and started no thread)...
        assert!(checkpoints.started());
        // ...and the thread copies the pages into the database file.
        assert_eq!(checkpoints.wait_for_runs(1, Duration::from_secs(60)), 1);
        assert!(db_bytes(&path) >= 1_500 * 4_000, "{}", db_bytes(&path));
        checkpoints.stop();
        // Stopped: a later full log (grown by more than a mark since the
        // last ask, so it asks again) starts no thread.
        fill(&mut conn, 3_000);
        assert!(!checkpoints.started());
    }

    #[test]
    fn the_store_checkpoints_beside_its_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("amos.db");
        let mut store = crate::store::Store::create(&path, [7; 16]).unwrap();
        store
            .write(|tx| {
                tx.conn().execute_batch("CREATE TABLE scratch (b BLOB)")?;
                for _ in 0..1_500 {
                    tx.conn()
                        .execute("INSERT INTO scratch (b) VALUES (zeroblob(4000))", [])?;
                }
                Ok(())
            })
            .unwrap();
        let checkpoints = &store.checkpoints;
        assert!(checkpoints.started());
        assert_eq!(checkpoints.wait_for_runs(1, Duration::from_secs(60)), 1);
        assert!(db_bytes(&path) >= 1_500 * 4_000, "{}", db_bytes(&path));
        // Dropping the store ends the thread before it returns: the
        // thread's and the hook's holds on the shared state are gone.
        let shared = Arc::downgrade(&checkpoints.shared);
        drop(store);
        assert!(
            shared.upgrade().is_none(),
            "the checkpoint thread outlived its store"
        );
    }

    #[test]
    fn a_log_that_never_fills_starts_no_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, checkpoints, path) = open(dir.path());
        for _ in 0..20 {
            fill(&mut conn, 10);
        }
        assert!(!checkpoints.started());
        assert!(db_bytes(&path) < 200 * 4_000, "{}", db_bytes(&path));
    }

    #[test]
    fn a_log_the_thread_did_not_empty_is_checkpointed_by_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, checkpoints, path) = open(dir.path());
        let pages = INLINE_AT_PAGES as usize + 500;
        fill(&mut conn, pages);
        // Past the in-line mark the commit copied the log itself: the
        // pages are in the file as it returns, and no thread was asked.
        assert!(
            db_bytes(&path) >= (pages * 4_000) as u64,
            "{}",
            db_bytes(&path)
        );
        assert!(!checkpoints.started());
    }
}
