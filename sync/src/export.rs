//! Export selection: which of a row's facts may leave for a peer (docs/design.md §6).
//!
//! * A memory goes to a peer only if its visibility on this node intersects
//!   the peer's policy; private and `agent:` memories only to `full` peers.
//! * Retraction: its acl fact (and tombstone) also goes to every peer whose
//!   policy intersected *any earlier* visibility (`grants_ever`), so a peer
//!   that received a memory learns that it was revoked — without the content.
//! * Links only if both ends go; org records only for scopes inside the
//!   policy; agents and profiles only to `full` peers.

use amos_acl::PeerPolicy;
use std::collections::BTreeMap;

use amos_protocol::{Grants, OrgScope, ProjectId, TeamId};

/// What of a memory row goes to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryExport {
    /// Nothing.
    None,
    /// Only the acl fact and tombstone: the peer once saw it, it no longer may.
    Retraction,
    /// Every fact of the row.
    Whole,
}

/// Decide a memory row.
pub fn memory(
    policy: &PeerPolicy,
    effective: &Grants,
    grants_ever: &Grants,
    tombstoned: bool,
) -> MemoryExport {
    if policy.is_full() {
        return MemoryExport::Whole;
    }
    let ever = policy.admits_grants(grants_ever) || policy.admits_grants(effective);
    if tombstoned {
        return if ever {
            MemoryExport::Retraction
        } else {
            MemoryExport::None
        };
    }
    if policy.admits_grants(effective) {
        MemoryExport::Whole
    } else if ever {
        MemoryExport::Retraction
    } else {
        MemoryExport::None
    }
}

/// Decide an org record (team/project and their memberships) of a scope
/// the policy names.
pub fn org(policy: &PeerPolicy, scope: &OrgScope) -> bool {
    policy.admits_org(scope)
}

/// The teams a scoped policy reaches through the projects it names, each
/// with those projects: a `project:P` peer receives P's team record and the
/// team memberships of P's members (what they need to pass the gate there),
/// nothing else of the team. Stores send these whole on every export (they
/// are few), since a project membership can make an unchanged team
/// membership needed.
pub fn teams_via_projects(
    policy: &PeerPolicy,
    mut project_team: impl FnMut(&ProjectId) -> Option<TeamId>,
) -> BTreeMap<TeamId, Vec<ProjectId>> {
    let mut out: BTreeMap<TeamId, Vec<ProjectId>> = BTreeMap::new();
    for p in policy.projects() {
        if let Some(t) = project_team(p)
            && !policy.admits_org(&OrgScope::Team(t.clone()))
        {
            out.entry(t).or_default().push(p.clone());
        }
    }
    out
}

/// Agents and profiles go only to full peers.
pub fn registry(policy: &PeerPolicy) -> bool {
    policy.is_full()
}

/// A link goes only if both ends go whole.
pub fn link(from: MemoryExport, to: MemoryExport) -> bool {
    from == MemoryExport::Whole && to == MemoryExport::Whole
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &[&str]) -> Grants {
        s.iter().map(|x| x.parse().unwrap()).collect()
    }

    #[test]
    fn memory_export_table() {
        let team: PeerPolicy = "team:a".parse().unwrap();
        let cases = [
            // (effective, ever, tombstoned, expected)
            (g(&["team:a"]), g(&["team:a"]), false, MemoryExport::Whole),
            (g(&["global"]), g(&["global"]), false, MemoryExport::None),
            (g(&[]), g(&[]), false, MemoryExport::None),
            (g(&["agent:x"]), g(&["agent:x"]), false, MemoryExport::None),
            (g(&[]), g(&["team:a"]), false, MemoryExport::Retraction),
            (g(&[]), g(&["team:a"]), true, MemoryExport::Retraction),
            (g(&[]), g(&["team:b"]), true, MemoryExport::None),
        ];
        for (eff, ever, tomb, want) in cases {
            assert_eq!(
                memory(&team, &eff, &ever, tomb),
                want,
                "{eff} {ever} {tomb}"
            );
        }
        assert_eq!(
            memory(&PeerPolicy::Full, &g(&[]), &g(&[]), false),
            MemoryExport::Whole
        );
        assert!(link(MemoryExport::Whole, MemoryExport::Whole));
        assert!(!link(MemoryExport::Whole, MemoryExport::Retraction));
    }
}
