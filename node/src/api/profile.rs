//! Per-agent ranking profiles: a weight per memory type that multiplies the
//! score of that type's memories in the agent's recall (docs/design.md §4, §9).
//!
//! A profile is a replicated fact (`FactBody::Profile`), written through the
//! same signed-fact path as every other write ([`Node::commit`]).
//!
//! Boundary: a weight only re-orders memories the gate already admitted; it
//! never makes an invisible memory visible, and it never reaches the gate.

use std::collections::BTreeMap;

use amos_protocol::{AgentId, FactBody, MemoryType, ProfileFact};
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::store::org;

/// The largest weight a profile may give (the protocol's bound).
pub const MAX_WEIGHT: f32 = 10.0;

/// Weights by memory type; a type not named weighs 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileWeights(BTreeMap<String, f32>);

/// As a JSON object `{type: weight}`, each weight printed as its shortest
/// decimal (`0.2`, not the f32's `0.20000000298…`).
impl Serialize for ProfileWeights {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, w) in &self.0 {
            let w: f64 = w.to_string().parse().unwrap_or(f64::from(*w));
            map.serialize_entry(k, &w)?;
        }
        map.end()
    }
}

impl ProfileWeights {
    /// The weight of memories of type `kind`.
    pub fn weight(&self, kind: &MemoryType) -> f32 {
        self.0.get(kind.as_str()).copied().unwrap_or(1.0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, f32)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The stored profile of `agent` (neutral when it has none). An
    /// unparsable stored value reads as neutral.
    pub fn load(conn: &Connection, agent: &AgentId) -> Result<ProfileWeights> {
        let json: Option<String> = conn
            .prepare_cached("SELECT weights FROM profiles WHERE agent = ?1")?
            .query_row([agent.as_str()], |r| r.get(0))
            .optional()?;
        let map: BTreeMap<String, f32> = json
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default();
        Ok(ProfileWeights(
            map.into_iter()
                .filter(|(_, w)| w.is_finite() && (0.0..=MAX_WEIGHT).contains(w))
                .collect(),
        ))
    }
}

/// Parse `TYPE=WEIGHT` (e.g. `procedure=1.5`).
pub fn parse_weight(s: &str) -> Result<(MemoryType, f32)> {
    let bad = || {
        NodeError::BadInput(format!(
            "malformed weight {s:?}: use TYPE=WEIGHT with WEIGHT in 0..={MAX_WEIGHT}, e.g. procedure=1.5"
        ))
    };
    let (t, w) = s.split_once('=').ok_or_else(bad)?;
    let kind = MemoryType::parse(t.trim()).map_err(|_| bad())?;
    let w: f32 = w.trim().parse().map_err(|_| bad())?;
    if !w.is_finite() || !(0.0..=MAX_WEIGHT).contains(&w) {
        return Err(bad());
    }
    Ok((kind, w))
}

impl Node {
    /// The ranking profile of `agent`.
    pub fn profile_show(&self, agent: &str) -> Result<ProfileWeights> {
        let agent = self.known_agent(agent)?;
        ProfileWeights::load(self.store.conn(), &agent)
    }

    /// Set weights in `agent`'s profile (others stay; a weight of 1 removes
    /// the type, 1 being neutral). One signed profile fact.
    pub fn profile_set(
        &mut self,
        agent: &str,
        weights: &[(MemoryType, f32)],
    ) -> Result<ProfileWeights> {
        if weights.is_empty() {
            return Err(NodeError::BadInput("name at least one TYPE=WEIGHT".into()));
        }
        let agent = self.known_agent(agent)?;
        for (_, w) in weights {
            if !w.is_finite() || !(0.0..=MAX_WEIGHT).contains(w) {
                return Err(NodeError::BadInput(format!(
                    "profile weights must be in 0..={MAX_WEIGHT}"
                )));
            }
        }
        let (_, out) = self.commit(|tx| {
            let mut map = ProfileWeights::load(tx.conn(), &agent)?.0;
            for (kind, w) in weights {
                if *w == 1.0 {
                    map.remove(kind.as_str());
                } else {
                    map.insert(kind.as_str().to_owned(), *w);
                }
            }
            if map.len() > 64 {
                return Err(NodeError::BadInput(
                    "a profile holds at most 64 type weights".into(),
                ));
            }
            let fact = ProfileFact {
                agent: agent.clone(),
                weights: map
                    .iter()
                    .map(|(k, w)| Ok((MemoryType::parse(k)?, *w)))
                    .collect::<Result<Vec<_>>>()?,
            };
            Ok((vec![FactBody::Profile(fact)], ProfileWeights(map)))
        })?;
        Ok(out)
    }

    fn known_agent(&self, agent: &str) -> Result<AgentId> {
        let agent = AgentId::parse(agent)?;
        if !org::agent_present(self.store.conn(), &agent)? {
            return Err(NodeError::BadInput(format!("unknown agent {agent}")));
        }
        Ok(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_parse_or_are_refused() {
        let (k, w) = parse_weight("procedure=1.5").unwrap();
        assert_eq!((k.as_str(), w), ("procedure", 1.5));
        for bad in [
            "procedure",
            "=1",
            "Proc=1",
            "note=-1",
            "note=11",
            "note=nan",
            "note=x",
        ] {
            assert!(parse_weight(bad).is_err(), "{bad}");
        }
    }
}
