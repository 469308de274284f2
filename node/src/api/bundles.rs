//! Air-gapped exchange: the mesh key and bundle files (docs/design.md §8).
//!
//! Export streams the facts a policy lets out, in frames, into a temporary
//! file that is renamed into place when complete (bounded memory for any
//! store size; a failed export leaves nothing behind). Import first verifies
//! the whole file (signature, every frame's tag, every fact's signature),
//! refuses a bundle addressed to another node (exit 3) or from an unknown
//! sender, and only then applies it frame by frame, each frame in one
//! transaction, through the same import gate as a live peer.
//!
//! Every bundle names its recipient in its signed header: `--for PEER`
//! addresses it to that peer alone; a `--scope` or full export is marked
//! "any peer" (any node that has this node as a peer may import it). A
//! bundle for one peer may be sealed to it (docs/design.md §8.1): only that
//! node's identity opens it, no mesh key needed; `--for` without a mesh key
//! seals by default. A sealed mailbox bundle's postmark moves the
//! watermarks on import as a session's `Done` does (§8.2).
//!
//! Invariant: a bundle that fails verification, or is not for this node,
//! changes nothing (not even the audit log: a whole-bundle refusal is the
//! importing user's own command failing, reported on stderr).

use crate::error::Rule;
use std::fs::{self, File};
use std::io::{BufReader, BufWriter};
use std::path::Path;

use amos_acl::PeerPolicy;
use amos_protocol::wire::Features;
use amos_protocol::{
    BUNDLE_FRAME_FACTS, BundleError, BundleWriter, Hlc, MeshKey, NodeId, OpenWith, ReadError,
    Recipient, SealTo, VerifiedBundle, read_verified_with, verify_bundle_with,
};
use amos_sync::ApplyReport;
use rand::RngExt;
use serde::Serialize;

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::write_atomic;
use crate::progress::{Feedback, Progress};

/// Facts per bundle frame (the format's own default: large enough that
/// batch verification on the reader's cores runs at full speed).
const FRAME_FACTS: usize = BUNDLE_FRAME_FACTS;

/// What `amos bundle export` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// The bundle file written.
    pub file: String,
    /// The policy that selected the facts (`--policy`).
    pub policy: String,
    /// The node the bundle is for, or "any peer" (no `--for`).
    pub recipient: String,
    /// Whether the frames are encrypted (a mesh key is set, or sealed).
    pub encrypted: bool,
    /// Whether the bundle is sealed to its recipient (docs/design.md §8.1).
    pub sealed: bool,
    /// Facts written.
    pub facts: u64,
    /// Frames written.
    pub frames: u64,
    /// The file's size.
    pub bytes: u64,
    /// Facts left out because the recipient (`--for`) lacks a feature they
    /// need, as its last session said (docs/design.md §13).
    pub held_back: u64,
}

/// What `amos bundle import` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    /// The bundle file read.
    pub file: String,
    /// The node that signed it.
    pub sender: String,
    /// The bundle's recipient: this node, or "any peer".
    pub recipient: String,
    /// Whether it was sealed to this node.
    pub sealed: bool,
    /// Facts in the bundle.
    pub facts: u64,
    /// Facts applied.
    pub applied: u64,
    /// Facts older than or equal to what this node holds: nothing changed.
    pub stale: u64,
    /// Facts the gate refused (see `amos audit`).
    pub refused: u64,
    /// Facts deferred until they can be applied.
    pub quarantined: u64,
    /// Time spent verifying the whole file (pass 1), and applying it (pass 2).
    pub verify_ms: u64,
    /// Time spent applying it (pass 2).
    pub apply_ms: u64,
}

/// Whether `amos bundle export --for PEER` seals the bundle to the peer
/// (docs/design.md §8.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sealing {
    /// Seal when the bundle is for one peer and no mesh key is set (it
    /// would otherwise be written in the clear).
    #[default]
    Auto,
    /// Seal (`--seal`): needs `--for`.
    Seal,
    /// Never seal (`--no-seal`): what the release before this one reads.
    NoSeal,
}

fn bundle_err(file: &Path) -> impl Fn(BundleError) -> NodeError + '_ {
    move |e| match e {
        BundleError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            NodeError::BadInput(format!("{}: no such file", file.display()))
        }
        e => NodeError::Failed(format!("{}: {e}", file.display())),
    }
}

impl Node {
    /// The mesh key, if one is set.
    pub fn mesh_key(&self) -> Result<Option<MeshKey>> {
        let path = self.home().mesh_key_path();
        match fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<MeshKey>()
                .map(Some)
                .map_err(|e| NodeError::Corrupt(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(NodeError::Io {
                context: format!("reading {}", path.display()),
                source: e,
            }),
        }
    }

    /// Set the mesh key (as printed by `amos mesh key show` on another node).
    pub fn mesh_key_set(&self, text: &str) -> Result<MeshKey> {
        let key: MeshKey = text.trim().parse()?;
        write_atomic(
            &self.home().mesh_key_path(),
            format!("{key}\n").as_bytes(),
            0o600,
        )?;
        Ok(key)
    }

    /// Make and set a fresh random mesh key.
    pub fn mesh_key_generate(&self) -> Result<MeshKey> {
        let key = MeshKey::generate(rand::rng().random());
        write_atomic(
            &self.home().mesh_key_path(),
            format!("{key}\n").as_bytes(),
            0o600,
        )?;
        Ok(key)
    }

    /// Write a bundle of what `policy` lets out: `--for PEER` uses that
    /// peer's policy, `--scope S…` a scoped policy, neither everything.
    /// `feedback`: a progress line on stderr (only if it is a terminal).
    pub fn bundle_export(
        &mut self,
        file: &Path,
        scopes: &[String],
        for_peer: Option<&str>,
        feedback: Feedback,
    ) -> Result<ExportReport> {
        self.bundle_export_sealing(file, scopes, for_peer, Sealing::Auto, feedback)
    }

    /// [`Node::bundle_export`], sealing the bundle to its recipient as
    /// `sealing` says (docs/design.md §8.1).
    pub fn bundle_export_sealing(
        &mut self,
        file: &Path,
        scopes: &[String],
        for_peer: Option<&str>,
        sealing: Sealing,
        feedback: Feedback,
    ) -> Result<ExportReport> {
        if sealing == Sealing::Seal && for_peer.is_none() {
            return Err(NodeError::BadInput(
                "--seal needs --for PEER: a sealed bundle opens on one node only".into(),
            ));
        }
        let mut pairing = None;
        let mut recipient = Recipient::AnyPeer;
        let mut decodes = Features::ALL;
        let policy = match (for_peer, scopes.is_empty()) {
            (Some(_), false) => {
                return Err(NodeError::BadInput("use --for or --scope, not both".into()));
            }
            (Some(peer), true) => {
                let id = peer.parse().map_err(|e: amos_protocol::ProtocolError| {
                    NodeError::BadInput(e.to_string())
                })?;
                pairing = self
                    .store()
                    .read(|r| crate::api::pairing::join_proof_for(r, &id))?;
                recipient = Recipient::Node(id);
                // What its last session said it decodes. Nothing recorded
                // (a peer never synced live): everything this release
                // writes. A reader older than a fact kind in the bundle
                // fails it in one line and changes nothing (docs/design.md
                // §13), as with a bundle for any peer.
                decodes = self
                    .store()
                    .read(|r| crate::store::peers::protocol(r, &id))?
                    .map_or(Features::ALL, |(_, f)| Features(f));
                match self.peer_policy(&id)? {
                    Some(policy) => policy,
                    None => {
                        return Err(self.store().read(|r| {
                            Ok(crate::api::pairing::unknown_peer(
                                r,
                                peer.trim(),
                                &self.node_id(),
                                self.now_ms(),
                            ))
                        })?);
                    }
                }
            }
            (None, false) => PeerPolicy::scoped(
                scopes
                    .iter()
                    .map(|s| self.resolve_scope(s))
                    .collect::<Result<Vec<_>>>()?,
            )?,
            (None, true) => PeerPolicy::Full,
        };
        let key = self.mesh_key()?;
        let seal_to = match (recipient, sealing) {
            (Recipient::Node(to), Sealing::Seal) => Some(to),
            (Recipient::Node(to), Sealing::Auto) if key.is_none() => Some(to),
            _ => None,
        };
        let dir = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| NodeError::BadInput(format!("cannot write in {}: {e}", dir.display())))?;
        let state = self.store().hlc_state()?;
        let created = Hlc {
            wall_ms: state.wall_ms.max(self.now_ms()),
            logical: state.logical,
            node: self.node_id(),
        };
        let out = BufWriter::new(
            tmp.as_file()
                .try_clone()
                .map_err(NodeError::io("bundle file"))?,
        );
        let scopes = policy.scopes().map(ToString::to_string).collect();
        let mut writer = match seal_to {
            Some(to) => BundleWriter::sealed(
                out,
                self.identity(),
                SealTo {
                    recipient: to,
                    ephemeral: rand::rng().random(),
                },
                created,
                scopes,
                rand::rng().random(),
                pairing,
                None,
            ),
            None => BundleWriter::with_pairing(
                out,
                self.identity(),
                recipient,
                created,
                scopes,
                key.as_ref(),
                rand::rng().random(),
                pairing,
            ),
        }
        .map_err(bundle_err(file))?;
        let pb = Progress::counter(feedback, "export", "facts");
        let mut held_back = 0u64;
        self.export_snapshot(&policy, FRAME_FACTS, |facts| {
            pb.inc(facts.len() as u64);
            let (facts, held) = decodes.split_decodable(facts);
            held_back += held.len() as u64;
            if facts.is_empty() {
                return Ok(());
            }
            writer.write_frame(&facts).map_err(bundle_err(file))
        })?;
        drop(pb);
        let (out, summary) = writer.finish().map_err(bundle_err(file))?;
        out.into_inner()
            .map_err(|e| NodeError::io(format!("writing {}", file.display()))(e.into_error()))?
            .sync_all()
            .map_err(NodeError::io(format!("writing {}", file.display())))?;
        tmp.persist(file)
            .map_err(|e| NodeError::io(format!("writing {}", file.display()))(e.error))?;
        Ok(ExportReport {
            file: file.display().to_string(),
            policy: policy.to_string(),
            recipient: recipient.to_string(),
            encrypted: key.is_some() || seal_to.is_some(),
            sealed: seal_to.is_some(),
            facts: summary.facts,
            frames: summary.frames,
            bytes: summary.bytes,
            held_back,
        })
    }

    /// Verify a bundle completely, then apply it through the import gate.
    /// `feedback`: a progress bar on stderr (only if it is a terminal).
    pub fn bundle_import(&mut self, file: &Path, feedback: Feedback) -> Result<ImportReport> {
        self.bundle_import_from(file, None, feedback)
            .map(|(report, _)| report)
    }

    /// [`Node::bundle_import`]; `from`: refuse a bundle another node signed
    /// (a mailbox's, whose files are read for one peer). Also returns what
    /// was verified. A sealed bundle's postmark moves our watermark of the
    /// sender and records its acknowledgement of our log
    /// ([`Node::apply_postmark`]) once every frame is applied.
    pub(crate) fn bundle_import_from(
        &mut self,
        file: &Path,
        from: Option<&NodeId>,
        feedback: Feedback,
    ) -> Result<(ImportReport, VerifiedBundle)> {
        let key = self.mesh_key()?;
        let me = self.node_id();
        let sealed_elsewhere = |to: NodeId| {
            NodeError::refused(
                Rule::WrongRecipient,
                format!(
                    "{}: bundle is sealed to node {to}, not to this node ({me}): only that node \
                     can open it (docs/design.md §8.1)",
                    file.display(),
                ),
            )
        };
        let open = || -> Result<BufReader<File>> {
            File::open(file).map(BufReader::new).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    NodeError::BadInput(format!("{}: no such file", file.display()))
                } else {
                    NodeError::io(format!("reading {}", file.display()))(e)
                }
            })
        };
        let t0 = std::time::Instant::now();
        // The node's own identity opens a bundle sealed to it; a copy, so
        // that applying (which takes the node) can go on beside it.
        let identity = amos_protocol::NodeIdentity::from_secret(self.identity().secret());
        let keys = OpenWith {
            mesh: key.as_ref(),
            identity: Some(&identity),
        };
        let verified = verify_bundle_with(open()?, keys).map_err(|e| match e {
            BundleError::SealedTo(to) => sealed_elsewhere(to),
            e => bundle_err(file)(e),
        })?;
        let verify_ms = t0.elapsed().as_millis() as u64;
        let sender = verified.sender();
        if let Some(from) = from
            && sender != *from
        {
            return Err(NodeError::Failed(format!(
                "{}: bundle was made by {}, not by {}",
                file.display(),
                sender.short(),
                from.short()
            )));
        }
        if sender == self.node_id() {
            return Err(NodeError::Failed(format!(
                "{}: bundle was made by this node",
                file.display()
            )));
        }
        let recipient = verified.recipient();
        if !recipient.admits(&self.node_id()) {
            return Err(NodeError::refused(
                Rule::WrongRecipient,
                format!(
                    "{}: bundle from {} was made for node {}, not for this node ({}): a bundle \
                 addressed to one node is read only there (docs/design.md §8); ask {} for one \
                 made with `amos bundle export FILE --for {}`",
                    file.display(),
                    sender.short(),
                    recipient,
                    self.node_id(),
                    sender.short(),
                    self.node_id()
                ),
            ));
        }
        if self.peer_policy(&sender)?.is_none() {
            // A joiner's first bundle (`amos join --offline`) carries a
            // signed proof of one of our pending invites: accept its sender
            // as that invite's peer, once.
            let Some(p) = verified.pairing() else {
                return Err(NodeError::Failed(format!(
                    "{}: bundle sender {} is not a registered peer (add it with `amos peers add {} --policy P`)",
                    file.display(),
                    sender.short(),
                    sender
                )));
            };
            self.accept_join(
                &sender,
                &p.invite,
                &p.proof,
                amos_protocol::pairing::ProofBinding::Offline,
                "",
                None,
            )
            .map_err(|e| match e {
                NodeError::Refused { message: why, .. } => NodeError::Failed(format!(
                    "{}: bundle sender {} is not a registered peer, and its pairing proof was refused: {why}",
                    file.display(),
                    sender.short()
                )),
                other => other,
            })?;
        }
        let summary = verified.summary();
        let t0 = std::time::Instant::now();
        let pb = Progress::bar(feedback, "import", "facts", summary.facts);
        let mut total = ApplyReport::default();
        // A mailbox bundle's facts are a session's batch: the rows they
        // move that hold only the sender's facts become its echo ranges.
        let epoch = verified.postmark().map(|p| p.epoch);
        read_verified_with(open()?, keys, &verified, |facts| {
            let n = facts.len() as u64;
            let (r, _) = self.apply_from_seqs(&sender, facts, epoch.as_ref())?;
            total.add(r);
            pb.inc(n);
            Ok::<(), NodeError>(())
        })
        .map_err(|e| match e {
            ReadError::Bundle(b) => bundle_err(file)(b),
            ReadError::Apply(n) => n,
        })?;
        drop(pb);
        if let Some(postmark) = verified.postmark() {
            self.apply_postmark(&sender, &postmark)?;
        }
        let retried = self.retry_deferred()?;
        let report = ImportReport {
            file: file.display().to_string(),
            sender: sender.to_string(),
            recipient: recipient.to_string(),
            sealed: verified.sealed(),
            facts: summary.facts,
            applied: total.applied + retried.applied,
            stale: total.stale,
            refused: total.refused + retried.refused,
            quarantined: self.quarantined()?.len() as u64,
            verify_ms,
            apply_ms: t0.elapsed().as_millis() as u64,
        };
        Ok((report, verified))
    }
}
