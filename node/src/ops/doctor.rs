//! `amos doctor`: is this node healthy, and if not, what to do. Each check
//! is ok, warn or fail, with a one-line fix hint when not ok.
//!
//! Checks: home and key permissions, database integrity and schema, index
//! lag, the clock (against the node's own clock and facts from peers held
//! back for being ahead), legacy team and project ids (held, and clashed:
//! created by two nodes), the listening port, multicast for mDNS, and every
//! peer with an address (a handshake only; no session, nothing synced).
//!
//! Boundary: reads and probes only; never changes the store or the peers.

use std::os::unix::fs::PermissionsExt;

use serde::Serialize;

use crate::api::node::Node;
use crate::api::pairing;
use crate::error::Result;
use crate::net::{self, Probe};
use crate::store::schema::SCHEMA_VERSION;
use crate::store::{clashes, status};
use amos_protocol::OrgScope;

/// One check of `amos doctor`.
#[derive(Debug, Serialize)]
pub struct DoctorCheck {
    /// What was checked.
    pub name: String,
    /// `ok`, `warn` or `fail`.
    pub status: &'static str,
    /// What was found.
    pub detail: String,
    /// What to do about it, when not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// What `amos doctor` found.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// No check failed (warnings allowed).
    pub ok: bool,
    /// Every check, in order.
    pub checks: Vec<DoctorCheck>,
}

#[derive(Default)]
struct Checks(Vec<DoctorCheck>);

impl Checks {
    fn ok(&mut self, name: impl Into<String>, detail: impl Into<String>) {
        self.push(name, "ok", detail, None);
    }
    fn warn(
        &mut self,
        name: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.push(name, "warn", detail, Some(hint.into()));
    }
    fn fail(
        &mut self,
        name: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.push(name, "fail", detail, Some(hint.into()));
    }
    fn push(
        &mut self,
        name: impl Into<String>,
        status: &'static str,
        detail: impl Into<String>,
        hint: Option<String>,
    ) {
        self.0.push(DoctorCheck {
            name: name.into(),
            status,
            detail: detail.into(),
            hint,
        });
    }
}

/// Run every check. `probe_network`: also probe the listener and peers.
pub fn run(node: &mut Node, probe_network: bool) -> Result<DoctorReport> {
    let mut c = Checks::default();
    let home = node.home().clone();

    // Permissions.
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    };
    match mode(home.root()) {
        Some(m) if m & 0o077 == 0 => c.ok(
            "home",
            format!("{} is private ({m:o})", home.root().display()),
        ),
        Some(m) => c.warn(
            "home",
            format!(
                "{} has mode {m:o}: other users can read memories",
                home.root().display()
            ),
            format!("chmod 700 {}", home.root().display()),
        ),
        None => c.fail(
            "home",
            "the home directory is unreadable",
            "check the path and its owner",
        ),
    }
    for (name, path, required) in [
        ("identity_key", home.key_path(), true),
        ("mesh_key", home.mesh_key_path(), false),
    ] {
        match mode(&path) {
            Some(m) if m & 0o077 == 0 => {
                c.ok(name, format!("{} is private ({m:o})", path.display()))
            }
            Some(m) => c.fail(
                name,
                format!("{} has mode {m:o}", path.display()),
                format!("chmod 600 {}", path.display()),
            ),
            None if required => c.fail(name, "missing", "restore the home from a backup"),
            None => c.ok(name, "not set (bundles are signed but not encrypted)"),
        }
    }

    // Store and index.
    let integrity = node.store().read(|r| status::quick_check(r))?;
    if integrity == "ok" {
        c.ok("database", "quick_check ok");
    } else {
        c.fail(
            "database",
            integrity,
            "restore from a backup: amos restore FILE --force",
        );
    }
    let v = node.store().schema_version()?;
    if v == SCHEMA_VERSION {
        c.ok("schema", format!("v{v}"));
    } else {
        c.fail(
            "schema",
            format!("v{v}, this amos writes v{SCHEMA_VERSION}"),
            "upgrade amos",
        );
    }
    let lag = node.index_lag()?;
    if lag == 0 {
        c.ok("index", "up to date");
    } else {
        c.warn(
            "index",
            format!("{lag} changes behind"),
            "it catches up on the next search; or run `amos index rebuild`",
        );
    }

    // Clocks.
    match clock_ahead_s(node)? {
        Some(ahead) => c.warn(
            "clock",
            format!("the node's clock is {ahead} s ahead of the system clock"),
            "check the system time (NTP)",
        ),
        None => c.ok("clock", "the system clock is not behind the node's clock"),
    }
    let ahead = node.quarantined()?;
    if ahead.is_empty() {
        c.ok(
            "peer_clocks",
            "no facts held back for a clock ahead of ours",
        );
    } else {
        c.warn(
            "peer_clocks",
            format!("{} facts from peers are held back (their clock is ahead, or a link waits for its ends)", ahead.len()),
            "check the time on those peers (amos status lists them); they apply by themselves once due",
        );
    }

    // Legacy ids: the same team or project id created on two nodes before
    // ids were qualified (docs/design.md §6.2), and legacy ids held at all.
    scopes(&mut c, node)?;

    // Network.
    if probe_network {
        listener(&mut c, node, &home);
        let peers: Vec<_> = node
            .peer_list()?
            .into_iter()
            .filter_map(|p| Some((p.node_id.parse().ok()?, p.addr.clone()?, p.name.clone())))
            .collect();
        let targets: Vec<_> = peers
            .iter()
            .map(|(id, addr, _)| (*id, addr.clone()))
            .collect();
        let probes = net::dial::probe_blocking(&home, &targets)?;
        for ((id, addr, _), probe) in peers.iter().zip(probes) {
            let name = format!("peer {}", id.short());
            match probe {
                Probe::Accepted => c.ok(name, format!("{addr} answers and accepts this node")),
                Probe::RefusedUs => c.warn(
                    name,
                    format!("{addr} answers but refuses this node's key"),
                    "pair again (amos team invite / amos join), or ask its operator to add this node",
                ),
                Probe::Unreachable => c.warn(
                    name,
                    format!("{addr} does not answer"),
                    "is it running (`amos serve`)? is the address right? `amos peers add ID ADDR --policy P` updates it",
                ),
            }
        }
    }
    multicast(&mut c);

    let ok = c.0.iter().all(|x| x.status != "fail");
    Ok(DoctorReport { ok, checks: c.0 })
}

/// How far (seconds) the node's clock runs ahead of the system clock, when
/// more than the ten minutes `amos doctor` tolerates; `None` when healthy.
pub fn clock_ahead_s(node: &Node) -> Result<Option<u64>> {
    let hlc = node.store().hlc_state()?;
    let now = node.now_ms();
    Ok((hlc.wall_ms > now + 10 * 60 * 1000).then(|| (hlc.wall_ms - now) / 1000))
}

/// Each legacy id two nodes created (a clash recorded here: what it does,
/// both origins, the way out), and the legacy ids held (to migrate).
fn scopes(c: &mut Checks, node: &Node) -> Result<()> {
    let (found, legacy) = node
        .store()
        .read(|r| Ok((clashes::list(r)?, clashes::legacy_held(r)?)))?;
    if found.is_empty() {
        c.ok(
            "scope_clashes",
            "no team or project id is claimed by two nodes",
        );
    }
    for clash in &found {
        let scope = &clash.scope;
        let (word, name) = match scope {
            OrgScope::Team(t) => ("team", t.as_str()),
            OrgScope::Project(p) => ("project", p.as_str()),
        };
        let held = clash
            .held
            .map(|h| format!("node {h}"))
            .unwrap_or_else(|| "no node (not held)".into());
        let theirs: Vec<String> = clash.theirs.iter().map(|n| format!("node {n}")).collect();
        let theirs = theirs.join(", ");
        let counts = if clash.closed {
            format!("only on memories from {held} or this node")
        } else {
            format!("on no memory from {theirs} (only scoped peers brought theirs)")
        };
        c.warn(
            format!("scope_clash {scope}"),
            format!(
                "the legacy id {scope} was created by two nodes before ids were qualified: \
                 the one held here by {held}, another by {theirs}. They are different scopes; \
                 this node keeps its own, refuses the other's record and members, and a \
                 {word}:{name} grant counts {counts}: the others may mean the other one, \
                 and are hidden from its members here"
            ),
            format!(
                "create it anew on the node that should own it (`amos {word} create {name}` \
                 gives a qualified id, {word}:{name}@…), add its members, re-share its \
                 memories to the new id (`amos share`), then delete the legacy {scope}"
            ),
        );
    }
    if legacy.is_empty() {
        c.ok(
            "legacy_ids",
            "every team and project id is qualified by its origin",
        );
    } else {
        let ids: Vec<String> = legacy.iter().map(ToString::to_string).collect();
        c.warn(
            "legacy_ids",
            format!(
                "{} team/project id(s) from before ids were qualified: {}; they keep working, \
                 but another node may have created the same name",
                ids.len(),
                ids.join(", ")
            ),
            "to migrate one: create it anew (`amos team create NAME` gives a qualified id), \
             add its members, re-share its memories to the new id, then delete the legacy one",
        );
    }
    Ok(())
}

/// The listening address `amos serve` recorded (or the default): free, or
/// held by this very node.
fn listener(c: &mut Checks, node: &Node, home: &crate::home::Home) {
    let addr = pairing::recorded_listen(home).unwrap_or_else(|| {
        net::DEFAULT_LISTEN
            .parse()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 4747)))
    });
    match std::net::UdpSocket::bind(addr) {
        Ok(_) => c.ok("listener", format!("{addr} is free for `amos serve`")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let me = node.node_id();
            let local = if addr.ip().is_unspecified() {
                std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
            } else {
                addr
            };
            match net::dial::probe_blocking(home, &[(me, local.to_string())]) {
                Ok(p) if p.first().is_some_and(|p| *p != Probe::Unreachable) => c.ok(
                    "listener",
                    format!("`amos serve` of this node listens on {addr}"),
                ),
                _ => c.fail(
                    "listener",
                    format!("{addr} is used by another program"),
                    "stop it, or run `amos serve --listen IP:PORT` on a free port",
                ),
            }
        }
        Err(e) => c.fail(
            "listener",
            format!("cannot bind {addr}: {e}"),
            "run `amos serve --listen IP:PORT` with an address of this machine",
        ),
    }
}

/// mDNS needs an interface that is up and multicast-capable (read from
/// /sys; nothing is sent).
fn multicast(c: &mut Checks) {
    const IFF_UP: u32 = 0x1;
    const IFF_LOOPBACK: u32 = 0x8;
    const IFF_MULTICAST: u32 = 0x1000;
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        c.warn(
            "mdns",
            "cannot list network interfaces",
            "use `amos peers add` with addresses",
        );
        return;
    };
    let mut usable = Vec::new();
    for e in dir.flatten() {
        let flags = std::fs::read_to_string(e.path().join("flags"))
            .ok()
            .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
            .unwrap_or(0);
        if flags & IFF_UP != 0 && flags & IFF_MULTICAST != 0 && flags & IFF_LOOPBACK == 0 {
            usable.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    usable.sort();
    if usable.is_empty() {
        c.warn(
            "mdns",
            "no interface is up with multicast: discovery will find nothing",
            "give peers addresses (`amos peers add`), or run `amos serve --no-mdns`",
        );
    } else {
        c.ok(
            "mdns",
            format!("multicast interfaces: {}", usable.join(", ")),
        );
    }
}
