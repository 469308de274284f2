//! What a relay holds for its peers' mailboxes (docs/design.md §8.2,
//! §7.11): sealed bundles one peer posted for another, as opaque bytes,
//! one file each under `HOME/relay-held/RECIPIENT/`, named
//! `SENDER-RECEIVED-ID.held` (NodeIds as amos writes them, the time it
//! arrived in Unix ms in hex, the BLAKE3 of its bytes in hex): the relay's
//! own bookkeeping, never shown to anyone as a fact. A posted bundle is
//! received into a hidden file (`.incoming-*`: never whole in memory; what
//! a killed relay left of one is deleted at start), then held atomically
//! (fsync, rename, fsync of the directory), so a relay that restarts holds
//! exactly what it acknowledged.
//!
//! Owns the quotas (bytes held for each recipient, bytes held from each
//! sender) and the expiry (a held bundle older than it is deleted, at
//! start and before every mailbox request).
//!
//! Must never: open, parse, verify or import what it holds (it is sealed
//! to its recipient; the relay only counts its bytes), hand a bundle to
//! anyone but its recipient, or delete one at anyone's word but its
//! recipient's or the expiry's.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use amos_protocol::NodeId;
use tracing::{info, warn};

use super::{Answer, HeldEntry, HeldId};
use crate::error::{NodeError, Result};

/// A relay's mailbox limits (`amos serve --mailbox-quota`,
/// `--mailbox-sender-quota`, `--mailbox-expiry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLimits {
    /// Bytes held for one recipient, from all its senders.
    pub per_recipient: u64,
    /// Bytes held from one sender, for all its recipients.
    pub per_sender: u64,
    /// How long a bundle is held before it is deleted, taken or not.
    pub expiry: Duration,
}

impl Default for HeldLimits {
    fn default() -> Self {
        HeldLimits {
            per_recipient: 256 << 20,
            per_sender: 256 << 20,
            expiry: Duration::from_secs(14 * 24 * 3600),
        }
    }
}

/// The directory under a relay's home that holds its peers' bundles.
pub(crate) const DIR: &str = "relay-held";
const EXTENSION: &str = "held";

/// One held bundle, as its file's name says.
struct Item {
    path: PathBuf,
    from: NodeId,
    to: NodeId,
    received_ms: u64,
    id: HeldId,
    len: u64,
}

/// A bundle being received: its bytes so far, in a hidden file.
pub(crate) struct Incoming {
    file: tempfile::NamedTempFile,
    hasher: blake3::Hasher,
    len: u64,
}

impl Incoming {
    /// Append `bytes`.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(io("receiving a bundle".into()))?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes received so far.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// The relay's held bundles.
pub(crate) struct Held {
    root: PathBuf,
    limits: HeldLimits,
    /// One change at a time: a quota is checked and spent together.
    lock: Mutex<()>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> NodeError {
    NodeError::io(what)
}

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    data_encoding::HEXLOWER
        .decode(s.as_bytes())
        .ok()?
        .try_into()
        .ok()
}

/// Parse a held file's name (`None`: not one of ours).
fn parse_name(to: NodeId, path: PathBuf, len: u64) -> Option<Item> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(&format!(".{EXTENSION}"))?;
    let mut parts = stem.split('-');
    let from: NodeId = parts.next()?.parse().ok()?;
    let received_ms = u64::from_str_radix(parts.next()?, 16).ok()?;
    let id = unhex32(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some(Item {
        path,
        from,
        to,
        received_ms,
        id,
        len,
    })
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("syncing {}", dir.display())))
}

impl Held {
    /// The held bundles under `home_root`, within `limits`.
    pub(crate) fn new(home_root: &Path, limits: HeldLimits) -> Held {
        Held {
            root: home_root.join(DIR),
            limits,
            lock: Mutex::new(()),
        }
    }

    /// Delete what a relay killed while receiving left (hidden
    /// `.incoming-*` files): run at start, before any bundle arrives.
    pub(crate) fn clean(&self) -> Result<()> {
        let entries = match fs::read_dir(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(format!("reading {}", self.root.display()))(e)),
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".incoming-") {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(())
    }

    /// Every held bundle (files that are not ours are left out, and alone).
    fn items(&self) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        let dirs = match fs::read_dir(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io(format!("reading {}", self.root.display()))(e)),
        };
        for d in dirs {
            let d = d.map_err(io(format!("reading {}", self.root.display())))?;
            let Some(to) = d
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<NodeId>().ok())
            else {
                continue;
            };
            let files = fs::read_dir(d.path()).map_err(io(format!("reading {:?}", d.path())))?;
            for f in files {
                let f = f.map_err(io(format!("reading {:?}", d.path())))?;
                let Ok(meta) = f.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                if let Some(item) = parse_name(to, f.path(), meta.len()) {
                    out.push(item);
                }
            }
        }
        Ok(out)
    }

    /// Delete what is older than the expiry at `now_ms`: how many.
    pub(crate) fn expire(&self, now_ms: u64) -> Result<usize> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let expiry = u64::try_from(self.limits.expiry.as_millis()).unwrap_or(u64::MAX);
        let mut n = 0;
        for item in self.items()? {
            if item.received_ms.saturating_add(expiry) <= now_ms {
                match fs::remove_file(&item.path) {
                    Ok(()) => n += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(format!("removing {}", item.path.display()))(e)),
                }
            }
        }
        if n > 0 {
            info!("relay: {n} held bundles expired and were deleted");
        }
        Ok(n)
    }

    /// Whether a bundle of `len` bytes from `from` for `to` would fit the
    /// quotas now (checked before its bytes are read; [`Held::hold`]
    /// checks again).
    pub(crate) fn fits(&self, len: u64) -> std::result::Result<(), Answer> {
        if len > self.limits.per_recipient {
            return Err(Answer::RecipientFull);
        }
        if len > self.limits.per_sender {
            return Err(Answer::SenderFull);
        }
        Ok(())
    }

    /// A file to receive a posted bundle into, before it is held
    /// ([`Incoming::hold`]): hidden, in the relay's directory, deleted if
    /// it is dropped. A bundle is never held whole in memory.
    pub(crate) fn incoming(&self) -> Result<Incoming> {
        fs::create_dir_all(&self.root).map_err(io(format!("creating {}", self.root.display())))?;
        let file = tempfile::Builder::new()
            .prefix(".incoming-")
            .suffix(".tmp")
            .tempfile_in(&self.root)
            .map_err(io(format!("writing in {}", self.root.display())))?;
        Ok(Incoming {
            file,
            hasher: blake3::Hasher::new(),
            len: 0,
        })
    }

    /// Hold `bytes` from `from` for `to`, received at `now_ms`
    /// ([`Held::incoming`], then [`Held::hold_incoming`]).
    #[cfg(test)]
    pub(crate) fn hold(
        &self,
        from: NodeId,
        to: NodeId,
        bytes: &[u8],
        now_ms: u64,
    ) -> Result<std::result::Result<HeldId, Answer>> {
        let mut incoming = self.incoming()?;
        incoming.write(bytes)?;
        self.hold_incoming(from, to, incoming, now_ms)
    }

    /// Hold what `incoming` received from `from` for `to`, at `now_ms`: its
    /// id, or the quota it would break (nothing is kept then). Holding the
    /// same bytes again holds nothing more.
    pub(crate) fn hold_incoming(
        &self,
        from: NodeId,
        to: NodeId,
        incoming: Incoming,
        now_ms: u64,
    ) -> Result<std::result::Result<HeldId, Answer>> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let Incoming {
            file: tmp,
            hasher,
            len,
        } = incoming;
        let id: HeldId = *hasher.finalize().as_bytes();
        let items = self.items()?;
        if items
            .iter()
            .any(|i| i.id == id && i.from == from && i.to == to)
        {
            return Ok(Ok(id));
        }
        let for_to: u64 = items.iter().filter(|i| i.to == to).map(|i| i.len).sum();
        if for_to.saturating_add(len) > self.limits.per_recipient {
            return Ok(Err(Answer::RecipientFull));
        }
        let from_from: u64 = items.iter().filter(|i| i.from == from).map(|i| i.len).sum();
        if from_from.saturating_add(len) > self.limits.per_sender {
            return Ok(Err(Answer::SenderFull));
        }
        let dir = self.root.join(to.to_string());
        fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let name = format!("{from}-{now_ms:016x}-{}.{EXTENSION}", hex(&id));
        tmp.as_file()
            .sync_all()
            .map_err(io(format!("writing in {}", self.root.display())))?;
        tmp.persist(dir.join(&name))
            .map_err(|e| io(format!("holding {name}"))(e.error))?;
        sync_dir(&dir)?;
        Ok(Ok(id))
    }

    /// What is held between `asker` and `other`: for the asker from the
    /// other (inbound), and from the asker for the other.
    pub(crate) fn list(&self, asker: NodeId, other: NodeId) -> Result<Vec<HeldEntry>> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut items: Vec<Item> = self
            .items()?
            .into_iter()
            .filter(|i| (i.to == asker && i.from == other) || (i.from == asker && i.to == other))
            .collect();
        items.sort_by_key(|i| (i.received_ms, i.id));
        items.truncate(super::MAX_LISTING);
        Ok(items
            .into_iter()
            .map(|i| HeldEntry {
                id: i.id,
                inbound: i.to == asker,
                len: i.len,
            })
            .collect())
    }

    fn find_for(&self, asker: NodeId, id: &HeldId) -> Result<Option<Item>> {
        Ok(self
            .items()?
            .into_iter()
            .find(|i| i.to == asker && i.id == *id))
    }

    /// The bytes of bundle `id` held for `asker` (`None`: none such).
    pub(crate) fn fetch(&self, asker: NodeId, id: &HeldId) -> Result<Option<Vec<u8>>> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(item) = self.find_for(asker, id)? else {
            return Ok(None);
        };
        match fs::read(&item.path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(format!("reading {}", item.path.display()))(e)),
        }
    }

    /// Delete bundle `id` held for `asker` (its recipient took it):
    /// whether it was there.
    pub(crate) fn drop_for(&self, asker: NodeId, id: &HeldId) -> Result<bool> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(item) = self.find_for(asker, id)? else {
            return Ok(false);
        };
        match fs::remove_file(&item.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(format!("removing {}", item.path.display()))(e)),
        }
        if let Some(dir) = item.path.parent()
            && let Err(e) = sync_dir(dir)
        {
            warn!("relay: {e}");
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(limits: HeldLimits) -> (tempfile::TempDir, Held) {
        let tmp = tempfile::tempdir().unwrap();
        let h = Held::new(tmp.path(), limits);
        (tmp, h)
    }

    const A: NodeId = NodeId([1; 32]);
    const B: NodeId = NodeId([2; 32]);
    const C: NodeId = NodeId([3; 32]);

    #[test]
    fn held_bundles_go_only_to_their_recipient_and_leave_at_its_word() {
        let (_t, h) = held(HeldLimits::default());
        let id = h.hold(A, B, b"sealed", 10).unwrap().unwrap();
        assert_eq!(h.hold(A, B, b"sealed", 11).unwrap(), Ok(id), "once");
        let on_b = h.list(B, A).unwrap();
        assert_eq!(on_b.len(), 1);
        assert!(on_b[0].inbound && on_b[0].len == 6);
        let on_a = h.list(A, B).unwrap();
        assert!(!on_a[0].inbound, "the sender sees it waiting");
        assert!(h.list(C, A).unwrap().is_empty());
        assert_eq!(h.fetch(A, &id).unwrap(), None, "not the sender's to take");
        assert_eq!(h.fetch(C, &id).unwrap(), None);
        assert_eq!(h.fetch(B, &id).unwrap().as_deref(), Some(&b"sealed"[..]));
        assert!(!h.drop_for(A, &id).unwrap(), "nor to delete");
        assert!(h.drop_for(B, &id).unwrap());
        assert!(h.list(B, A).unwrap().is_empty());
    }

    #[test]
    fn a_bundle_being_received_leaves_nothing_when_dropped_or_killed() {
        let (t, h) = held(HeldLimits::default());
        let mut incoming = h.incoming().unwrap();
        incoming.write(b"half a bund").unwrap();
        assert_eq!(incoming.len(), 11);
        drop(incoming);
        let root = t.path().join(DIR);
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0, "a dropped one");
        fs::write(root.join(".incoming-killed.tmp"), b"half").unwrap();
        h.hold(A, B, b"whole", 1).unwrap().unwrap();
        h.clean().unwrap();
        let left: Vec<_> = fs::read_dir(&root).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only B's directory: {left:?}");
        assert_eq!(h.list(B, A).unwrap().len(), 1, "what is held stays");
    }

    #[test]
    fn quotas_refuse_what_does_not_fit_and_expiry_deletes() {
        let limits = HeldLimits {
            per_recipient: 10,
            per_sender: 8,
            expiry: Duration::from_millis(100),
        };
        let (_t, h) = held(limits);
        h.hold(A, B, b"12345", 0).unwrap().unwrap();
        assert_eq!(
            h.hold(C, B, b"123456", 0).unwrap(),
            Err(Answer::RecipientFull)
        );
        assert_eq!(h.hold(A, C, b"1234", 0).unwrap(), Err(Answer::SenderFull));
        h.hold(A, C, b"123", 50).unwrap().unwrap();
        assert_eq!(h.fits(11), Err(Answer::RecipientFull));
        assert_eq!(h.expire(99).unwrap(), 0);
        assert_eq!(h.expire(100).unwrap(), 1, "the first, 100 ms old");
        assert_eq!(h.expire(150).unwrap(), 1);
        assert!(h.items().unwrap().is_empty());
    }
}
