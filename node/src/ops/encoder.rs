//! `amos serve`'s background catch-up of the sentence encoder: a thread of
//! its own, with its own node handle, encodes the memories a bulk path
//! (import, bundle import, sync, rebuild) left pending, [`BATCH`] at a
//! time, and when none are left waits for the store to change (it reads
//! the store's `seq` every [`SEQ_POLL`], as push on change does). It
//! reports what it counted to the `/metrics` gauges
//! ([`metrics::encoder_progress`]).
//!
//! Must never: hold the store's write lock while encoding (a batch reads
//! its rows, encodes them with no transaction open and writes only the
//! encoder's own files, under the index lock: `index::encoded`); make
//! `serve` fail (an error is logged and the catch-up tried again later,
//! backing off); outlive `serve` (it stops between two batches and is
//! joined, with a bound, when [`BackgroundEncoder`] is dropped).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::api::node::Node;
use crate::error::Result;
use crate::home::Home;
use crate::index::encoded::BATCH;
use crate::ops::metrics;
use crate::progress::Progress;
use crate::store::Watch;

/// How often an idle catch-up reads the store's `seq`.
pub use crate::store::SEQ_POLL;
/// An idle catch-up looks again this often even when the store did not
/// move (`amos config set encoder on` moves no `seq`).
const RECHECK: Duration = Duration::from_secs(60);
/// The first wait after an error; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How long dropping the handle waits for the batch in hand.
const JOIN_WAIT: Duration = Duration::from_secs(60);

/// The running background catch-up; stops it when dropped.
pub struct BackgroundEncoder {
    stop: Arc<AtomicBool>,
    /// Wakes the thread from a wait (sent on drop).
    wake: Sender<()>,
    /// Said by the thread when it ends.
    ended: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// Start the background catch-up on `home`. Never fails: if the thread
/// cannot start, it says so and `serve` goes on without it.
pub fn start(home: &Home) -> BackgroundEncoder {
    let stop = Arc::new(AtomicBool::new(false));
    let (wake, woken) = mpsc::channel();
    let (end, ended) = mpsc::channel();
    let thread = {
        let (home, stop) = (home.clone(), stop.clone());
        std::thread::Builder::new()
            .name("amos-encoder".into())
            .spawn(move || {
                run(&home, &stop, &woken);
                let _ = end.send(());
            })
            .inspect_err(|e| warn!("the encoder's background catch-up did not start: {e}"))
            .ok()
    };
    BackgroundEncoder {
        stop,
        wake,
        ended,
        thread,
    }
}

impl Drop for BackgroundEncoder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.wake.send(());
        let Some(thread) = self.thread.take() else {
            return;
        };
        // The batch in hand finishes first (its file is saved whole).
        match self.ended.recv_timeout(JOIN_WAIT) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                let _ = thread.join();
            }
            Err(RecvTimeoutError::Timeout) => {
                warn!("the encoder's background catch-up did not stop in time");
            }
        }
    }
}

/// What one look at the encoder did.
enum Step {
    /// Encoded a batch and more may wait.
    Encoded,
    /// Nothing to encode (or the encoder is off, or what is left cannot be
    /// encoded): wait for the store to change.
    Idle,
}

fn run(home: &Home, stop: &AtomicBool, woken: &Receiver<()>) {
    let mut node: Option<Node> = None;
    let mut watch: Option<Watch> = None;
    let mut backoff = RETRY_MIN;
    while !stop.load(Ordering::SeqCst) {
        // Read before the look: a change after it is not missed.
        let seq = seq_now(home, &mut watch);
        match step(home, &mut node, stop) {
            Ok(Step::Encoded) => backoff = RETRY_MIN,
            Ok(Step::Idle) => {
                backoff = RETRY_MIN;
                wait_for_change(home, &mut watch, seq, stop, woken);
            }
            Err(e) => {
                warn!(
                    "the encoder's background catch-up: {e}; trying again in {}",
                    humantime::format_duration(backoff)
                );
                node = None;
                if woken.recv_timeout(backoff).is_ok() {
                    continue;
                }
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
    }
    debug!("the encoder's background catch-up stopped");
}

/// Count the pending memories and encode a batch of them.
fn step(home: &Home, slot: &mut Option<Node>, stop: &AtomicBool) -> Result<Step> {
    let node = match slot {
        Some(n) => n,
        None => slot.insert(Node::open(home)?),
    };
    let Some(before) = node.encoder_status()? else {
        metrics::encoder_progress(None, 0);
        // Opened again next time: the setting is read when a node opens.
        *slot = None;
        return Ok(Step::Idle);
    };
    let before = before.progress;
    if before.pending == 0 || stop.load(Ordering::SeqCst) {
        metrics::encoder_progress(Some((before.encoded, before.pending)), 0);
        return Ok(Step::Idle);
    }
    let encoded = node.encoder_catch_up(BATCH, &Progress::hidden())?;
    let after = node
        .encoder_status()?
        .map(|s| s.progress)
        .unwrap_or_default();
    metrics::encoder_progress(Some((after.encoded, after.pending)), encoded as u64);
    debug!(
        encoded,
        pending = after.pending,
        "the encoder's background catch-up"
    );
    if after.pending == 0 {
        info!(
            "the encoder has encoded every memory ({} in all)",
            after.encoded
        );
    }
    // Memories it could not encode stay pending: wait for a change rather
    // than encode them again at once.
    Ok(match after.pending < before.pending {
        true => Step::Encoded,
        false => Step::Idle,
    })
}

/// The store's `seq`, on the catch-up's own read connection (`None` when
/// it cannot be read: then the wait is a plain [`RECHECK`]).
fn seq_now(home: &Home, watch: &mut Option<Watch>) -> Option<i64> {
    if watch.is_none() {
        *watch = Watch::open(&home.db_path())
            .inspect_err(|e| debug!("the encoder's catch-up cannot watch the store: {e}"))
            .ok();
    }
    let conn = watch.as_ref()?;
    match crate::store::max_seq(conn) {
        Ok(seq) => Some(seq),
        Err(e) => {
            debug!("the encoder's catch-up cannot read the store's seq: {e}");
            *watch = None;
            None
        }
    }
}

/// Wait until the store's `seq` differs from `seen`, [`RECHECK`] passes
/// or the catch-up is stopped.
fn wait_for_change(
    home: &Home,
    watch: &mut Option<Watch>,
    seen: Option<i64>,
    stop: &AtomicBool,
    woken: &Receiver<()>,
) {
    let polls = RECHECK.as_millis() / SEQ_POLL.as_millis().max(1);
    for _ in 0..polls {
        if stop.load(Ordering::SeqCst) || woken.recv_timeout(SEQ_POLL).is_ok() {
            return;
        }
        let now = seq_now(home, watch);
        if now.is_some() && now != seen {
            return;
        }
    }
}
