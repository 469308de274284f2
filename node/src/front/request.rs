//! One parser for what the CLI and the MCP server both take as strings: a
//! new memory (`amos add`, the `memory_add` tool). Each front end fills an
//! [`AddRequest`] its own way (clap flags, JSON arguments); what the fields
//! mean and how a bad one is refused is written once, here.

use amos_protocol::{MemoryType, Scope};
use serde::Deserialize;

use crate::api::{NewMemory, parse_expiry};
use crate::error::{NodeError, Result};

/// A new memory as strings. As JSON (`memory_add`): `content`, `type`,
/// `share`, `tags`, `importance`, `pin`, `expires`; unknown fields are
/// refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    pub content: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub share: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub importance: Option<f32>,
    #[serde(default)]
    pub pin: bool,
    /// A duration from now (`30d`, `12h`) or an RFC 3339 time.
    pub expires: Option<String>,
}

impl AddRequest {
    /// The memory this asks for, at `now_ms`. A bad field is `BadInput`
    /// naming it as the front end calls it (`label("expires")` is
    /// `--expires` on the command line, `expires` in MCP).
    pub fn memory(self, now_ms: u64, label: impl Fn(&str) -> String) -> Result<NewMemory> {
        let mut new = NewMemory::new(self.content);
        if let Some(k) = self.kind {
            new.kind = MemoryType::parse(&k)?;
        }
        new.share = self
            .share
            .iter()
            .map(|s| s.parse::<Scope>().map_err(NodeError::from))
            .collect::<Result<_>>()?;
        new.tags = self.tags;
        if let Some(i) = self.importance {
            new.importance = i;
        }
        new.pinned = self.pin;
        new.expires_ms = self
            .expires
            .map(|e| {
                parse_expiry(&e, now_ms).map_err(|_| {
                    NodeError::BadInput(format!(
                        "malformed {} {e:?}: an expiry is a duration (30d, 12h) or an RFC 3339 time",
                        label("expires")
                    ))
                })
            })
            .transpose()?;
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_the_memory_and_bad_ones_name_themselves() {
        let r = AddRequest {
            content: "deploy on fridays".into(),
            kind: Some("procedure".into()),
            share: vec!["team:apollo".into()],
            tags: vec!["ops".into()],
            importance: Some(0.9),
            pin: true,
            expires: Some("1h".into()),
        };
        let m = r.memory(1_000, |f| format!("--{f}")).unwrap();
        assert_eq!(m.kind.as_str(), "procedure");
        assert_eq!(m.share.len(), 1);
        assert_eq!(m.expires_ms, Some(1_000 + 3_600_000));
        assert!(m.pinned);
        let bad = AddRequest {
            content: "x".into(),
            expires: Some("soon".into()),
            ..AddRequest::default()
        };
        let e = bad.memory(0, |f| format!("--{f}")).unwrap_err().to_string();
        assert!(e.contains("--expires \"soon\""), "{e}");
        let bad = AddRequest {
            content: "x".into(),
            share: vec!["teem:x".into()],
            ..AddRequest::default()
        };
        assert_eq!(bad.memory(0, str::to_owned).unwrap_err().exit_code(), 2);
    }
}
