//! A stored ranking profile (`profiles` rows): an agent's weight per
//! memory type, as recall reads it, and the `TYPE=WEIGHT` syntax that sets
//! one.

use std::collections::BTreeMap;

use amos_protocol::{AgentId, MemoryType};
use rusqlite::OptionalExtension;
use serde::Serialize;

use crate::error::{NodeError, Result};

/// The largest weight a profile may give (the protocol's bound).
pub const MAX_WEIGHT: f32 = 10.0;

/// Weights by memory type; a type not named weighs 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileWeights(pub(crate) BTreeMap<String, f32>);

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

    /// Each memory type with a weight, and the weight.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f32)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether no type has a weight (every weight is 1).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The stored profile of `agent` (neutral when it has none). An
    /// unparsable stored value reads as neutral.
    pub fn load(conn: &(impl super::Readable + ?Sized), agent: &AgentId) -> Result<ProfileWeights> {
        let conn = super::sql(conn);
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
