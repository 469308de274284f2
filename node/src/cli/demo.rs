//! `amos demo`: the main job on one machine, in about ten seconds. Three
//! nodes in throw-away homes, each a real `amos serve` process (this very
//! binary, `--no-mdns`, QUIC on an ephemeral 127.0.0.1 port): A makes a team
//! and invites, B and C join by pairing code, what each writes converges by
//! push, a paraphrased question is recalled on another node through the gate
//! (an agent outside the team gets nothing), and a revocation reaches every
//! node.
//!
//! Every step goes through the library the other commands use (`Node`,
//! `net::join_agent` and `net::join_blocking`, `amos serve` itself); this
//! module only orders the steps, waits for their effect and prints them.
//! Must never: touch the user's home, listen beyond loopback, advertise or
//! browse over mDNS, or leave a serving process behind.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use amos_node::{Home, NewMemory, Node};
use amos_protocol::Scope;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use super::output::Out;

/// The question asked on C: no content word in common with the memory it
/// should find.
const QUESTION: &str = "who fixes a wrong paycheck";
const PAYROLL: &str = "Payroll corrections go to Dana in finance: she reissues any salary payment that came out incorrect.";
const TEAM: &str = "apollo";
/// How long a step may wait for the mesh before the demo fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// One `amos serve` on a throw-away home; killed when dropped.
struct Served {
    label: &'static str,
    home: Home,
    child: Child,
    addr: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the demo prints as it goes and sums up at the end.
struct Steps<'a> {
    out: &'a Out,
    started: Instant,
    done: Vec<Value>,
}

impl Steps<'_> {
    /// Run one step; print its line (text mode) and keep its record.
    fn run(&mut self, name: &str, f: impl FnOnce() -> Result<(String, Value)>) -> Result<()> {
        let t = Instant::now();
        let r = f();
        let ms = t.elapsed().as_millis() as u64;
        let n = self.done.len() + 1;
        let (line, ok) = match &r {
            Ok((line, _)) => (line.clone(), true),
            Err(e) => (format!("FAILED: {e:#}"), false),
        };
        if !self.out.json && !self.out.quiet {
            println!("[{n}] {name:<9} {:>6.2} s  {line}", ms as f64 / 1000.0);
        }
        let mut v = match r.as_ref() {
            Ok((_, v)) => v.clone(),
            Err(e) => json!({"error": format!("{e:#}")}),
        };
        v["step"] = json!(name);
        v["ok"] = json!(ok);
        v["millis"] = json!(ms);
        self.done.push(v);
        r.map(drop)
    }

    fn summary(&self) -> Value {
        json!({
            "ok": self.done.iter().all(|s| s["ok"] == true),
            "steps": self.done,
            "total_millis": self.started.elapsed().as_millis() as u64,
        })
    }
}

pub fn run(out: &Out) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut steps = Steps {
        out,
        started: Instant::now(),
        done: Vec::new(),
    };
    if !out.json && !out.quiet {
        println!(
            "amos demo: three nodes in throw-away homes under {}, QUIC on 127.0.0.1, mDNS off",
            dir.path().display()
        );
    }
    let r = script(dir.path(), &mut steps);
    if out.json {
        let mut v = steps.summary();
        v["dir"] = json!(dir.path().display().to_string());
        println!("{v}");
    } else if r.is_ok() && !out.quiet {
        println!(
            "done in {:.1} s: paired by code, converged by push, recalled by meaning through the gate, revoked everywhere",
            steps.started.elapsed().as_secs_f64()
        );
    }
    r
}

fn script(dir: &Path, steps: &mut Steps) -> Result<()> {
    let mut nodes: Vec<Served> = Vec::new();
    steps.run("start", || {
        for (label, name) in [("A", "alpha"), ("B", "bravo"), ("C", "charlie")] {
            nodes.push(start(dir, label, name)?);
        }
        let v: Vec<Value> = nodes
            .iter()
            .map(|s| json!({"node": s.label, "addr": s.addr.to_string()}))
            .collect();
        let line = nodes
            .iter()
            .map(|s| format!("{} on {}", s.label, s.addr))
            .collect::<Vec<_>>()
            .join(", ");
        Ok((
            format!("amos serve --no-mdns: {line}"),
            json!({ "nodes": v }),
        ))
    })?;
    let [a, b, c] = [&nodes[0], &nodes[1], &nodes[2]];

    steps.run("pair", || {
        let mut na = Node::open(&a.home)?;
        na.team_create(TEAM, Some("Apollo"))?;
        na.agent_add("alice", "agent", &[TEAM.into()])?;
        let mut joined = Vec::new();
        for (s, agent) in [(b, "bob"), (c, "carol")] {
            let mut joiner = Node::open(&s.home)?;
            joiner.agent_add(agent, "agent", &[])?;
            let invite = na.team_invite(TEAM, None, Duration::from_secs(600), &[])?;
            let carried = amos_node::net::join_agent(&invite.code, Some(agent), false)?;
            drop(joiner);
            let r = amos_node::net::join_blocking(&s.home, &invite.code, &carried, None)?;
            let first = r.first_sync.as_ref().map(|o| o.result.as_str());
            if first != Some("ok") {
                bail!("{}'s first sync with A: {first:?}", s.label);
            }
            if r.member_of != [format!("team:{TEAM}")] {
                bail!("{agent} was made a member of {:?}", r.member_of);
            }
            joined.push(json!({"node": s.label, "agent": agent, "policy": r.policy,
                               "member_of": r.member_of, "first_sync": first}));
        }
        Ok((
            format!(
                "A invites into team {TEAM}; B joins by code as bob, C as carol (policy team:{TEAM}, first sync ok)"
            ),
            json!({ "joined": joined }),
        ))
    })?;

    let mut payroll = String::new();
    steps.run("converge", || {
        let team: Scope = format!("team:{TEAM}").parse()?;
        for (s, agent, text) in [
            (a, "alice", PAYROLL),
            (b, "bob", "The release train leaves every second Thursday at noon."),
            (c, "carol", "Staging database credentials rotate on the first of the month."),
        ] {
            let mut n = Node::open(&s.home)?;
            let who = n.requester(agent)?;
            let mut m = NewMemory::new(text);
            m.share = vec![team.clone()];
            let id = n.add(&who, m)?;
            if s.label == "A" {
                payroll = id.to_string();
            }
        }
        let members = [(a, "alice"), (b, "bob"), (c, "carol")];
        let digest = wait("every node to hold the three team memories", || {
            let mut digests = Vec::new();
            for (s, agent) in members {
                let n = Node::open(&s.home)?;
                let who = n.requester(agent)?;
                if n.list(&who, None, 10)?.len() < 3 {
                    return Ok(None);
                }
                digests.push(n.digest(&[format!("team:{TEAM}")])?.0);
            }
            Ok(digests.windows(2).all(|w| w[0] == w[1]).then(|| digests[0].clone()))
        })?;
        Ok((
            format!(
                "alice on A, bob on B and carol on C each write a team memory; all three nodes hold all three (digest {})",
                &digest[..12.min(digest.len())]
            ),
            json!({"memories": 3, "digest": digest}),
        ))
    })?;

    steps.run("recall", || {
        let mut n = Node::open(&c.home)?;
        n.agent_add("dave", "agent", &[])?;
        let carol = n.requester("carol")?;
        let hits = n.search(&carol, QUESTION, 3)?;
        let top = hits
            .first()
            .ok_or_else(|| anyhow!("carol recalled nothing for {QUESTION:?}"))?;
        if top.memory.id().to_string() != payroll {
            bail!(
                "carol's first hit for {QUESTION:?} is {:?}, not the payroll memory",
                top.memory.content()
            );
        }
        let dave = n.requester("dave")?;
        let outsider = n.search(&dave, QUESTION, 3)?.len();
        if outsider != 0 {
            bail!("dave, in no team, recalled {outsider} memories");
        }
        Ok((
            format!(
                "on C, carol asks {QUESTION:?} and recalls alice's memory from A: {PAYROLL:?}; dave, in no team, recalls nothing"
            ),
            json!({"node": "C", "question": QUESTION, "hit": payroll,
                   "hit_text": top.memory.content(), "outsider_hits": outsider}),
        ))
    })?;

    steps.run("revoke", || {
        let mut n = Node::open(&a.home)?;
        let alice = n.requester("alice")?;
        n.set_grant(&alice, &payroll, &format!("team:{TEAM}"), false)?;
        drop(n);
        let readers = [(b, "bob"), (c, "carol")];
        wait("the revocation to reach every node", || {
            for (s, agent) in readers {
                let mut n = Node::open(&s.home)?;
                let who = n.requester(agent)?;
                let hits = n.search(&who, QUESTION, 10)?;
                if hits.iter().any(|h| h.memory.id().to_string() == payroll) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        Ok((
            format!(
                "alice unshares it on A (team:{TEAM} removed); bob on B and carol on C no longer recall it"
            ),
            json!({"nodes": ["B", "C"], "recalled_after": 0}),
        ))
    })?;
    Ok(())
}

/// Initialise a home and start `amos serve` on it; wait until it listens.
fn start(dir: &Path, label: &'static str, name: &str) -> Result<Served> {
    let home = Home::new(dir.join(name));
    Node::init(&home, Some(name))?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = Command::new(std::env::current_exe().context("finding this binary")?)
        .arg("--home")
        .arg(home.root())
        .args(["serve", "--no-mdns", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .env("AMOS_LOG", "info")
        .spawn()
        .context("starting amos serve")?;
    let mut served = Served {
        label,
        home,
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    // `amos serve` records where it listens once its endpoint is up.
    served.addr = wait(&format!("node {label} to listen"), || {
        if let Some(status) = served.child.try_wait()? {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            bail!("amos serve for {label} exited ({status}): {}", log.trim());
        }
        Ok(std::fs::read_to_string(served.home.listen_path())
            .ok()
            .and_then(|s| s.trim().parse().ok()))
    })?;
    Ok(served)
}

/// Ask `done` until it answers, for at most [`PATIENCE`].
fn wait<T>(what: &str, mut done: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = done()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("gave up waiting {}s for {what}", PATIENCE.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
