//! A memory's links as a requester sees them (the console's memory page):
//! only links whose other end passes the read gate for that requester.
//!
//! Must never: name, count or hint at a link whose other end the requester
//! cannot see — such a link is left out as if it did not exist.

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;

use crate::api::node::Node;
use crate::error::Result;
use crate::store::links;
use crate::store::memory::MemoryRecord;

/// Links read for one memory at most (strongest first).
pub const MAX_LINKS: usize = 200;

/// One link of a memory, seen from that memory.
pub struct LinkView {
    /// True when the link goes from the memory to `other`.
    pub outgoing: bool,
    /// The link's relation.
    pub relation: String,
    /// Its signed weight.
    pub weight: f32,
    /// The memory at the other end, which the requester may see.
    pub other: Visible<MemoryRecord>,
}

impl Node {
    /// The links of memory `id` (which `who` must see: missing and
    /// invisible are the same error) whose other end `who` sees too.
    pub fn links(&self, who: &AuthorizedScopes, id: &str) -> Result<Vec<LinkView>> {
        let me = self.get(who, id)?.id;
        self.visible_links(who, me)
    }

    /// The links of `me` (a memory the caller passed through the gate for
    /// `who`) whose other end `who` sees; no read is audited.
    pub(crate) fn visible_links(
        &self,
        who: &AuthorizedScopes,
        me: MemoryId,
    ) -> Result<Vec<LinkView>> {
        let rows = self.store().read(|r| links::touching(r, &me, MAX_LINKS))?;
        let others: Vec<MemoryId> = rows
            .iter()
            .map(|r| if r.from == me { r.to } else { r.from })
            .collect();
        let visible = self.store().visible(who, &others, self.now_ms())?;
        let by_id: std::collections::HashMap<MemoryId, Visible<MemoryRecord>> =
            visible.into_iter().map(|v| (v.id, v)).collect();
        let mut out = Vec::new();
        for r in rows {
            let outgoing = r.from == me;
            let other_id = if outgoing { r.to } else { r.from };
            let Some(other) = by_id.get(&other_id) else {
                continue;
            };
            out.push(LinkView {
                outgoing,
                relation: r.relation,
                weight: r.weight,
                other: other.clone(),
            });
        }
        Ok(out)
    }
}
