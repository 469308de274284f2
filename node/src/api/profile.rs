//! Per-agent ranking profiles: a weight per memory type that multiplies the
//! score of that type's memories in the agent's recall (docs/design.md §4, §9).
//!
//! A profile is a replicated fact (`FactBody::Profile`), written through the
//! same signed-fact path as every other write ([`Node::commit`]).
//!
//! Boundary: a weight only re-orders memories the gate already admitted; it
//! never makes an invisible memory visible, and it never reaches the gate.

use crate::error::UnknownKind;
use amos_protocol::{AgentId, FactBody, MemoryType, ProfileFact};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::store::org;
pub use crate::store::profile::{MAX_WEIGHT, ProfileWeights, parse_weight};

impl Node {
    /// The ranking profile of `agent`.
    pub fn profile_show(&self, agent: &str) -> Result<ProfileWeights> {
        let agent = self.known_agent(agent)?;
        self.store.read(|r| ProfileWeights::load(r, &agent))
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
            let mut map = ProfileWeights::load(tx, &agent)?.0;
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
        if !self.store.read(|r| org::agent_present(r, &agent))? {
            return Err(NodeError::unknown(UnknownKind::Agent, &agent));
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
