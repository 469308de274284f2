//! amos-sync: how facts converge between nodes.
//!
//! Will own the merge rules (last-writer-wins per register, terminal
//! tombstones, fixed-field checks), export selection and the sans-IO sync
//! session, talking to storage through a trait that `amos-node` implements
//! over SQLite and tests implement in memory. Nothing here yet: a single node
//! writes only its own facts, each with a fresh clock, so no merge decision
//! arises until replication lands (issue: replication core).
//!
//! Boundary: no SQL, no sockets, no clocks; the dependency direction is
//! `amos-protocol` ← `amos-acl` ← `amos-sync` ← `amos-node`.
