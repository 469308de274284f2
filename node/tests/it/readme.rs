//! README.md and docs/*.md, run: every command of every ```sh block runs
//! against the test-built `amos` in temp homes, or is listed in [`NOT_RUN`]
//! with the reason it cannot run here. A command that is neither fails this
//! test, so a new one cannot go untested; an entry of [`NOT_RUN`] or
//! [`REWRITTEN`] that no page shows any more fails it too.
//!
//! Each page is its own tour, in order: README.md (whose quickstart starts
//! from an empty home), then every `docs/*.md` by name (each starts from a
//! home with team `apollo` and its members `alice` and `bob`; see
//! [`Tour::new`]). Blocks that need more set up get it in [`Tour::enter`].
//!
//! How a line runs: the `laptop$` / `server$` prompt picks the home (see
//! [`block_homes`]), comments are dropped, `a && b` and `a; b` run in turn,
//! a synopsis (`amos retention [--idle 90d|off] [--apply]`) runs bare and
//! once with each optional part, and placeholders (`<id>`, `<laptop-id>`,
//! `<server-id>`, `<key>`, `amos1-…`, `/media/usb/…`, `FILE`, `N`, the bench
//! corpus) become what earlier commands printed or files in a temp dir.
//! Every command must exit 0 and leave no progress-bar residue (carriage
//! returns, escape sequences) on its piped stderr. `amos serve` listens on
//! a free 127.0.0.1 port with `--no-mdns` (and `--metrics` on a free one);
//! nothing leaves loopback.
//!
//! The pages' claims are checked as they go (bob sees the team memory, not
//! alice's private one; after `unshare` he does not; `forget` erases; the
//! air gap and the pairing converge; `/metrics` serves its families…): see
//! [`CLAIMS`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::server::{Server, free_port, id};
use crate::common::{Home, Run};

/// Commands of the pages this test does not run, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "amos peers add A_ID --policy none --relay",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos peers add B_ID --policy none --relay",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos serve --relay-rate 32M --relay-quota 4G",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos peers add R_ID r.example.org:4747 --policy none --relay",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos peers add B_ID --policy team:apollo --via R_ID",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos serve --sync-every 5m",
        "three hosts, two of them behind NAT: node/tests/it/relay.rs runs this set-up with real processes, in network namespaces it makes (and on loopback)",
    ),
    (
        "amos peers add B_ID --policy global",
        "three hosts that never run together but for the relay: node/tests/it/relay_mailbox.rs runs this set-up with real processes on loopback",
    ),
    (
        "amos peers mailbox B_ID --relay R_ID",
        "three hosts that never run together but for the relay: node/tests/it/relay_mailbox.rs runs this set-up with real processes on loopback",
    ),
    (
        "amos sync now B_ID",
        "three hosts that never run together but for the relay: node/tests/it/relay_mailbox.rs runs this set-up with real processes on loopback",
    ),
    (
        "amos serve --mailbox-quota 256M --mailbox-sender-quota 256M --mailbox-expiry 14d",
        "three hosts that never run together but for the relay: node/tests/it/relay_mailbox.rs runs this set-up with real processes on loopback",
    ),
    (
        "cargo test --workspace --locked",
        "the whole test suite, this test included",
    ),
    (
        "amos discover --timeout 3s",
        "multicast would leave loopback; discovery runs inside network namespaces in node/tests/it/discovery.rs",
    ),
    (
        "sudo amos service install --bin /usr/local/bin/amos",
        "root: writes /etc/systemd/system, creates a user, starts a service; the --dry-run line renders the same plan and node/tests/it/deploy.rs verifies the units",
    ),
    (
        "bash deploy/mesh-test.sh",
        "needs a Docker engine and a static release build; node/tests/it/deploy.rs runs it where Docker answers",
    ),
    (
        "fuzz/run.sh 600",
        "nightly Rust and cargo-fuzz, ten minutes per target",
    ),
    (
        "cargo test --release -p amos-protocol bundle::tests::bench -- --ignored --nocapture",
        "a release build verifying 300k signed facts: a benchmark, not a check",
    ),
    (
        "pip install ./python",
        "a release build of the Python extension into the machine's Python; .ci/run builds and installs it (dev profile) and node/tests/it/python.rs runs its pytest suite",
    ),
    (
        "curl -s http://127.0.0.1:9464/metrics",
        "not amos: right after `amos serve --metrics` this test fetches /metrics and /healthz itself, on the port it chose",
    ),
];

/// Commands that run in another form: (as the page shows it, run instead, why).
const REWRITTEN: &[(&str, &str, &str)] = &[
    (
        "amos bench --generate 10000 /tmp/w10k",
        "amos bench --generate 200 /tmp/w10k",
        "a smaller workload of the same model: the debug build benches it in seconds",
    ),
    (
        "cargo run --release -- demo",
        "amos demo",
        "the binary these tests built instead of a release build",
    ),
    (
        "amos service install --user --timer",
        "amos service install --user --timer --dry-run",
        "the real install writes ~/.config/systemd/user and runs systemctl --user; the dry run plans the same and writes nothing",
    ),
    (
        "export AMOS_HOME=~/.local/share/amos",
        "(every command gets its temp home in AMOS_HOME)",
        "the test's homes are temp dirs",
    ),
];

/// What the pages claim and this test checks on the way.
const CLAIMS: &[&str] = &[
    "demo: pair, converge, recall by meaning, revoke",
    "quickstart: bob sees the team memory, not alice's private one",
    "quickstart: bob's pack holds the team memory",
    "quickstart: get shows the memory shared with the team",
    "quickstart: update edits the text",
    "history lists the creation and the edit",
    "editing: update edits the text",
    "quickstart: after unshare bob no longer sees it",
    "quickstart: forget erases",
    "air gap: the key is printed",
    "air gap: the import refused nothing",
    "air gap: digests equal",
    "air gap: bob, registered on the server, reads the team memory",
    "pairing: join pairs and syncs",
    "pairing: join --as registers the agent, who recalls the team's memory",
    "mcp: the page's client line starts `amos mcp` as its agent, which recalls",
    "pairing: sync now converges",
    "recall: --explain shows every factor",
    "recall: the link is made",
    "recall: the pack report explains its decisions",
    "recall: the profile holds the weights",
    "hygiene: consolidate archived a duplicate",
    "hygiene: restore-memory brings it back",
    "operations: the dry run writes nothing",
    "operations: restore brings the backup back",
    "metrics: /metrics serves every family",
    "metrics: /healthz answers ok",
    "cli: --json status is one object",
    "bench: generated a workload",
    "bench: ran on the corpus",
];

/// One command line of a ```sh block.
#[derive(Debug, Clone)]
struct Line {
    /// The markdown heading the block is under.
    heading: String,
    /// The block's index under that heading.
    block: usize,
    /// 1-based line number in the page.
    number: usize,
    /// `laptop`, `server`, or "" (no prompt, or a bare `$`).
    prompt: String,
    /// The command, prompt and comment removed.
    text: String,
}

/// The command lines of every ```sh block, in order. In a block where some
/// lines start with `$ `, only those are commands (the rest is output).
fn readme_commands(readme: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut blocks_here = 0;
    let mut lines = readme.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let fence = line.trim_start();
        if let Some(lang) = fence.strip_prefix("```") {
            let body: Vec<(usize, &str)> = lines
                .by_ref()
                .take_while(|(_, l)| !l.trim_start().starts_with("```"))
                .map(|(i, l)| (i + 1, l))
                .collect();
            if lang.trim() != "sh" {
                continue;
            }
            let prompted = body.iter().any(|(_, l)| l.starts_with("$ "));
            let mut joined: Vec<(usize, String)> = Vec::new();
            let mut continues = false;
            for (n, l) in body {
                let l = l.trim_end();
                match (continues, joined.last_mut()) {
                    (true, Some((_, prev))) => prev.push_str(l.trim_start()),
                    _ => joined.push((n, l.to_owned())),
                }
                continues = l.ends_with('\\');
                if continues && let Some((_, prev)) = joined.last_mut() {
                    prev.pop();
                }
            }
            for (number, l) in joined {
                let (prompt, rest) = split_prompt(&l);
                if prompted && prompt.is_none() {
                    continue;
                }
                let text = strip_comment(rest).trim().to_owned();
                if text.is_empty() {
                    continue;
                }
                out.push(Line {
                    heading: heading.clone(),
                    block: blocks_here,
                    number,
                    prompt: prompt.unwrap_or_default().to_owned(),
                    text,
                });
            }
            blocks_here += 1;
        } else if let Some(h) = line.strip_prefix('#') {
            heading = h.trim_start_matches('#').trim().to_owned();
            blocks_here = 0;
        }
    }
    out
}

/// `laptop$ cmd` → (Some("laptop"), "cmd"); `$ cmd` → (Some(""), "cmd").
fn split_prompt(line: &str) -> (Option<&str>, &str) {
    if let Some(rest) = line.strip_prefix("$ ") {
        return (Some(""), rest);
    }
    match line.split_once("$ ") {
        Some((name, rest))
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            (Some(name), rest)
        }
        _ => (None, line),
    }
}

/// Cut a `#` comment (at the start or after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// Split on `&&` and `;` outside quotes.
fn split_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';') => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            (None, '&') if chars.peek() == Some(&'&') => {
                chars.next();
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A synopsis, expanded: the command without its optional `[-…]` parts,
/// then once with each alternative of each part (`[--idle 90d|off]` gives
/// `--idle 90d` and `--idle off`). Brackets not followed by `-` (an IPv6
/// address) are text.
fn expand_synopsis(cmd: &str) -> Vec<String> {
    let mut parts: Vec<(String, Vec<String>)> = Vec::new(); // (text before, alternatives)
    let mut rest = cmd;
    while let Some(at) = rest.find("[-") {
        let Some(len) = rest[at..].find(']') else {
            break;
        };
        let inner = &rest[at + 1..at + len];
        let mut alts: Vec<String> = Vec::new();
        for (i, alt) in inner.split('|').enumerate() {
            let alt = alt.trim();
            if i == 0 || alt.contains(' ') {
                alts.push(alt.to_owned());
            } else {
                // `--idle 90d|off`: a lone word replaces the first's last word.
                let first = &alts[0];
                let stem = first.rsplit_once(' ').map_or("", |(s, _)| s);
                alts.push(format!("{stem} {alt}").trim().to_owned());
            }
        }
        parts.push((rest[..at].to_owned(), alts));
        rest = &rest[at + len + 1..];
    }
    let tail = rest.to_owned();
    let render = |chosen: Option<(usize, &str)>| -> String {
        let mut s = String::new();
        for (i, (before, _)) in parts.iter().enumerate() {
            s.push_str(before);
            if let Some((j, alt)) = chosen
                && i == j
            {
                s.push_str(alt);
            }
        }
        s.push_str(&tail);
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let mut out = vec![render(None)];
    for (i, (_, alts)) in parts.iter().enumerate() {
        for alt in alts {
            out.push(render(Some((i, alt))));
        }
    }
    out
}

/// Shell words: whitespace-separated, `"…"` and `'…'` quoting.
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote = None;
    for c in cmd.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (_, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// Which home each prompt means in a block of `file`: (prompt, home name).
/// Blocks not named here run unprompted commands in `main`, the page's home.
fn block_homes(file: &str, heading: &str, block: usize) -> &'static [(&'static str, &'static str)] {
    match (file, heading, block) {
        ("README.md", "Across an air gap", 0) => &[("laptop", "main"), ("server", "server")],
        ("README.md", "On a network: pairing by code", 0) => {
            &[("laptop", "spoke"), ("server", "hub")]
        }
        ("README.md", "On a network: pairing by code", 1) => {
            &[("laptop", "wire-laptop"), ("server", "wire-server")]
        }
        _ => &[("", "main")],
    }
}

struct Tour {
    /// The page, relative to the repository root (`README.md`, `docs/…`).
    file: String,
    /// The repository root: every command runs there (paths in the pages
    /// are relative to it).
    root: PathBuf,
    tmp: tempfile::TempDir,
    homes: BTreeMap<&'static str, Home>,
    /// Placeholder → value.
    vars: BTreeMap<&'static str, String>,
    /// Values for the `<id>` placeholders of the next command, in order.
    ids: Vec<String>,
    /// Memory ids the tour made, by role.
    made: BTreeMap<&'static str, String>,
    /// The block being run: (heading, index).
    block: Option<(String, usize)>,
    server: Option<Server>,
    claims: BTreeSet<&'static str>,
    not_run: BTreeSet<&'static str>,
    rewritten: BTreeSet<&'static str>,
    ran: usize,
}

impl Tour {
    /// The tour of `file`. README.md starts from an empty home (its
    /// quickstart runs `amos init`); a page of docs/ from an initialised
    /// one with team `apollo` and its members `alice` and `bob`, the cast
    /// every page's examples use.
    fn new(file: &str) -> Tour {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repository root")
            .to_owned();
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut tour = Tour {
            file: file.to_owned(),
            root,
            tmp,
            homes: BTreeMap::new(),
            vars: BTreeMap::new(),
            ids: Vec::new(),
            made: BTreeMap::new(),
            block: None,
            server: None,
            claims: BTreeSet::new(),
            not_run: BTreeSet::new(),
            rewritten: BTreeSet::new(),
            ran: 0,
        };
        if file == "README.md" {
            tour.homes.insert("main", Home::uninit());
        } else {
            tour.init("main", "laptop");
            let main = tour.home("main");
            main.ok(&["team", "create", "apollo"]);
            main.ok(&["agent", "add", "alice", "--team", "apollo"]);
            main.ok(&["agent", "add", "bob", "--team", "apollo"]);
        }
        tour
    }

    /// `file:line` of a line, for messages.
    fn at(&self, line: &Line) -> String {
        format!("{}:{}", self.file, line.number)
    }

    fn home(&self, name: &str) -> &Home {
        self.homes
            .get(name)
            .unwrap_or_else(|| panic!("home {name:?} was never set up"))
    }

    /// A memory id an earlier step captured.
    fn made(&self, role: &str) -> String {
        self.made.get(role).cloned().unwrap_or_else(|| {
            panic!(
                "{}: no {role:?} memory was captured: did the page change?",
                self.file
            )
        })
    }

    fn claim(&mut self, c: &'static str) {
        assert!(CLAIMS.contains(&c), "unlisted claim {c:?}");
        self.claims.insert(c);
    }

    /// A fresh initialised home `name` (`amos init --name NODE`).
    fn init(&mut self, name: &'static str, node: &str) {
        let h = Home::uninit();
        h.ok(&["init", "--name", node]);
        self.homes.insert(name, h);
    }

    /// Set-up a block needs that its page leaves to the reader.
    fn enter(&mut self, line: &Line) {
        let key = (line.heading.clone(), line.block);
        if self.block.as_ref() == Some(&key) {
            return;
        }
        // Leaving a block stops what it started.
        self.server = None;
        self.block = Some(key);
        self.vars.clear();
        match (self.file.as_str(), line.heading.as_str(), line.block) {
            ("README.md", "Across an air gap", 0) => {
                // The quickstart's home is the laptop; its team memory is
                // forgotten by now, so give the bundle a live one.
                self.init("server", "server");
                let server = id(self.home("server"));
                self.vars.insert("<server-id>", server);
                let fresh = self.home("main").add(
                    "alice",
                    "release freeze starts on Friday",
                    &["team:apollo"],
                );
                self.made.insert("air-gap", fresh);
            }
            ("README.md", "On a network: pairing by code", 0) => {
                self.init("hub", "server");
                self.init("spoke", "laptop");
                let hub = self.home("hub");
                hub.ok(&["team", "create", "apollo"]);
                hub.ok(&["agent", "add", "alice", "--team", "apollo"]);
                hub.add("alice", "we deploy on Tuesdays", &["team:apollo"]);
            }
            ("README.md", "On a network: pairing by code", 1) => {
                self.init("wire-laptop", "laptop");
                self.init("wire-server", "server");
                let (l, s) = (id(self.home("wire-laptop")), id(self.home("wire-server")));
                self.vars.insert("<laptop-id>", l);
                self.vars.insert("<server-id>", s);
            }
            ("docs/recall.md", _, 0) => {
                let main = self.home("main");
                let a = main.add("alice", "we deploy after the standup", &["team:apollo"]);
                let b = main.add(
                    "alice",
                    "the deploy checklist lives in the wiki",
                    &["team:apollo"],
                );
                main.ok(&[
                    "add",
                    "deploy procedure: build, canary, promote",
                    "--as",
                    "alice",
                    "--share",
                    "team:apollo",
                    "--type",
                    "procedure",
                    "--pin",
                ]);
                self.made.insert("recall-a", a);
                self.made.insert("recall-b", b);
            }
            ("docs/operations.md", "Hygiene: retention and consolidation", 0) => {
                let main = self.home("main");
                let d1 = main.add(
                    "alice",
                    "the deploy window closes at noon",
                    &["team:apollo"],
                );
                let d2 = main.add(
                    "alice",
                    "The deploy window closes at noon.",
                    &["team:apollo"],
                );
                self.made.insert("dup-1", d1);
                self.made.insert("dup-2", d2);
            }
            ("docs/operations.md", "Backups", 0) => {
                let kept = self
                    .home("main")
                    .add("alice", "backed up and restored", &[]);
                self.made.insert("backed-up", kept);
            }
            _ => {}
        }
    }

    /// Run one line of a page.
    fn line(&mut self, line: &Line) {
        if let Some((text, _)) = NOT_RUN.iter().find(|(t, _)| *t == line.text) {
            self.not_run.insert(text);
            return;
        }
        self.enter(line);
        let home = block_homes(&self.file, &line.heading, line.block)
            .iter()
            .find(|(p, _)| *p == line.prompt)
            .map(|(_, h)| *h)
            .unwrap_or_else(|| {
                panic!(
                    "{}: no home for prompt {:?} under {:?}: teach block_homes",
                    self.at(line),
                    line.prompt,
                    line.heading
                )
            });
        for simple in split_commands(&line.text) {
            let simple = match REWRITTEN.iter().find(|(t, _, _)| *t == simple) {
                Some((text, instead, _)) => {
                    self.rewritten.insert(text);
                    if text.starts_with("export AMOS_HOME=") {
                        continue;
                    }
                    (*instead).to_owned()
                }
                None => simple,
            };
            for cmd in expand_synopsis(&simple) {
                self.run(line, home, &cmd);
            }
        }
    }

    /// Replace placeholders in `w`.
    fn substitute(&mut self, line: &Line, w: &str) -> String {
        let path = |p: PathBuf| p.to_str().expect("utf-8 temp path").to_owned();
        let at = self.at(line);
        let value = match w {
            "<id>" => {
                assert!(
                    !self.ids.is_empty(),
                    "{at}: no value for <id> in {:?}",
                    line.text
                );
                self.ids.remove(0)
            }
            "<laptop-id>" | "<server-id>" | "<key>" | "amos1-…" => self
                .vars
                .get(w)
                .unwrap_or_else(|| panic!("{at}: nothing printed {w} yet"))
                .clone(),
            "FILE" => {
                let dir = self.tmp.path().join("backups");
                std::fs::create_dir_all(&dir).expect("mkdir");
                path(dir.join("amos.backup"))
            }
            "N" => "2".into(),
            w if w.starts_with("/tmp/") => path(self.tmp.path().join(&w["/tmp/".len()..])),
            w if w.starts_with("/media/usb/") => {
                let dir = self.tmp.path().join("usb");
                std::fs::create_dir_all(&dir).expect("mkdir");
                path(dir.join(&w["/media/usb/".len()..]))
            }
            w => w.to_owned(),
        };
        let unresolved = value.contains('…') || (value.contains('<') && value.contains('>'));
        assert!(
            !unresolved,
            "{at}: unknown placeholder {value:?} in {:?}",
            line.text
        );
        value
    }

    /// Run one simple command (as the page shows it: `cmd`) in `home`.
    fn run(&mut self, line: &Line, home: &'static str, cmd: &str) {
        let at = self.at(line);
        let raw = words(cmd);
        if raw.first().is_some_and(|w| w == "claude") {
            self.mcp_client(line, home, &raw);
            return;
        }
        assert!(
            raw.first().is_some_and(|w| w == "amos"),
            "{at}: {:?} is neither run by this test nor in NOT_RUN (with the reason)",
            line.text
        );
        self.before(cmd);
        let args: Vec<String> = raw[1..].iter().map(|w| self.substitute(line, w)).collect();
        assert!(self.ids.is_empty(), "{at}: unused <id> values");
        if args.first().map(String::as_str) == Some("serve") {
            self.serve(home, &args);
            return;
        }
        let out = self
            .home(home)
            .cmd()
            .current_dir(&self.root)
            .env("HOME", self.tmp.path().join("home"))
            .env_remove("XDG_CONFIG_HOME")
            .args(&args)
            .output()
            .expect("spawn amos");
        let run = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        self.ran += 1;
        let doctor_env = args.first().map(String::as_str) == Some("doctor")
            && run.code == 1
            && run
                .stdout
                .lines()
                .filter(|l| l.starts_with("fail"))
                .all(|l| l.split_whitespace().nth(1) == Some("listener"));
        if doctor_env {
            // Port 4747 is this machine's business, not the home's.
            eprintln!("note: `amos doctor` failed only its listener check here: {run:?}");
        } else {
            assert_eq!(run.code, 0, "{at}: `{cmd}` ({home}) failed: {run:?}");
        }
        assert!(
            !run.stderr.contains('\r') && !run.stderr.contains('\x1b'),
            "{at}: `{cmd}` left terminal control characters on a piped stderr: {:?}",
            run.stderr
        );
        self.after(cmd, home, &run);
    }

    /// `claude mcp add NAME --env K=V… -- amos mcp`: the client would start
    /// `amos mcp` with that environment, so this test does, in the page's
    /// home, and speaks MCP to it: the agent recalls the team memory the
    /// air gap's block wrote.
    fn mcp_client(&mut self, line: &Line, home: &'static str, raw: &[String]) {
        let at = self.at(line);
        let dash = raw
            .iter()
            .position(|w| w == "--")
            .unwrap_or_else(|| panic!("{at}: no `--` before the server's command"));
        assert_eq!(
            raw[dash + 1..],
            ["amos", "mcp"],
            "{at}: not an amos mcp line"
        );
        let env: Vec<(&str, &str)> = raw[..dash]
            .windows(2)
            .filter(|w| w[0] == "--env")
            .map(|w| w[1].split_once('=').expect("--env K=V"))
            .collect();
        let [("AMOS_AGENT", agent)] = env[..] else {
            panic!("{at}: teach this test the environment {env:?}");
        };
        let mut client = crate::mcp::Client::start(self.home(home), agent);
        let hits = client.ok(
            "memory_search",
            serde_json::json!({"query": "release freeze", "k": 5}),
        );
        let want = self.made("air-gap");
        assert!(
            hits["hits"]
                .as_array()
                .is_some_and(|h| h.iter().any(|m| m["id"] == want.as_str())),
            "{at}: {agent} does not recall the team memory: {hits}"
        );
        self.ran += 1;
        self.claim("mcp: the page's client line starts `amos mcp` as its agent, which recalls");
    }

    /// `amos serve …`: in the background, on a free loopback port, no mDNS;
    /// `--metrics ADDR` on a free loopback TCP port, which is then scraped.
    fn serve(&mut self, home: &'static str, args: &[String]) {
        let mut extra: Vec<String> = Vec::new();
        let mut metrics = None;
        let mut it = args[1..].iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--listen" => {
                    it.next();
                }
                "--metrics" => {
                    it.next();
                    let port = free_tcp_port();
                    extra.push("--metrics".into());
                    extra.push(format!("127.0.0.1:{port}"));
                    metrics = Some(port);
                }
                a => extra.push(a.to_owned()),
            }
        }
        if !extra.iter().any(|a| a == "--no-mdns") {
            extra.push("--no-mdns".into());
        }
        let addr = format!("127.0.0.1:{}", free_port());
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        // Returns once the server logged "listening on".
        self.server = Some(Server::start_with(
            self.home(home).path(),
            None,
            &addr,
            &extra,
        ));
        self.ran += 1;
        if let Some(port) = metrics {
            self.scrape(port);
        }
    }

    /// `GET /metrics` and `/healthz` of the running `amos serve --metrics`.
    fn scrape(&mut self, port: u16) {
        let metrics = http_get(port, "/metrics");
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
        for family in [
            "amos_up 1",
            "amos_build_info",
            "amos_facts_received_total",
            "amos_sync_rounds_total",
            "amos_sync_duration_seconds",
            "amos_sync_facts_total",
            "amos_sync_bytes_total",
            "amos_facts_refused_total{reason=\"not_origin\"}",
            "amos_quarantined_facts{reason=\"clock_skew\"}",
            "amos_recall_duration_seconds_bucket{kind=\"search\"",
            "amos_store_bytes",
            "amos_index_lag",
            "amos_memories",
            "amos_peers",
        ] {
            assert!(metrics.contains(family), "no {family} in {metrics}");
        }
        self.claim("metrics: /metrics serves every family");
        let health = http_get(port, "/healthz");
        assert!(
            health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
            "{health}"
        );
        self.claim("metrics: /healthz answers ok");
    }

    /// Set-up right before a command: the values of its `<id>`s.
    fn before(&mut self, cmd: &str) {
        let made = |k: &str| self.made(k);
        self.ids = if cmd.starts_with("amos update <id> \"deploy runbook") {
            let id = self
                .home("main")
                .add("alice", "deploy runbook: 1. build", &[]);
            self.made.insert("runbook", id.clone());
            vec![id]
        } else if cmd.starts_with("amos history <id> --as alice --json") {
            vec![made("runbook")]
        } else if cmd.starts_with("amos --json get <id>")
            || cmd.starts_with("amos update <id> \"we deploy")
            || cmd.starts_with("amos history <id> --as alice")
            || cmd.starts_with("amos unshare <id>")
            || cmd.starts_with("amos forget <id>")
        {
            vec![made("team")]
        } else if cmd.starts_with("amos feedback <id> <id>")
            || cmd.starts_with("amos link <id> <id>")
        {
            vec![made("recall-a"), made("recall-b")]
        } else if cmd.starts_with("amos restore-memory <id>") {
            vec![made("archived")]
        } else {
            Vec::new()
        };
        if cmd.starts_with("amos restore FILE") {
            // Written after the backup: the restore takes it away.
            let later = self
                .home("main")
                .add("alice", "written after the backup", &[]);
            self.made.insert("after-backup", later);
        }
    }

    /// What a command printed: capture values, check the page's claims.
    fn after(&mut self, cmd: &str, home: &'static str, run: &Run) {
        let query = "when do we deploy";
        match cmd {
            "amos demo" => {
                for step in ["pair", "converge", "recall", "revoke"] {
                    assert!(run.stdout.contains(&format!("] {step}")), "{run:?}");
                }
                assert!(
                    run.stdout.contains("recalls alice's memory from A")
                        && run.stdout.contains("no longer recall it"),
                    "{run:?}"
                );
                self.claim("demo: pair, converge, recall by meaning, revoke");
            }
            c if c.starts_with("amos add \"we deploy on Tuesdays\"") => {
                self.made.insert("team", run.stdout.trim().to_owned());
            }
            c if c.starts_with("amos add \"my deploy token") => {
                self.made.insert("private", run.stdout.trim().to_owned());
            }
            c if c.starts_with(&format!("amos search \"{query}\" --as bob")) => {
                let (team, private) = (&self.made("team"), &self.made("private"));
                assert!(
                    run.stdout.contains(team.as_str()) && !run.stdout.contains(private.as_str()),
                    "bob sees the team memory only: {run:?}"
                );
                // The private memory matches the query too: the gate, not
                // relevance, keeps it from bob.
                let alice = self.home("main").search_ids("alice", query, 10);
                assert!(alice.contains(team) && alice.contains(private), "{alice:?}");
                self.claim("quickstart: bob sees the team memory, not alice's private one");
            }
            c if c.starts_with("amos pack \"deploy\" --as bob --budget 400") => {
                assert!(
                    run.stdout.contains("we deploy on Tuesdays")
                        && !run.stdout.contains("deploy token"),
                    "{run:?}"
                );
                self.claim("quickstart: bob's pack holds the team memory");
            }
            c if c.starts_with("amos --json get <id>") => {
                let v = run.json();
                assert_eq!(v["id"].as_str(), Some(self.made("team").as_str()), "{v}");
                assert_eq!(v["visibility"], serde_json::json!(["team:apollo"]), "{v}");
                self.claim("quickstart: get shows the memory shared with the team");
            }
            c if c.starts_with("amos update <id> \"we deploy") => {
                let team = self.made("team");
                let v = self.home("main").json(&["get", &team, "--as", "alice"]);
                assert_eq!(v["content"], "we deploy on Tuesdays and Thursdays", "{v}");
                self.claim("quickstart: update edits the text");
            }
            c if c.starts_with("amos update <id> \"deploy runbook") => {
                let id = self.made("runbook");
                let v = self.home("main").json(&["get", &id, "--as", "alice"]);
                assert!(
                    v["content"].as_str().unwrap_or("").contains("3. promote"),
                    "{v}"
                );
                self.claim("editing: update edits the text");
            }
            c if c.starts_with("amos history <id> --as alice") => {
                let team = if c.contains("--json") {
                    self.made("runbook")
                } else {
                    self.made("team")
                };
                let v = self.home("main").json(&["history", &team, "--as", "alice"]);
                let kinds: Vec<&str> = v["edits"]
                    .as_array()
                    .expect("edits")
                    .iter()
                    .map(|e| e["kind"].as_str().unwrap_or(""))
                    .collect();
                if c.contains("--json") {
                    assert!(run.json()["edits"].is_array(), "{run:?}");
                } else {
                    assert!(
                        run.stdout.contains("created") && run.stdout.contains("edit"),
                        "{run:?}"
                    );
                }
                assert_eq!(kinds[..2], ["created", "edit"], "{v}");
                self.claim("history lists the creation and the edit");
            }
            c if c.starts_with("amos unshare <id> team:apollo") => {
                let team = &self.made("team");
                assert!(
                    !self
                        .home("main")
                        .search_ids("bob", query, 10)
                        .contains(team)
                );
                assert!(
                    self.home("main")
                        .search_ids("alice", query, 10)
                        .contains(team)
                );
                self.claim("quickstart: after unshare bob no longer sees it");
            }
            c if c.starts_with("amos forget <id>") => {
                let team = &self.made("team");
                let r = self.home("main").run(&["get", team, "--as", "alice"]);
                assert_eq!(r.code, 2, "a forgotten memory is no such memory: {r:?}");
                assert!(
                    !self
                        .home("main")
                        .search_ids("alice", query, 10)
                        .contains(team)
                );
                let r = self.home("main").run(&["--json", "get", team, "--admin"]);
                assert!(
                    !r.stdout.contains("Tuesdays"),
                    "the content is gone even for the admin: {r:?}"
                );
                self.claim("quickstart: forget erases");
            }
            "amos id" if home == "main" => {
                let printed = run.stdout.trim().to_owned();
                assert_eq!(printed, id(self.home("main")));
                self.vars.insert("<laptop-id>", printed);
            }
            "amos mesh key generate" => {
                let key = run
                    .stdout
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                assert!(key.starts_with("amosk1-"), "{run:?}");
                self.vars.insert("<key>", key);
                self.claim("air gap: the key is printed");
            }
            c if c.starts_with("amos bundle import") => {
                assert!(
                    run.stdout.contains(" 0 refused") && !run.stdout.contains(" 0 applied"),
                    "{run:?}"
                );
                self.claim("air gap: the import refused nothing");
            }
            c if c.starts_with("amos search \"release\" --as bob") && home == "server" => {
                let sent = self.made("air-gap");
                assert!(run.stdout.contains(sent.as_str()), "{run:?}");
                self.claim("air gap: bob, registered on the server, reads the team memory");
            }
            "amos digest --scope team:apollo" if home == "server" => {
                let printed = run.stdout.split_whitespace().next().unwrap_or("");
                assert_eq!(printed, self.home("main").digest("team:apollo"), "{run:?}");
                assert!(!run.stdout.contains("(0 facts)"), "{run:?}");
                self.claim("air gap: digests equal");
            }
            c if c.starts_with("amos team invite") => {
                let code = run
                    .stdout
                    .split_whitespace()
                    .find(|w| w.starts_with("amos1-"))
                    .unwrap_or_else(|| panic!("no code printed: {run:?}"));
                self.vars.insert("amos1-…", code.to_owned());
            }
            c if c.starts_with("amos join amos1-…") => {
                assert!(run.stdout.contains("first sync ok"), "{run:?}");
                self.claim("pairing: join pairs and syncs");
                if c.contains("--as bob") {
                    assert!(run.stdout.contains("agent bob registered"), "{run:?}");
                    let hits = self.home(home).search_ids("bob", "when do we deploy", 5);
                    assert_eq!(hits.len(), 1, "bob recalls the hub's team memory");
                    self.claim(
                        "pairing: join --as registers the agent, who recalls the team's memory",
                    );
                }
            }
            "amos sync now" if home == "spoke" => {
                assert!(run.stdout.contains("  ok: "), "{run:?}");
                let (hub, spoke) = (self.home("hub"), self.home("spoke"));
                let d = hub.digest("team:apollo");
                assert_eq!(spoke.digest("team:apollo"), d);
                self.claim("pairing: sync now converges");
            }
            "amos consolidate --apply" => {
                let archived: Vec<String> = ["dup-1", "dup-2"]
                    .iter()
                    .map(|k| self.made(k))
                    .filter(|m| {
                        self.home("main").json(&["get", m, "--as", "alice"])["archived"] == true
                    })
                    .collect();
                if let [one] = archived.as_slice() {
                    self.made.insert("archived", one.clone());
                    self.claim("hygiene: consolidate archived a duplicate");
                }
            }
            c if c.starts_with("amos restore-memory <id>") => {
                let m = &self.made("archived");
                assert_eq!(
                    self.home("main").json(&["get", m, "--as", "alice"])["archived"],
                    false
                );
                self.claim("hygiene: restore-memory brings it back");
            }
            c if c.starts_with("amos service install") && c.contains("--dry-run") => {
                let planned: Vec<&str> = run
                    .stdout
                    .lines()
                    .filter_map(|l| l.strip_prefix("==> ")?.strip_suffix(" (would write)"))
                    .collect();
                assert!(!planned.is_empty(), "{run:?}");
                // User units go under $HOME, which is the tour's own.
                let mine: Vec<&&str> = planned
                    .iter()
                    .filter(|f| Path::new(f).starts_with(self.tmp.path()))
                    .collect();
                for f in &mine {
                    assert!(!Path::new(f).exists(), "a dry run wrote {f}");
                }
                if !mine.is_empty() {
                    self.claim("operations: the dry run writes nothing");
                }
            }
            c if c.starts_with("amos bench --generate") => {
                let dir = c.split_whitespace().nth(4).expect("the workload directory");
                let dir = self.tmp.path().join(dir.trim_start_matches("/tmp/"));
                for f in ["org.json", "memories.jsonl", "queries.jsonl"] {
                    assert!(dir.join(f).is_file(), "no {f} in {dir:?}: {run:?}");
                }
                self.claim("bench: generated a workload");
            }
            c if c.starts_with("amos bench --corpus") => {
                assert_eq!(run.json()["memories"], 200, "{run:?}");
                self.claim("bench: ran on the corpus");
            }
            c if c.starts_with("amos search \"deploy\" --as bob --explain") => {
                for factor in [
                    "relevance",
                    "importance",
                    "freshness",
                    "reinforcement",
                    "profile",
                ] {
                    assert!(run.stdout.contains(factor), "no {factor}: {run:?}");
                }
                self.claim("recall: --explain shows every factor");
            }
            c if c.starts_with("amos link <id> <id>") => {
                let a = self.made("recall-a");
                let hits = self
                    .home("main")
                    .json(&["search", "standup", "--as", "bob"]);
                let b = self.made("recall-b");
                let ids: Vec<&str> = hits["hits"]
                    .as_array()
                    .expect("hits")
                    .iter()
                    .filter_map(|h| h["id"].as_str())
                    .collect();
                // "standup" is only in a; b comes along over the link.
                assert!(
                    ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
                    "{hits}"
                );
                self.claim("recall: the link is made");
            }
            c if c.starts_with("amos pack \"deploy\" --as bob --budget 800 --report") => {
                assert!(
                    run.stdout.lines().any(|l| l.starts_with("+ ")),
                    "no decision in the report: {run:?}"
                );
                self.claim("recall: the pack report explains its decisions");
            }
            "amos profile show bob" => {
                assert!(run.stdout.contains("procedure=1.5"), "{run:?}");
                self.claim("recall: the profile holds the weights");
            }
            c if c.starts_with("amos restore FILE") => {
                let main = self.home("main");
                let kept = self.made("backed-up");
                let later = self.made("after-backup");
                assert_eq!(main.run(&["get", &kept, "--as", "alice"]).code, 0);
                assert_eq!(main.run(&["get", &later, "--as", "alice"]).code, 2);
                self.claim("operations: restore brings the backup back");
            }
            "amos --json status" => {
                let v = run.json();
                assert!(v["node_id"].is_string() && v["peers"].is_array(), "{v}");
                self.claim("cli: --json status is one object");
            }
            _ => {}
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `GET path` from 127.0.0.1:`port`: the whole response (retried for a
/// few seconds while the listener comes up).
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut s) => {
                write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("write");
                let mut out = String::new();
                s.read_to_string(&mut out).expect("read");
                return out;
            }
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("nothing answers on 127.0.0.1:{port}: {e}"),
        }
    }
}

/// The directory beside the repository that nothing in it may name (spelt
/// in two halves, so this file does not name it either).
const OUTSIDE: &str = concat!("../", "shared");

/// README.md, then every `docs/*.md` by name (relative to the repository root).
fn pages() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").file_name())
        .filter_map(|n| n.to_str().map(str::to_owned))
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    let mut out = vec!["README.md".to_owned()];
    out.extend(docs);
    out
}

#[test]
fn every_command_of_the_readme_and_docs_runs_or_says_why_not() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut claims = BTreeSet::new();
    let mut not_run = BTreeSet::new();
    let mut rewritten = BTreeSet::new();
    for page in pages() {
        let text = std::fs::read_to_string(root.join(&page)).expect(&page);
        assert!(
            !text.contains(OUTSIDE),
            "{page} refers to {OUTSIDE}: the repository must stand alone"
        );
        let lines = readme_commands(&text);
        if page == "README.md" {
            assert!(lines.len() > 30, "found only {} commands", lines.len());
        }
        let mut tour = Tour::new(&page);
        for line in &lines {
            tour.line(line);
        }
        tour.server = None;
        eprintln!(
            "{page}: {} command lines, {} amos runs, {} not run (see NOT_RUN)",
            lines.len(),
            tour.ran,
            tour.not_run.len()
        );
        claims.extend(tour.claims);
        not_run.extend(tour.not_run);
        rewritten.extend(tour.rewritten);
    }
    for (text, why) in NOT_RUN {
        assert!(
            not_run.contains(text),
            "NOT_RUN lists {text:?} ({why}), which no page shows any more"
        );
    }
    for (text, _, _) in REWRITTEN {
        assert!(
            rewritten.contains(text),
            "REWRITTEN lists {text:?}, which no page shows any more"
        );
    }
    let missing: Vec<&&str> = CLAIMS.iter().filter(|c| !claims.contains(*c)).collect();
    assert!(missing.is_empty(), "claims never checked: {missing:?}");
}

#[test]
fn the_extractor_reads_prompts_comments_synopses_and_output() {
    let md = "# T\n```sh\nlaptop$ amos id   # prints it\n# only a comment\namos a && amos b; amos c\n```\n\
              ```toml\n# not a heading\n```\n## U\n```sh\n$ amos discover\n10.0.0.7  port 4747\n```\n";
    let got: Vec<(String, usize, String, String)> = readme_commands(md)
        .into_iter()
        .map(|l| (l.heading, l.block, l.prompt, l.text))
        .collect();
    let want = vec![
        ("T".to_owned(), 0, "laptop".to_owned(), "amos id".to_owned()),
        ("T".into(), 0, "".into(), "amos a && amos b; amos c".into()),
        ("U".into(), 0, "".into(), "amos discover".into()),
    ];
    assert_eq!(got, want);
    assert_eq!(
        split_commands("amos a && amos b; amos \"c; d\""),
        ["amos a", "amos b", "amos \"c; d\""]
    );
    assert_eq!(
        expand_synopsis("amos retention [--idle 90d|off] [--apply]"),
        [
            "amos retention",
            "amos retention --idle 90d",
            "amos retention --idle off",
            "amos retention --apply"
        ]
    );
    assert_eq!(
        expand_synopsis("amos serve --listen [::]:4747"),
        ["amos serve --listen [::]:4747"]
    );
    assert_eq!(
        words("amos add \"a # b\" --as x"),
        ["amos", "add", "a # b", "--as", "x"]
    );
    assert_eq!(strip_comment("amos x  # y \"z\""), "amos x  ");
}
