//! The scenarios `amos --json bench --mesh N` reports, each on one mesh in
//! turn (docs/bench.md says what the figures mean and what they should
//! meet):
//!
//! 1. **first sync**: every node writes a few memories (random owner and
//!    grants: private, global, team, agent), periodic passes until the mesh
//!    converges ([`crate::check`]);
//! 2. **idle**: one more period with nothing written: bytes per node;
//! 3. **revocation** (push off): a node unshares a memory every node held;
//!    periods until every node has the unshare;
//! 4. **push** (periodic off): a node writes one memory; virtual seconds
//!    until the slowest node applied it, against diameter × (debounce + one
//!    session);
//! 5. **restore**: a node is restored from a backup taken before scenario
//!    3 (its log epoch changes) and dials its neighbours until the mesh
//!    converges again: the bytes and round trips that took.
//!
//! Boundary: drives the mesh through its public API; measures, decides
//! nothing about the rules.

use amos_protocol::{Grants, Register, Scope};
use amos_sync::PushConfig;
use serde::Serialize;

use crate::check::convergence;
use crate::clock::{MS, Micros, SECOND};
use crate::mesh::{Mesh, MeshConfig, SessionRecord, Stats};
use crate::rng::Rng;

/// What to run.
#[derive(Debug, Clone)]
pub struct MeshBench {
    pub nodes: usize,
    pub degree: usize,
    pub seed: u64,
    pub memories_per_node: usize,
    pub period: Micros,
    pub push: PushConfig,
}

impl MeshBench {
    pub fn new(nodes: usize, degree: usize, seed: u64) -> MeshBench {
        MeshBench {
            nodes,
            degree,
            seed,
            memories_per_node: 2,
            period: 60 * SECOND,
            push: PushConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FirstSync {
    pub memories: usize,
    pub periods: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PushFigures {
    pub debounce_s: f64,
    /// Median duration of the sessions that carried the change.
    pub session_s: f64,
    /// diameter × (debounce + session_s).
    pub bound_s: f64,
    pub sessions: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Repair {
    /// Through range reconciliation (`amos_sync::repair`): the restored
    /// node's passes until the mesh converged again — round trips on the
    /// critical path (its sessions run at once: the longest, summed over
    /// passes) and every byte of those sessions. `None` if no session
    /// repaired (see `note`).
    pub round_trips: Option<u32>,
    pub bytes: Option<u64>,
    /// The protocol before repair: the restored node's new epoch makes it
    /// export everything to each neighbour, and each neighbour everything
    /// since the restored watermark — computed from the same exports just
    /// after the restore (encoded, not sent).
    pub full_resend_bytes: u64,
    /// Passes of the restored node until the mesh converged again.
    pub passes: u32,
    /// Of its sessions, those that ran a repair to the end.
    pub repaired_sessions: u64,
    pub converged: bool,
    /// Facts the restored node held / had lost.
    pub held_facts: usize,
    pub lost_facts: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The figures `amos --json bench --mesh N` prints.
#[derive(Debug, Clone, Serialize)]
pub struct MeshReport {
    pub nodes: usize,
    pub degree: usize,
    pub seed: u64,
    pub diameter: Option<usize>,
    pub operators: usize,
    pub full_links: usize,
    pub scoped_links: usize,
    pub period_s: f64,
    /// Converged after every scenario.
    pub converged: bool,
    pub differences: Vec<String>,
    pub first_sync: FirstSync,
    pub idle_bytes_per_node: f64,
    pub idle_sessions: u64,
    /// The targets this run can judge on its own: push within
    /// diameter × (debounce + one session), revocation within 3 periods
    /// with push off (idle bytes independent of N needs two runs).
    pub push_within_bound: bool,
    pub revocation_within_3_periods: bool,
    pub revocation_periods: u64,
    pub revocation_s: f64,
    /// `None`: some node never applied the change.
    pub push_apply_s: Option<f64>,
    pub push: PushFigures,
    pub repair: Repair,
    pub virtual_s: f64,
    pub stats: Stats,
}

fn secs(us: Micros) -> f64 {
    us as f64 / SECOND as f64
}

fn grants(pick: u64) -> Grants {
    let pool: [&[&str]; 6] = [
        &["private"],
        &["global"],
        &["team:t"],
        &["agent:a2"],
        &["team:t", "agent:a3"],
        &["global", "agent:a0"],
    ];
    pool[pick as usize % pool.len()]
        .iter()
        .filter_map(|s| s.parse::<Scope>().ok())
        .collect()
}

/// Random memories: `per_node` at every node (relays write none).
pub fn write_workload(mesh: &mut Mesh, per_node: usize, rng: &mut Rng) -> usize {
    let mut n = 0;
    let members: Vec<usize> = (0..mesh.len()).filter(|&i| !mesh.is_relay(i)).collect();
    for node in members {
        for _ in 0..per_node {
            let owner = rng.below(4) as usize;
            let g = grants(rng.next_u64());
            mesh.write_memory(node, owner, g);
            n += 1;
        }
    }
    n
}

/// Run whole periods until converged (at most `max`); the periods taken.
pub fn periods_to_converge(mesh: &mut Mesh, period: Micros, max: u64) -> Option<u64> {
    for k in 1..=max {
        mesh.run_for(period);
        if mesh.is_quiet() && convergence(mesh).converged {
            return Some(k);
        }
    }
    None
}

fn bytes_of<'a>(records: impl Iterator<Item = &'a SessionRecord>) -> u64 {
    records.map(|r| r.bytes).sum()
}

/// Run every scenario.
pub fn run(b: &MeshBench) -> MeshReport {
    let cfg = MeshConfig::new(b.nodes, b.degree, b.seed);
    let mut mesh = Mesh::new(cfg);
    let mut rng = Rng::new(b.seed).fork(100);
    let diameter = mesh.graph.diameter();
    let period = b.period;
    mesh.set_schedule(Some(period), None);
    let max_periods = 4 * diameter.unwrap_or(b.nodes) as u64 + 10;

    // 1. First sync.
    let memories = write_workload(&mut mesh, b.memories_per_node, &mut rng);
    let first_periods = periods_to_converge(&mut mesh, period, max_periods).unwrap_or(0);
    let first_bytes = mesh.stats.bytes;

    // 5 (part): the backup, taken now.
    let restored = rng.below(b.nodes as u64) as usize;
    let backup = mesh.backup(restored);

    // 2. Idle: sessions started in one period with nothing written.
    mesh.run_until_quiet(period);
    let t0 = mesh.now();
    let from = mesh.records.len();
    mesh.run_for(period);
    mesh.run_until_quiet(period);
    let idle: Vec<&SessionRecord> = mesh.records[from..]
        .iter()
        .filter(|r| r.started >= t0 && r.started < t0 + period)
        .collect();
    let idle_bytes = bytes_of(idle.iter().copied());
    let idle_sessions = idle.len() as u64;

    // 3. Revocation, push off: a global memory everyone holds is unshared.
    let origin = rng.below(b.nodes as u64) as usize;
    let global: Grants = ["global"].iter().filter_map(|s| s.parse().ok()).collect();
    let (id, _) = mesh.write_memory(origin, 2, global);
    periods_to_converge(&mut mesh, period, max_periods);
    // A few more writes after the backup, so the restore loses something.
    for _ in 0..3 {
        mesh.write_memory(restored, 1, grants(rng.next_u64()));
    }
    let fixed = mesh.fixed_of(origin, &id);
    let mut revocation_s = 0.0;
    let mut revocation_periods = 0;
    if let Some(fixed) = fixed {
        let t_unshare = mesh.now();
        let clock = mesh.set_grants(origin, id, fixed, Grants::private());
        mesh.watch(Register::MemoryAcl(id), clock);
        for _ in 0..max_periods {
            mesh.run_for(period);
            if mesh.arrivals().iter().all(Option::is_some) {
                let last = mesh
                    .arrivals()
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(t_unshare);
                revocation_s = secs(last - t_unshare);
                revocation_periods = (last - t_unshare).div_ceil(period).max(1);
                break;
            }
        }
    }
    periods_to_converge(&mut mesh, period, max_periods);

    // 4. Push, periodic off.
    mesh.run_until_quiet(period);
    mesh.set_schedule(None, Some(b.push));
    let writer = rng.below(b.nodes as u64) as usize;
    let from = mesh.records.len();
    let bytes_before = mesh.stats.bytes;
    let t_write = mesh.now();
    let global: Grants = ["global"].iter().filter_map(|s| s.parse().ok()).collect();
    let (pushed, clock) = mesh.write_memory(writer, 0, global.clone());
    mesh.watch(Register::MemoryAcl(pushed), clock);
    mesh.run_until_quiet(10 * period);
    let push_last = mesh
        .arrivals()
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(t_write);
    let push_records: Vec<&SessionRecord> = mesh.records[from..].iter().filter(|r| r.ok).collect();
    let mut durations: Vec<Micros> = push_records.iter().map(|r| r.ended - r.started).collect();
    durations.sort_unstable();
    let session_us = durations.get(durations.len() / 2).copied().unwrap_or(0);
    let debounce = b.push.debounce_ms * MS;
    let push = PushFigures {
        debounce_s: secs(debounce),
        session_s: secs(session_us),
        bound_s: diameter.unwrap_or(0) as f64 * secs(debounce + session_us),
        sessions: (mesh.records.len() - from) as u64,
        bytes: mesh.stats.bytes - bytes_before,
    };
    let push_apply_s = mesh
        .arrivals()
        .iter()
        .all(Option::is_some)
        .then(|| secs(push_last - t_write));

    // 5. Restore from the backup; only the restored node dials.
    mesh.set_schedule(None, None);
    mesh.run_until_quiet(period);
    let held = mesh.nodes[restored].replica.store.facts.len();
    mesh.restore(restored, &backup);
    let lost = held.saturating_sub(mesh.nodes[restored].replica.store.facts.len());
    let full_resend_computed = mesh.full_resend_bytes(restored);
    let mut pass_bytes = 0;
    let mut pass_rt = 0;
    let mut repaired_sessions = 0;
    let mut passes = 0;
    let mut repaired = false;
    for _ in 0..4 {
        let from = mesh.records.len();
        mesh.pass(restored);
        mesh.run_until_quiet(period);
        passes += 1;
        let recs = &mesh.records[from..];
        pass_bytes += bytes_of(recs.iter());
        pass_rt += recs.iter().map(|r| r.round_trips).max().unwrap_or(0);
        repaired_sessions += recs.iter().filter(|r| r.repaired).count() as u64;
        if convergence(&mesh).converged {
            repaired = true;
            break;
        }
    }
    let reconciled = repaired_sessions > 0;
    let repair = Repair {
        round_trips: reconciled.then_some(pass_rt),
        bytes: reconciled.then_some(pass_bytes),
        full_resend_bytes: full_resend_computed,
        passes,
        repaired_sessions,
        converged: repaired,
        held_facts: held,
        lost_facts: lost,
        note: (!reconciled).then(|| {
            format!(
                "no session repaired; the restored node's passes moved {pass_bytes} bytes in {pass_rt} round trips"
            )
        }),
    };

    let end = convergence(&mesh);
    let op = |i: usize| mesh.nodes[i].operator;
    let edges = mesh.graph.edges();
    let full_links = edges.iter().filter(|(a, c)| op(*a) == op(*c)).count();
    MeshReport {
        nodes: b.nodes,
        degree: b.degree,
        seed: b.seed,
        diameter,
        operators: mesh.cfg.operators,
        full_links,
        scoped_links: edges.len() - full_links,
        period_s: secs(period),
        converged: end.converged && first_periods > 0,
        differences: end.differences,
        first_sync: FirstSync {
            memories,
            periods: first_periods,
            bytes: first_bytes,
        },
        idle_bytes_per_node: idle_bytes as f64 / b.nodes.max(1) as f64,
        idle_sessions,
        push_within_bound: push_apply_s.is_some_and(|s| s <= push.bound_s),
        revocation_within_3_periods: (1..=3).contains(&revocation_periods),
        revocation_periods,
        revocation_s,
        push_apply_s,
        push,
        repair,
        virtual_s: secs(mesh.now()),
        stats: mesh.stats.clone(),
    }
}
