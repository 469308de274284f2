//! The node API: every operation on a node (`impl Node`), grouped by
//! concern — the node itself and its gated reads ([`node`]), memory writes
//! ([`memories`]), the org graph ([`org`]), the signing pipeline of local
//! writes ([`signing`]), text
//! editing and history ([`edits`]), recall ([`recall`]), the timeline
//! ([`time`]), what changed for an agent since a time ([`changes`]),
//! parked working contexts ([`context`]), the console's dashboard figures
//! ([`dashboard`]), why a memory is believed and its neighbourhood
//! ([`provenance`]), profiles
//! ([`profile`]), peers and replication ([`peers`]), range-based repair ([`repair`]),
//! versioned sessions ([`compat`]), pairing
//! ([`pairing`]), bundles ([`bundles`]), mailboxes ([`mailbox`]), maintenance ([`maintenance`]), agent tokens ([`tokens`]), the gates kept for the next requests ([`gates`]) and
//! moving memories in and out ([`import`]: importers, per-agent export and
//! erasure).
//! The CLI, the MCP server and the mesh all call these; none re-implements
//! one.
//!
//! Boundary: SQL lives in `crate::store`; the rules (visibility, merge,
//! gate) in `amos-acl` and `amos-sync`. Nothing here opens a socket.

pub(crate) mod bundles;
pub(crate) mod changes;
pub(crate) mod compat;
pub(crate) mod context;
pub(crate) mod dashboard;
pub(crate) mod edits;
pub(crate) mod gates;
pub mod import;
pub(crate) mod links;
pub(crate) mod mailbox;
pub(crate) mod maintenance;
pub(crate) mod memories;
pub(crate) mod node;
pub(crate) mod org;
pub(crate) mod pairing;
pub(crate) mod peers;
pub(crate) mod profile;
pub(crate) mod provenance;
pub(crate) mod reads;
pub(crate) mod recall;
pub(crate) mod repair;
pub(crate) mod scopes;
pub(crate) mod signing;
pub(crate) mod time;
pub(crate) mod tokens;

pub use crate::clock::{parse_expiry, parse_time};
pub use bundles::{ExportReport, ImportReport, Sealing};
pub use changes::{Change, ChangeKind, Changes};
pub use context::{
    CONTEXT_DEFAULT_TTL_MS, CONTEXT_MAX_BYTES, CONTEXT_MAX_TTL_MS, CONTEXT_NAME_MAX, CONTEXT_TYPE,
    ContextSummary, ParkedContext, check_context_name,
};
pub use dashboard::{DASHBOARD_DAYS, Dashboard, DayActivity, NodeHealth, PeerHealth, Recalled};
pub use edits::{DEFAULT_COMPACT_BYTES, HistoryLine};
pub use links::LinkView;
pub use mailbox::{
    MAILBOX_MAX_ROWS, MailboxOutcome, MailboxPlace, mailbox_failed, mailbox_line, mailbox_places,
};
pub use maintenance::{
    BackupReport, CheckReport, DanglingLink, EncoderCatchUpReport, HygieneAction, HygieneReport,
    RebuildReport, RetentionPolicy, Status,
};
pub use memories::{Added, NewMemory, Similar};
pub use node::{EncoderStatus, InitReport, Node};
pub use pairing::{Invite, JoinReport, JoinRoute, MeshKeyOutcome, Welcome, join_offline};
pub use peers::{RETRY_EVERY, RetryReport, SET_DIGEST_SINCE};
pub use profile::{ProfileWeights, parse_weight};
pub use provenance::{
    EdgeKind, GRAPH_DEFAULT_DEPTH, GRAPH_MAX_DEPTH, GRAPH_MAX_NODES, GraphEdge, GraphNode,
    Neighbourhood, Provenance, SignatureCheck,
};
pub use reads::ReadAuditConfig;
pub use recall::VectorProbe;
pub use repair::{RepairPlan, RepairReason};
pub use scopes::Unheld;
pub use time::{TIMELINE_MAX, TimelineEntry, TimelineEvent};
pub use tokens::{Authenticated, NewToken, TokenInfo};
