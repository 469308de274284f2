//! Mailboxes (docs/design.md §8.2): a directory through which a peer and
//! this node exchange sealed bundles, for two nodes that are never online
//! at the same time. `amos peers add ID --policy P --mailbox DIR` names
//! it (or `amos peers mailbox ID --relay RELAY_ID`: a relay holds it, and
//! `net::relay::mailbox` mirrors what the relay holds into a spool
//! directory in this home, [`MailboxPlace`]); each `amos sync now|auto`
//! and each of `amos serve`'s sync passes runs [`Node::mailbox_sync`] for
//! every peer that has one (`net::relay::mailbox::mailbox_pass`): import the sealed
//! bundles in DIR that the peer addressed to this node (each verified
//! completely, applied through the import gate, its postmark moving our
//! watermark of the peer, then removed), then post one or more sealed
//! bundles holding what the peer has not had.
//!
//! This module owns the mailbox's files: which it reads, in what order,
//! what it posts and how (a hidden temporary name, fsync, rename), and
//! where a posted bundle starts (the peer's acknowledgement, or after our
//! bundles still waiting in DIR). It must never trust a file's name (the
//! header says who sent a bundle and to whom, and only a complete
//! verification of a bundle sealed to this node lets anything of it
//! through), never touch a file it did not post or that is not addressed to
//! this node, and never remove a bundle before every fact of it committed.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use amos_protocol::wire::{Features, Watermark};
use amos_protocol::{BundleWriter, Hlc, NodeId, Postmark, Recipient, SealTo, peek_header};
use amos_sync::session::HeldBack;
use rand::RngExt;
use serde::Serialize;

use crate::api::node::Node;
use crate::error::{NodeError, Result, UnknownKind};
use crate::home::Home;
use crate::progress::Feedback;
use crate::store::{echo, peers, replica};

/// At most this many changed rows (memories, text edits, links, org and
/// registry records) go into one mailbox bundle; the rest go into the next
/// one, posted in the same pass. A row carries at most three facts
/// besides an edited memory's text changes, each row of those counted too.
pub const MAILBOX_MAX_ROWS: usize = 20_000;

/// At most this many bundles are posted for one peer in one pass.
const MAX_POSTS_PER_PASS: usize = 1_000;

/// The extension of a posted bundle's file name (never trusted on reading).
const EXTENSION: &str = "amosb";

/// What one mailbox pass did for one peer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MailboxOutcome {
    /// The peer (node id).
    pub peer: String,
    /// Where its mailbox lives: a directory, or `relay:ID`
    /// ([`MailboxPlace::to_row`]).
    pub dir: String,
    /// Bundles imported from the peer (then removed).
    pub imported: u64,
    /// Facts in them.
    pub facts_in: u64,
    /// Of those, applied here.
    pub applied: u64,
    /// Of those, refused by the gate (see `amos audit`).
    pub refused: u64,
    /// Bundles posted for the peer.
    pub posted: u64,
    /// Facts in them.
    pub facts_out: u64,
    /// Bytes of them.
    pub bytes_out: u64,
    /// Our bundles for the peer still waiting in DIR (posted before, not
    /// taken yet).
    pub waiting: u64,
    /// Bundles the peer addressed to this node that could not be imported
    /// this time (truncated, still being copied, tampered): left in DIR,
    /// each with its reason.
    pub left: Vec<String>,
    /// Why the pass failed, if it did (the directory is missing, …).
    pub error: Option<String>,
}

/// A file of the mailbox, as its header says (unauthenticated until
/// verified).
struct Found {
    path: PathBuf,
    postmark: Option<Postmark>,
}

/// What the scan of a mailbox found for one peer.
#[derive(Default)]
struct Scan {
    /// Sealed bundles from the peer to this node.
    inbound: Vec<Found>,
    /// Sealed bundles from this node to the peer, not taken yet.
    outbound: Vec<Found>,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> NodeError {
    NodeError::io(what)
}

/// Read every file's header in `dir` (never its name): which sealed
/// bundles `peer` addressed to `me`, and which of ours for `peer` wait.
/// Hidden files (a temporary name being written) and files that are no
/// bundle, or whose header does not read, are left out and left alone.
fn scan(dir: &Path, me: &NodeId, peer: &NodeId) -> Result<Scan> {
    let mut out = Scan::default();
    let entries = fs::read_dir(dir).map_err(io_err(format!("reading {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_err(format!("reading {}", dir.display())))?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = File::open(&path) else {
            continue;
        };
        let Ok(info) = peek_header(std::io::BufReader::new(file)) else {
            continue;
        };
        if !info.sealed {
            continue;
        }
        let found = Found {
            path,
            postmark: info.postmark,
        };
        match (info.header.sender, info.header.recipient) {
            (s, Recipient::Node(r)) if s == *peer && r == *me => out.inbound.push(found),
            (s, Recipient::Node(r)) if s == *me && r == *peer => out.outbound.push(found),
            _ => {}
        }
    }
    // A peer's bundles in the order of its log, so each one's postmark
    // continues the watermark the one before it moved.
    let order = |f: &Found| {
        f.postmark
            .map_or((i64::MAX, i64::MAX), |p| (p.since, p.upto))
    };
    out.inbound.sort_by_key(order);
    Ok(out)
}

/// Make sure `dir` is written to disk: a rename is durable only once its
/// directory is.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("syncing {}", dir.display())))
}

impl Node {
    /// Set (or with `None` clear) the mailbox directory of a registered
    /// peer. The directory must exist; it is kept as an absolute path.
    pub fn peer_set_mailbox(&mut self, node_id: &str, dir: Option<&Path>) -> Result<()> {
        let id: NodeId = node_id
            .parse()
            .map_err(|e: amos_protocol::ProtocolError| NodeError::BadInput(e.to_string()))?;
        let dir = match dir {
            Some(d) => {
                let abs = fs::canonicalize(d)
                    .map_err(|e| NodeError::BadInput(format!("mailbox {}: {e}", d.display())))?;
                if !abs.is_dir() {
                    return Err(NodeError::BadInput(format!(
                        "mailbox {}: not a directory",
                        d.display()
                    )));
                }
                Some(abs.display().to_string())
            }
            None => None,
        };
        if !self
            .store
            .write(|tx| peers::set_mailbox(tx, &id, dir.as_deref()))?
        {
            return Err(NodeError::unknown(UnknownKind::Peer, id.short()));
        }
        Ok(())
    }

    /// Make `relay` — a registered peer with a relay link — hold the
    /// mailbox of the registered peer `node_id` (docs/design.md §8.2): both
    /// must use the same relay, each naming it for the other.
    pub fn peer_set_mailbox_relay(&mut self, node_id: &str, relay: &str) -> Result<()> {
        let parse = |s: &str| {
            s.parse::<NodeId>()
                .map_err(|e: amos_protocol::ProtocolError| NodeError::BadInput(e.to_string()))
        };
        let (id, relay) = (parse(node_id)?, parse(relay)?);
        if id == relay {
            return Err(NodeError::BadInput(
                "a peer's mailbox cannot be held by the peer itself".into(),
            ));
        }
        if !self.store.read(|r| peers::is_relay(r, &relay))? {
            return Err(NodeError::BadInput(format!(
                "{} is not a relay peer here: add it with `amos peers add {relay} ADDR --policy none --relay`",
                relay.short()
            )));
        }
        let place = MailboxPlace::Relay(relay).to_row();
        if !self
            .store
            .write(|tx| peers::set_mailbox(tx, &id, Some(&place)))?
        {
            return Err(NodeError::unknown(UnknownKind::Peer, id.short()));
        }
        Ok(())
    }

    /// The address to reach `relay`, which holds a mailbox: it must still
    /// be a relay peer here with an address.
    pub(crate) fn mailbox_relay_addr(&self, relay: &NodeId) -> Result<String> {
        let (is_relay, addr) = self
            .store
            .read(|r| Ok((peers::is_relay(r, relay)?, peers::addr(r, relay)?.flatten())))?;
        match (is_relay, addr) {
            (true, Some(a)) => Ok(a),
            (true, None) => Err(NodeError::BadInput(format!(
                "relay {} has no address here (`amos peers add {relay} ADDR --policy none --relay`)",
                relay.short()
            ))),
            (false, _) => Err(NodeError::BadInput(format!(
                "{} holds a mailbox but is no longer a relay peer here",
                relay.short()
            ))),
        }
    }

    /// A sealed mailbox bundle from `peer` was applied completely: like a
    /// session's `Done`, its postmark moves our watermark of the peer — if
    /// we held its log up to where the bundle starts (the same epoch and at
    /// least `since`, or `since` 0) — and records which of our log the
    /// peer said it holds, where our next bundle for it starts.
    pub(crate) fn apply_postmark(&mut self, peer: &NodeId, p: &Postmark) -> Result<()> {
        let current = self.watermark_of(peer)?;
        let next = match current {
            Some(w) if w.epoch == p.epoch && w.seq >= p.since => Some(w.seq.max(p.upto)),
            _ if p.since == 0 => Some(p.upto),
            _ => None,
        };
        if let Some(seq) = next
            && current
                != Some(Watermark {
                    epoch: p.epoch,
                    seq,
                })
        {
            self.save_watermark(
                peer,
                &Watermark {
                    epoch: p.epoch,
                    seq,
                },
            )?;
        }
        if let Some(have) = p.have {
            let hex = data_encoding::HEXLOWER.encode(&have.epoch);
            self.store.write(|tx| {
                let seq = match peers::mailbox_ack(tx, peer)? {
                    Some((e, old)) if e == hex => old.max(have.seq),
                    _ => have.seq,
                };
                peers::record_mailbox_ack(tx, peer, &hex, seq)
            })?;
        }
        Ok(())
    }

    /// One mailbox exchange with `peer` through `dir`: import what it
    /// posted for this node, then post what it has not had.
    pub fn mailbox_sync(&mut self, peer: &NodeId, dir: &Path) -> Result<MailboxOutcome> {
        let mut out = MailboxOutcome {
            peer: peer.to_string(),
            dir: dir.display().to_string(),
            ..MailboxOutcome::default()
        };
        let me = self.node_id();
        let before = self.watermark_of(peer)?;
        for f in scan(dir, &me, peer)?.inbound {
            match self.bundle_import_from(&f.path, Some(peer), Feedback::Quiet) {
                Ok((r, _)) => {
                    out.imported += 1;
                    out.facts_in += r.facts;
                    out.applied += r.applied;
                    out.refused += r.refused;
                    // Every fact committed: the bundle is done with. Another
                    // process may have taken it meanwhile.
                    match fs::remove_file(&f.path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(NodeError::io(format!("removing {}", f.path.display()))(e));
                        }
                    }
                }
                Err(e) => out.left.push(e.to_string()),
            }
        }
        if out.imported > 0 {
            sync_dir(dir)?;
        }
        // Our watermark of the peer moved: tell it, even with nothing new
        // to send (else it would send again what we took). A bundle that
        // moved nothing (an acknowledgement) is not answered.
        let moved = self.watermark_of(peer)? != before;
        self.mailbox_post(peer, dir, moved, &mut out)?;
        Ok(out)
    }

    /// Post sealed bundles for `peer` into `dir` holding what it has not
    /// had: from the watermark of our log it acknowledged, or after our
    /// bundles still waiting in `dir`, to our latest `seq`, at most
    /// [`MAILBOX_MAX_ROWS`] rows each. `ack`: post one even if nothing
    /// changed, to carry our watermark of it.
    fn mailbox_post(
        &mut self,
        peer: &NodeId,
        dir: &Path,
        mut ack: bool,
        out: &mut MailboxOutcome,
    ) -> Result<()> {
        let me = self.node_id();
        let epoch = self.epoch_bytes()?;
        let epoch_hex = data_encoding::HEXLOWER.encode(&epoch);
        let acked = match self.store.read(|r| peers::mailbox_ack(r, peer))? {
            Some((e, seq)) if e == epoch_hex => seq,
            _ => 0,
        };
        let waiting = scan(dir, &me, peer)?.outbound;
        out.waiting = waiting.len() as u64;
        let posted_upto = waiting
            .iter()
            .filter_map(|f| f.postmark)
            .filter(|p| p.epoch == epoch)
            .map(|p| p.upto)
            .max()
            .unwrap_or(0);
        let mut since = acked.max(posted_upto);
        let max_rows = max_rows();
        for _ in 0..MAX_POSTS_PER_PASS {
            let high = self.store.max_seq()?;
            if since >= high && !ack {
                break;
            }
            let (upto, facts, bytes) = self.mailbox_write(peer, dir, since, max_rows)?;
            out.posted += 1;
            out.facts_out += facts;
            out.bytes_out += bytes;
            ack = false;
            if upto <= since {
                break;
            }
            since = upto;
        }
        Ok(())
    }

    /// Write one sealed bundle for `peer` into `dir` (a hidden temporary
    /// name, fsync, rename, fsync of the directory): the facts its policy
    /// admits of the rows changed after `since`, at most `max_rows` of
    /// them, as a session's export chooses them. Returns the `seq` it
    /// covers up to, its facts and bytes.
    fn mailbox_write(
        &mut self,
        peer: &NodeId,
        dir: &Path,
        since: i64,
        max_rows: usize,
    ) -> Result<(i64, u64, u64)> {
        let policy = self
            .peer_policy(peer)?
            .ok_or_else(|| crate::api::peers::not_a_peer(peer))?;
        let policy_seq = self.store.read(|r| peers::policy_seq(r, peer))?;
        // Its acknowledgement predates a policy change: start over.
        let since = if since < policy_seq { 0 } else { since };
        let mine = self.watermark_of(peer)?;
        let decodes = self
            .store
            .read(|r| peers::protocol(r, peer))?
            .map_or(Features::ALL, |(_, f)| Features(f));
        // Facts the peer cannot decode are held back and counted, as for a
        // live peer (docs/design.md §13): once it decodes them (its last
        // hello said so), the next bundle starts from the beginning.
        let (facts, needs) = self.peer_held_back(peer)?;
        let held_before = HeldBack { facts, needs };
        let since = held_before.export_from(since, decodes);
        let (mut held, mut held_needs) = (0u64, Features::NONE);
        let epoch = self.epoch_bytes()?;
        let state = self.store.hlc_state()?;
        let created = Hlc {
            wall_ms: state.wall_ms.max(self.now_ms()),
            logical: state.logical,
            node: self.node_id(),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".amos-mailbox-")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| NodeError::BadInput(format!("cannot write in {}: {e}", dir.display())))?;
        let file = tmp
            .as_file()
            .try_clone()
            .map_err(NodeError::io("mailbox bundle"))?;
        let identity = self.identity();
        let scopes: Vec<String> = policy.scopes().map(ToString::to_string).collect();
        let failed = |e: amos_protocol::BundleError| {
            NodeError::Failed(format!(
                "writing a mailbox bundle in {}: {e}",
                dir.display()
            ))
        };
        let (upto, summary) = self.store.read(|r| {
            let high = crate::store::max_seq(r)?;
            let until = replica::window_end(r, since, max_rows)?.map_or(high, |u| u.min(high));
            let upto = until.max(since);
            let mut writer = BundleWriter::sealed(
                BufWriter::new(file),
                identity,
                SealTo {
                    recipient: *peer,
                    ephemeral: rand::rng().random(),
                },
                created,
                scopes,
                rand::rng().random(),
                None,
                Some(Postmark {
                    epoch,
                    since,
                    upto,
                    have: mine,
                }),
            )
            .map_err(failed)?;
            // As a session's export: the peer's own facts and its echo
            // ranges are left out once its log is known to us (§7.1).
            let echo = match mine {
                Some(w) => Some(echo::load(
                    r,
                    peer,
                    &data_encoding::HEXLOWER.encode(&w.epoch),
                )?),
                None => None,
            };
            replica::export_facts(
                r,
                &replica::ExportSpec {
                    policy: &policy,
                    since,
                    retractions: true,
                    skip_author: mine.is_some().then_some(*peer),
                    echo: echo.as_ref(),
                    until: Some(upto),
                },
                amos_protocol::BUNDLE_FRAME_FACTS,
                |facts| {
                    let (facts, withheld) = decodes.split_decodable(facts);
                    held += withheld.len() as u64;
                    held_needs = withheld.iter().fold(held_needs, |a, f| a.union(*f));
                    if facts.is_empty() {
                        return Ok(());
                    }
                    writer.write_frame(&facts).map_err(failed)
                },
            )?;
            let (w, summary) = writer.finish().map_err(failed)?;
            w.into_inner()
                .map_err(|e| NodeError::io("writing a mailbox bundle")(e.into_error()))?
                .sync_all()
                .map_err(NodeError::io("writing a mailbox bundle"))?;
            Ok((upto, summary))
        })?;
        let name = format!(
            "{}-to-{}-{:016x}-{:08x}.{EXTENSION}",
            &self.node_id().to_string()[..16],
            &peer.to_string()[..16],
            upto,
            rand::rng().random::<u32>()
        );
        tmp.persist_noclobber(dir.join(&name))
            .map_err(|e| NodeError::io(format!("posting {name}"))(e.error))?;
        sync_dir(dir)?;
        let now = held_before.after_export(since, held, held_needs);
        self.peer_set_held_back(peer, now.facts, now.needs)?;
        Ok((upto, summary.facts, summary.bytes))
    }
}

/// The per-bundle row cap: [`MAILBOX_MAX_ROWS`], or `AMOS_MAILBOX_MAX_ROWS`
/// (at least 1; tests make many small bundles with it).
fn max_rows() -> usize {
    std::env::var("AMOS_MAILBOX_MAX_ROWS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(MAILBOX_MAX_ROWS)
}

/// Where a peer's mailbox lives (the peer row's `mailbox`, docs/design.md
/// §8.2): a directory, or a relay both have a relay link with, which holds
/// the sealed bundles over QUIC (`net::relay::mailbox`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MailboxPlace {
    /// A directory (absolute).
    Dir(PathBuf),
    /// A relay peer of ours, by id.
    Relay(NodeId),
}

/// How a relay place is written in the peer row (a directory is kept as
/// an absolute path, which never starts so).
const RELAY_PREFIX: &str = "relay:";

impl MailboxPlace {
    /// The place a peer row's `mailbox` names (`None`: a relay whose id
    /// does not read).
    pub fn from_row(text: &str) -> Option<MailboxPlace> {
        match text.strip_prefix(RELAY_PREFIX) {
            Some(id) => id.parse().ok().map(MailboxPlace::Relay),
            None => Some(MailboxPlace::Dir(PathBuf::from(text))),
        }
    }

    /// As the peer row keeps it.
    pub fn to_row(&self) -> String {
        match self {
            MailboxPlace::Dir(d) => d.display().to_string(),
            MailboxPlace::Relay(id) => format!("{RELAY_PREFIX}{id}"),
        }
    }
}

/// Every peer with a mailbox (or only the one `only` names, as `amos sync
/// now PEER` names one) and where it lives: what a mailbox pass goes over
/// (`net::relay::mailbox::mailbox_pass`, which every front end runs).
pub fn mailbox_places(home: &Home, only: Option<&str>) -> Result<Vec<(NodeId, MailboxPlace)>> {
    let node = Node::open(home)?;
    let peers = node.peer_list()?;
    let chosen: Vec<_> = match only {
        Some(want) => replica::peers_named(&peers, want)
            .into_iter()
            .cloned()
            .collect(),
        None => peers,
    };
    Ok(chosen
        .into_iter()
        .filter_map(|p| {
            let place = MailboxPlace::from_row(p.mailbox.as_deref()?)?;
            Some((p.node_id.parse::<NodeId>().ok()?, place))
        })
        .collect())
}

/// The outcome of a mailbox exchange that failed as a whole.
pub fn mailbox_failed(peer: &NodeId, place: &MailboxPlace, e: &NodeError) -> MailboxOutcome {
    MailboxOutcome {
        peer: peer.to_string(),
        dir: place.to_row(),
        error: Some(e.to_string()),
        ..MailboxOutcome::default()
    }
}

/// One line for `amos sync now` about a mailbox pass.
pub fn mailbox_line(o: &MailboxOutcome) -> String {
    let who = &o.peer[..16.min(o.peer.len())];
    if let Some(e) = &o.error {
        return format!("{who}  mailbox {}: failed: {e}", o.dir);
    }
    let mut s = format!(
        "{who}  mailbox {}: {} bundle{} in ({} facts, {} applied), {} posted ({} facts)",
        o.dir,
        o.imported,
        if o.imported == 1 { "" } else { "s" },
        o.facts_in,
        o.applied,
        o.posted,
        o.facts_out
    );
    if o.refused > 0 {
        s.push_str(&format!(", {} refused", o.refused));
    }
    for why in &o.left {
        s.push_str(&format!("\n  left in the mailbox: {why}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A postmark moves our watermark of its sender only when the chain
    /// holds (we held its log up to `since` in the same epoch, or `since`
    /// is 0), never backwards; its acknowledgement is kept, the highest of
    /// one epoch.
    #[test]
    fn a_postmark_moves_the_watermark_only_along_the_chain() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::new(tmp.path().join("home"));
        Node::init(&home, None).unwrap();
        let mut node = Node::open(&home).unwrap();
        let peer = NodeId([5; 32]);
        node.peer_add(&peer.to_string(), None, "full").unwrap();
        let pm = |epoch: u8, since: i64, upto: i64, have: Option<i64>| Postmark {
            epoch: [epoch; 16],
            since,
            upto,
            have: have.map(|seq| Watermark {
                epoch: [9; 16],
                seq,
            }),
        };
        let wm = |node: &Node| {
            node.watermark_of(&peer)
                .unwrap()
                .map(|w| (w.epoch[0], w.seq))
        };
        // Nothing held yet: a bundle from the middle of its log moves nothing.
        node.apply_postmark(&peer, &pm(1, 10, 20, None)).unwrap();
        assert_eq!(wm(&node), None);
        // From the start: it does.
        node.apply_postmark(&peer, &pm(1, 0, 10, Some(4))).unwrap();
        assert_eq!(wm(&node), Some((1, 10)));
        // The next one, and the one after it (reordered, put back): only forward.
        node.apply_postmark(&peer, &pm(1, 10, 20, Some(7))).unwrap();
        assert_eq!(wm(&node), Some((1, 20)));
        node.apply_postmark(&peer, &pm(1, 0, 10, Some(4))).unwrap();
        assert_eq!(wm(&node), Some((1, 20)));
        // A gap: applied elsewhere, the watermark stays.
        node.apply_postmark(&peer, &pm(1, 25, 30, None)).unwrap();
        assert_eq!(wm(&node), Some((1, 20)));
        // Its log restarted (a restore: a new epoch) from 0: taken.
        node.apply_postmark(&peer, &pm(2, 0, 3, None)).unwrap();
        assert_eq!(wm(&node), Some((2, 3)));
        // …but not a new epoch from its middle.
        node.apply_postmark(&peer, &pm(3, 5, 8, None)).unwrap();
        assert_eq!(wm(&node), Some((2, 3)));
        // The acknowledgement: the highest seen in one epoch.
        let ack = node.store.read(|r| peers::mailbox_ack(r, &peer)).unwrap();
        assert_eq!(ack, Some((data_encoding::HEXLOWER.encode(&[9; 16]), 7)));
    }
}
