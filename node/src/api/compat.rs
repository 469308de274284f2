//! The node API for versioned sessions (docs/design.md §13): recording the
//! protocol version and features a peer spoke, and the count of facts held
//! back for it because it lacks a feature they need — so that they are
//! counted (`amos peers list`, the metrics) and sent once it has it.
//!
//! Must never: decide what a peer decodes (`amos_protocol::wire::Features`)
//! or when a session sends what (`net::session`).

use amos_protocol::NodeId;
use amos_protocol::wire::Features;

use crate::api::node::Node;
use crate::error::Result;
use crate::store::peers;

impl Node {
    /// Record the protocol version and features `peer` spoke in a session
    /// (`amos peers list`).
    pub fn peer_record_protocol(
        &mut self,
        peer: &NodeId,
        version: u16,
        features: Features,
    ) -> Result<()> {
        // Unchanged (every session but the first and an upgrade's): no write.
        if self.store.read(|r| peers::protocol(r, peer))? == Some((version, features.0)) {
            return Ok(());
        }
        self.store
            .write(|tx| peers::record_protocol(tx, peer, version, features.0))
    }

    /// How many facts are held back for `peer`, and the features they need.
    pub fn peer_held_back(&self, peer: &NodeId) -> Result<(u64, Features)> {
        let (n, f) = self.store.read(|r| peers::held_back(r, peer))?;
        Ok((n, Features(f)))
    }

    /// Set what is held back for `peer` (unchanged: no write).
    pub fn peer_set_held_back(&mut self, peer: &NodeId, count: u64, needs: Features) -> Result<()> {
        if self.peer_held_back(peer)? == (count, needs) {
            return Ok(());
        }
        self.store
            .write(|tx| peers::set_held_back(tx, peer, count, needs.0))
    }
}
