//! The node's home directory: where the identity, the database and the
//! disposable index live.
//!
//! ```text
//! <home>/node.json      marker + name + node id (format 1)
//! <home>/identity.key   ed25519 secret, mode 0600
//! <home>/amos.db        authoritative SQLite store (WAL)
//! <home>/mesh.key       the mesh key that encrypts bundles, mode 0600 (optional)
//! <home>/index/         disposable tantivy index
//! <home>/vectors/       disposable vector index (one snapshot file)
//! <home>/index.lock     serialises index catch-up between processes
//! ```
//!
//! Invariant: files are written atomically (temp file + rename); the identity
//! key is never readable by other users.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use amos_protocol::{NodeIdentity, base32_decode, base32_encode};
use serde::{Deserialize, Serialize};

use crate::error::{NodeError, Result};

const KEY_HEADER: &str = "amos-identity-v1 ";

/// What `node.json` says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The home's layout version.
    pub format: u32,
    /// This node's id (hex of its ed25519 public key).
    pub node_id: String,
    /// The node's human name (`amos init --name`).
    pub name: String,
}

/// Paths inside a home.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    /// A model2vec directory to embed with (`--model`), else `AMOS_MODEL`,
    /// else the built-in model.
    model: Option<PathBuf>,
}

impl Home {
    /// The home at `root`; nothing is read or created until used.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Home {
            root: root.into(),
            model: None,
        }
    }

    /// Embed with the model2vec directory `dir` (`--model`).
    pub fn with_model(mut self, dir: Option<PathBuf>) -> Self {
        self.model = dir;
        self
    }

    /// The model directory `--model` named, if any.
    pub fn model_dir(&self) -> Option<&Path> {
        self.model.as_deref()
    }

    /// `--home`, else `$AMOS_HOME` (handled by the CLI), else the platform data dir.
    pub fn default_root() -> PathBuf {
        directories::ProjectDirs::from("", "", "amos")
            .map(|d| d.data_dir().to_path_buf())
            .unwrap_or_else(|| PathBuf::from(".amos"))
    }

    /// The home directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `node.json`: the node's id and name ([`NodeInfo`]).
    pub fn info_path(&self) -> PathBuf {
        self.root.join("node.json")
    }
    /// `identity.key`: the node's ed25519 secret key (mode 0600).
    pub fn key_path(&self) -> PathBuf {
        self.root.join("identity.key")
    }
    /// `amos.db`: the SQLite store, the node's truth.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("amos.db")
    }
    /// `mesh.key`: the mesh key (`amos mesh key`), which tags discovery
    /// announcements.
    pub fn mesh_key_path(&self) -> PathBuf {
        self.root.join("mesh.key")
    }
    /// The disposable full-text index (tantivy).
    pub fn index_dir(&self) -> PathBuf {
        self.root.join("index")
    }
    /// The disposable vector index (`index::vectors`).
    pub fn vectors_dir(&self) -> PathBuf {
        self.root.join("vectors")
    }
    /// The lock every process holds while it writes an index.
    pub fn index_lock_path(&self) -> PathBuf {
        self.root.join("index.lock")
    }
    /// Where `amos serve` records the address it listens on (pairing codes
    /// take their address hints from it).
    pub fn listen_path(&self) -> PathBuf {
        self.root.join("listen")
    }

    /// Whether `amos init` has run here (`node.json` exists).
    pub fn is_initialized(&self) -> bool {
        self.info_path().is_file()
    }

    /// Read `node.json`, or fail with [`NodeError::NotAHome`].
    pub fn info(&self) -> Result<NodeInfo> {
        let text = fs::read_to_string(self.info_path())
            .map_err(|_| NodeError::NotAHome(self.root.clone()))?;
        let info: NodeInfo = serde_json::from_str(&text)
            .map_err(|e| NodeError::Corrupt(format!("{}: {e}", self.info_path().display())))?;
        if info.format != 1 {
            return Err(NodeError::Corrupt(format!(
                "{}: unknown format {}",
                self.info_path().display(),
                info.format
            )));
        }
        Ok(info)
    }

    /// Create the directory, identity and marker if missing. Returns the
    /// identity and whether anything was created.
    pub fn create(&self, name: &str, secret: [u8; 32]) -> Result<(NodeIdentity, bool)> {
        if self.is_initialized() {
            return Ok((self.load_identity()?, false));
        }
        if self.root.exists() && !self.root.is_dir() {
            return Err(NodeError::BadInput(format!(
                "{} exists and is not a directory",
                self.root.display()
            )));
        }
        fs::create_dir_all(&self.root)
            .map_err(NodeError::io(format!("creating {}", self.root.display())))?;
        let _ = fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700));
        let identity = if self.key_path().exists() {
            self.load_identity()?
        } else {
            let id = NodeIdentity::from_secret(secret);
            let text = format!("{KEY_HEADER}{}\n", base32_encode(&id.secret()));
            write_atomic(&self.key_path(), text.as_bytes(), 0o600)?;
            id
        };
        let info = NodeInfo {
            format: 1,
            node_id: identity.node_id().to_string(),
            name: name.to_owned(),
        };
        let json = serde_json::to_vec_pretty(&info)
            .map_err(|e| NodeError::Corrupt(format!("encoding node.json: {e}")))?;
        write_atomic(&self.info_path(), &json, 0o644)?;
        Ok((identity, true))
    }

    /// Load the identity key, checking it matches `node.json`.
    pub fn load_identity(&self) -> Result<NodeIdentity> {
        let path = self.key_path();
        let text = fs::read_to_string(&path).map_err(|_| {
            NodeError::Corrupt(format!(
                "identity key {} is missing or unreadable",
                path.display()
            ))
        })?;
        let b32 = text
            .trim()
            .strip_prefix(KEY_HEADER.trim_end())
            .map(str::trim)
            .ok_or_else(|| {
                NodeError::Corrupt(format!("{} is not an amos identity key", path.display()))
            })?;
        let secret: [u8; 32] = base32_decode(b32)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| {
                NodeError::Corrupt(format!("{} is not an amos identity key", path.display()))
            })?;
        let identity = NodeIdentity::from_secret(secret);
        if let Ok(info) = self.info()
            && info.node_id != identity.node_id().to_string()
        {
            return Err(NodeError::Corrupt(format!(
                "identity key does not match node id {} in node.json",
                info.node_id
            )));
        }
        Ok(identity)
    }

    /// The mode bits of the identity key file.
    pub fn key_mode(&self) -> Option<u32> {
        fs::metadata(self.key_path())
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    }
}

/// Write `bytes` to `path` atomically (temp file in the same dir, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_renamed(path, mode, true, |w| w.write_all(bytes))
}

/// Replace `path` with `bytes` the way [`write_atomic`] does, without the
/// fsync: for disposable files (a crash of the machine may leave the old
/// file, an empty one or a torn one, which their reader must detect).
pub fn write_replacing(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_renamed(path, mode, false, |w| w.write_all(bytes))
}

/// [`write_replacing`] with the bytes written by `write` as they are made,
/// not held whole first.
pub fn write_replacing_with(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    write_renamed(path, mode, false, write)
}

fn write_renamed(
    path: &Path,
    mode: u32,
    sync: bool,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let ctx = || format!("writing {}", path.display());
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(NodeError::io(ctx()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
    let written = write(&mut out).and_then(|()| out.flush());
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(NodeError::io(ctx())(e));
    }
    let f = out
        .into_inner()
        .map_err(|e| NodeError::io(ctx())(e.into_error()))?;
    if sync {
        f.sync_all().map_err(NodeError::io(ctx()))?;
    }
    fs::rename(&tmp, path).map_err(NodeError::io(ctx()))?;
    Ok(())
}
