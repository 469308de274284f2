//! Shared harness for tests that drive the real `amos` binary in a temp home.
#![allow(dead_code)]

pub mod browser;
pub mod console;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The `amos` binary cargo built for these tests.
pub fn amos_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_amos"))
}

/// The result of one `amos` invocation.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Parse stdout as JSON (panics with the whole run on failure).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// A throw-away amos home, initialised.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    /// A fresh, initialised home.
    pub fn new() -> Home {
        let h = Home::uninit();
        h.ok(&["init"]);
        h
    }

    /// A temp dir that is *not* initialised.
    pub fn uninit() -> Home {
        Home {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(amos_bin());
        c.env("AMOS_HOME", self.path())
            .env_remove("AMOS_AGENT")
            .env("AMOS_LOG", "warn")
            .stdin(Stdio::null());
        c
    }

    /// Run `amos ARGS` with this home.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd().args(args).output().expect("spawn amos"))
    }

    /// Run and require exit 0.
    pub fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "amos {args:?} failed: {r:?}");
        r
    }

    /// Run with `--json`, require exit 0, parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.ok(&a).json()
    }

    /// `amos add TEXT --as AGENT [--share S]...` → the new id.
    pub fn add(&self, agent: &str, text: &str, share: &[&str]) -> String {
        let mut a = vec!["add", text, "--as", agent];
        for s in share {
            a.extend_from_slice(&["--share", s]);
        }
        self.json(&a)["id"].as_str().expect("id").to_owned()
    }

    /// Ids a word probe finds: `amos search QUERY --as AGENT -k K` in
    /// lexical mode — which memories carrying these words the agent gets.
    /// (Hybrid and semantic recall, which also find memories by meaning,
    /// are tested in `semantic.rs`.)
    /// Contents of the hits of `amos search QUERY --as AGENT` (lexical, k
    /// 50): a word probe of what the agent can see.
    pub fn search_texts(&self, agent: &str, query: &str) -> Vec<String> {
        self.json(&[
            "search", query, "--as", agent, "-k", "50", "--mode", "lexical",
        ])["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|x| x["content"].as_str().expect("content").to_owned())
            .collect()
    }

    pub fn search_ids(&self, agent: &str, query: &str, k: usize) -> Vec<String> {
        let k = k.to_string();
        self.search_ids_with(agent, query, &["-k", &k])
    }

    /// Ids returned by `amos search QUERY --as AGENT EXTRA...`, lexical
    /// unless `EXTRA` names a `--mode`.
    pub fn search_ids_with(&self, agent: &str, query: &str, extra: &[&str]) -> Vec<String> {
        let mut a = vec!["search", query, "--as", agent];
        if !extra.contains(&"--mode") {
            a.extend_from_slice(&["--mode", "lexical"]);
        }
        a.extend_from_slice(extra);
        self.json(&a)["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// `amos --json sync ARGS`: (exit code, per-peer results).
    pub fn sync(&self, args: &[&str]) -> (i32, Vec<Value>) {
        let mut a = vec!["--json", "sync"];
        a.extend_from_slice(args);
        let r = self.run(&a);
        let peers = r.json()["peers"].as_array().expect("peers").clone();
        (r.code, peers)
    }

    /// `amos digest --scope SCOPE`.
    pub fn digest(&self, scope: &str) -> String {
        self.json(&["digest", "--scope", scope])["digest"]
            .as_str()
            .expect("digest")
            .to_owned()
    }

    /// A fresh node with team `apollo` and its member `alice`.
    pub fn apollo() -> Home {
        let h = Home::new();
        h.ok(&["team", "create", "apollo"]);
        h.ok(&["agent", "add", "alice", "--team", "apollo"]);
        h
    }

    /// A fingerprint of the replicated state: the store's sequence counter
    /// and counts. Unchanged after a refused command.
    pub fn fingerprint(&self) -> Value {
        let s = self.json(&["status"]);
        serde_json::json!({
            "seq": s["seq"], "memories": s["memories"], "agents": s["agents"],
            "teams": s["teams"], "projects": s["projects"],
        })
    }
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir` holding `word` (the store, its WAL, the index,
/// anything).
pub fn anywhere_under(dir: &std::path::Path, word: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p)
                && contains(&bytes, word.as_bytes())
            {
                hits.push(p.display().to_string());
            }
        }
    }
    hits
}

/// A relay's home holds no memory, and none of `words` in its store or in
/// any file: no fact and no plaintext of the nodes it served.
pub fn relay_holds_nothing(r: &Home, words: &[&str]) {
    let status = r.json(&["status"]);
    assert_eq!(status["memories"], 0, "{status}");
    for w in words {
        assert!(db_hits(r, w).is_empty(), "{w} in the relay's store");
        let hits = anywhere_under(r.path(), w);
        assert!(hits.is_empty(), "{w} in the relay's home: {hits:?}");
    }
}

/// Delete the memory row holding `text` from `h`'s store behind its back:
/// a loss no watermark shows (the epoch and every `seq` stay). Its digest
/// cache goes too, since that cache is valid while `seq` stays, and so do
/// its running digests, which count only what the store itself wrote.
pub fn lose_one(h: &Home, text: &str) {
    let conn = rusqlite::Connection::open(h.path().join("amos.db")).unwrap();
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    let n = conn
        .execute("DELETE FROM memories WHERE content = ?1", [text])
        .unwrap();
    assert_eq!(n, 1, "deleted one row");
    conn.execute("DELETE FROM digest_cache", []).unwrap();
    // The running digests (design §7.3) count what the store wrote: a row
    // lost behind its back is not in them until they start again by a scan.
    conn.execute("DELETE FROM digest_running", []).unwrap();
}

/// `amos --json import mem0 FILE --as alice --share team:apollo`.
pub fn import_mem0_to_apollo(h: &Home, file: &Path) -> Run {
    h.run(&[
        "--json",
        "import",
        "mem0",
        file.to_str().expect("utf-8 path"),
        "--as",
        "alice",
        "--share",
        "team:apollo",
    ])
}

/// Every place in `<home>/amos.db` (any table, any text or blob column,
/// opened read-only) where `word` occurs, as `table.column`.
pub fn db_hits(h: &Home, word: &str) -> Vec<String> {
    use rusqlite::types::ValueRef;
    let conn = rusqlite::Connection::open_with_flags(
        h.path().join("amos.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open amos.db read-only");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(tables.iter().any(|t| t == "memories"), "{tables:?}");
    let mut hits = Vec::new();
    for t in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{}\"", t.replace('"', "\"\"")))
            .unwrap();
        let cols: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for (i, col) in cols.iter().enumerate() {
                let found = match row.get_ref(i).unwrap() {
                    ValueRef::Text(b) | ValueRef::Blob(b) => contains(b, word.as_bytes()),
                    _ => false,
                };
                if found {
                    hits.push(format!("{t}.{col}"));
                }
            }
        }
    }
    hits
}
