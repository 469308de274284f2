//! amos-tests' integration tests, one binary: the replica contract's
//! properties on both stores (`convergence`, `escalation`, `text_merge`),
//! same-name scopes made concurrently (`same_name`) and the real-store
//! guarantees (`real_store`).

mod convergence;
mod escalation;
mod layers;
mod real_store;
mod same_name;
mod text_merge;
