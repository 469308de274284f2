//! Versioned, one-way schema migrations. `PRAGMA user_version` holds the
//! version; a database newer than this binary is refused, never downgraded.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{NodeError, Result};

/// Each entry moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // v1: the replicated registers, their clocks (`*_v`, as Hlc sort keys),
    // the signed facts verbatim, and local-only columns.
    r#"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value ANY NOT NULL
    ) STRICT;

    CREATE TABLE memories (
        id            BLOB PRIMARY KEY,       -- 16-byte UUIDv7
        owner         TEXT NOT NULL,          -- fixed
        origin        BLOB NOT NULL,          -- fixed: NodeId of the creating node
        created_ms    INTEGER NOT NULL,       -- fixed
        -- content register (clock v)
        kind          TEXT,
        content       TEXT,
        tags          TEXT,                   -- JSON array
        importance    REAL,
        confidence    REAL,
        pinned        INTEGER,
        expires_ms    INTEGER,
        supersedes    BLOB,
        v             BLOB,
        content_fact  BLOB,
        -- acl register (clock acl_v)
        grants        TEXT NOT NULL DEFAULT '',   -- signed grants, comma-joined, '' = private
        effective     TEXT NOT NULL DEFAULT '',   -- grants in force on this node
        acl_v         BLOB,
        acl_fact      BLOB,
        -- terminal tombstone
        tombstone_fact BLOB,
        -- bookkeeping: seq moves when a replicated fact changes (sync),
        -- touched when anything the index needs changes.
        seq           INTEGER NOT NULL,
        touched       INTEGER NOT NULL,
        -- local-only state: never replicated, never moves v or acl_v
        archived      INTEGER NOT NULL DEFAULT 0,
        recall_count  INTEGER NOT NULL DEFAULT 0,
        last_access_ms INTEGER,
        reinforcement REAL NOT NULL DEFAULT 1.0
    ) STRICT;
    CREATE INDEX memories_seq ON memories(seq);
    CREATE INDEX memories_touched ON memories(touched);
    CREATE INDEX memories_owner_created ON memories(owner, created_ms);
    CREATE INDEX memories_created ON memories(created_ms);

    -- effective grants, one row each, for gated listing in SQL
    CREATE TABLE memory_grants (
        memory BLOB NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
        scope  TEXT NOT NULL,
        PRIMARY KEY (scope, memory)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX memory_grants_memory ON memory_grants(memory);

    CREATE TABLE links (
        from_id   BLOB NOT NULL,
        to_id     BLOB NOT NULL,
        relation  TEXT NOT NULL,
        weight    REAL NOT NULL,
        present   INTEGER NOT NULL,
        v         BLOB NOT NULL,
        fact      BLOB NOT NULL,
        seq       INTEGER NOT NULL,
        strength  REAL NOT NULL DEFAULT 1.0,   -- local-only reinforcement
        PRIMARY KEY (from_id, to_id, relation)
    ) STRICT;
    CREATE INDEX links_to ON links(to_id);
    CREATE INDEX links_seq ON links(seq);

    CREATE TABLE teams (
        id       TEXT PRIMARY KEY,
        name     TEXT NOT NULL,
        present  INTEGER NOT NULL,
        v        BLOB NOT NULL,
        fact     BLOB NOT NULL,
        seq      INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE projects (
        id       TEXT PRIMARY KEY,
        team     TEXT NOT NULL,
        name     TEXT NOT NULL,
        present  INTEGER NOT NULL,
        v        BLOB NOT NULL,
        fact     BLOB NOT NULL,
        seq      INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE memberships (
        scope    TEXT NOT NULL,     -- team:ID or project:ID
        agent    TEXT NOT NULL,
        role     TEXT NOT NULL,
        present  INTEGER NOT NULL,
        v        BLOB NOT NULL,
        fact     BLOB NOT NULL,
        seq      INTEGER NOT NULL,
        PRIMARY KEY (scope, agent)
    ) STRICT;
    CREATE INDEX memberships_agent ON memberships(agent);

    CREATE TABLE agents (
        id           TEXT PRIMARY KEY,
        kind         TEXT NOT NULL,
        display_name TEXT NOT NULL,
        present      INTEGER NOT NULL,
        v            BLOB NOT NULL,
        fact         BLOB NOT NULL,
        seq          INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE profiles (
        agent    TEXT PRIMARY KEY,
        weights  TEXT NOT NULL,     -- JSON object type -> weight
        v        BLOB NOT NULL,
        fact     BLOB NOT NULL,
        seq      INTEGER NOT NULL
    ) STRICT;
    "#,
    // v2: replication — peers and watermarks, the audit log of refused facts,
    // deferred (quarantined) facts, and per-memory provenance: whether the
    // owner rule holds here, and every grant the memory ever had here (so a
    // revocation reaches every peer that received it).
    r#"
    ALTER TABLE memories ADD COLUMN owner_trusted INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE memories ADD COLUMN grants_ever TEXT NOT NULL DEFAULT '';
    UPDATE memories SET grants_ever = effective;

    CREATE TABLE peers (
        node_id      BLOB PRIMARY KEY,
        name         TEXT NOT NULL DEFAULT '',
        addr         TEXT,
        policy       TEXT NOT NULL,
        added_ms     INTEGER NOT NULL,
        last_sync_ms INTEGER,
        last_result  TEXT,
        their_epoch  TEXT,                         -- watermark: their log epoch …
        their_seq    INTEGER NOT NULL DEFAULT 0,   -- … and the highest seq of theirs applied
        policy_seq   INTEGER NOT NULL DEFAULT 0,   -- our seq when we last changed its policy
        successor    BLOB                          -- key rotation: the identity this one moved to
    ) STRICT;

    CREATE TABLE audit (
        id        INTEGER PRIMARY KEY,
        time_ms   INTEGER NOT NULL,
        peer      BLOB NOT NULL,
        author    BLOB NOT NULL,
        register  TEXT NOT NULL,
        reason    TEXT NOT NULL,
        fact      BLOB NOT NULL,
        hash      BLOB NOT NULL,                -- blake3 of the fact: one entry per peer and fact
        UNIQUE (peer, hash)
    ) STRICT;

    CREATE TABLE deferred (
        hash      BLOB PRIMARY KEY,
        fact      BLOB NOT NULL,
        peer      BLOB NOT NULL,
        reason    TEXT NOT NULL,
        ahead_ms  INTEGER,
        since_ms  INTEGER NOT NULL
    ) STRICT;
    "#,
    // v3: pairing — one-time invites. The secret itself is never stored, only
    // the key proofs are checked with (protocol::pairing::proof_key).
    r#"
    CREATE TABLE invites (
        id          BLOB PRIMARY KEY,           -- pairing::invite_id(secret)
        proof_key   BLOB NOT NULL,
        team        TEXT NOT NULL,
        policy      TEXT NOT NULL,
        created_ms  INTEGER NOT NULL,
        expires_ms  INTEGER NOT NULL,
        used_ms     INTEGER,
        used_by     BLOB
    ) STRICT;
    -- A joiner's offline pairing proof for its inviter (invite id || proof),
    -- carried in its bundles to that peer until the inviter is heard from.
    ALTER TABLE peers ADD COLUMN join_proof BLOB;
    "#,
    // v4: recall — find pinned (core) memories for context packs without a
    // scan, and local-only associations between memories recalled together
    // (Hebbian; never replicated, never a fact). Link `strength`,
    // `reinforcement` and `last_access_ms` exist since v1.
    r#"
    CREATE INDEX memories_pinned ON memories(created_ms) WHERE pinned = 1;

    CREATE TABLE associations (
        a        BLOB NOT NULL,     -- the smaller memory id of the pair
        b        BLOB NOT NULL,
        strength REAL NOT NULL,
        PRIMARY KEY (a, b)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX associations_b ON associations(b);
    "#,
    // v5: edited text (docs/design.md §4, `amos_sync::text`). An edited memory's
    // text is an automerge document made of the facts in `memory_text`: its
    // base (plain text), its snapshot and its edits, each a signed content
    // fact kept and relayed even when it lost the content register by clock.
    // `text_doc` caches the saved document (local, rebuildable).
    r#"
    CREATE TABLE memory_text (
        memory  BLOB NOT NULL,
        key     BLOB NOT NULL,     -- 'base', 'snapshot' or an edit's 32-byte change id
        v       BLOB NOT NULL,     -- the fact's clock (sort key)
        fact    BLOB,              -- the signed fact; NULL once the snapshot covers it
        seq     INTEGER NOT NULL,
        PRIMARY KEY (memory, key)
    ) STRICT, WITHOUT ROWID;
    ALTER TABLE memories ADD COLUMN edited INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE memories ADD COLUMN text_doc BLOB;
    "#,
    // v6: local-only recall latency (recall::latency): samples per kind and
    // bucket, recorded by whichever process searches, read by /metrics.
    // Never replicated, never a fact.
    r#"
    CREATE TABLE recall_latency (
        kind    TEXT NOT NULL,       -- search | pack
        bucket  INTEGER NOT NULL,    -- upper bound in microseconds; 9223372036854775807 = +Inf
        count   INTEGER NOT NULL,
        sum_us  INTEGER NOT NULL,    -- total microseconds of the samples counted here
        PRIMARY KEY (kind, bucket)
    ) STRICT, WITHOUT ROWID;
    "#,
    // v7: trust by construction. Teams and projects carry the node that
    // created them (`origin`, a fixed field of their facts: only it, or its
    // full peers, may author their records and memberships), and every
    // audit entry its refusal's stable code (`amos_sync::Refusal::code`).
    // Org facts written before v7 have no origin and no longer decode: they
    // are dropped here, and the origin re-sends them (see the upgrade note
    // in docs).
    r#"
    ALTER TABLE teams ADD COLUMN origin BLOB;
    ALTER TABLE projects ADD COLUMN origin BLOB;
    DELETE FROM memberships;
    DELETE FROM projects;
    DELETE FROM teams;
    ALTER TABLE audit ADD COLUMN code TEXT NOT NULL DEFAULT 'other';
    CREATE INDEX audit_code ON audit(code);
    ALTER TABLE deferred ADD COLUMN code TEXT NOT NULL DEFAULT 'other';
    "#,
    // v8: valid time (docs/design.md §12). A content fact's validity, and
    // the replaced memory's superseders found by index. Rows written before
    // v8 had no validity to keep: both columns start empty (open), which is
    // what their facts say.
    r#"
    ALTER TABLE memories ADD COLUMN valid_from_ms INTEGER;
    ALTER TABLE memories ADD COLUMN valid_to_ms INTEGER;
    CREATE INDEX memories_supersedes ON memories(supersedes) WHERE supersedes IS NOT NULL;
    "#,
    // v9: the read audit (store/reads.rs): local-only, never a fact, never in
    // the digest.
    r#"
    CREATE TABLE read_audit (
        id      INTEGER PRIMARY KEY,
        time_ms INTEGER NOT NULL,
        agent   TEXT NOT NULL,
        memory  BLOB NOT NULL,
        front   TEXT NOT NULL,      -- cli | mcp | ...
        via     TEXT NOT NULL       -- get | list | search | pack | timeline
    ) STRICT;
    CREATE INDEX read_audit_time ON read_audit(time_ms);
    CREATE INDEX read_audit_memory ON read_audit(memory, time_ms);
    CREATE INDEX read_audit_agent ON read_audit(agent, time_ms);
    "#,
    // v10: whether the scoped digests agree (docs/design.md §7): the last
    // comparison of a peer's session digest with ours over the same scopes
    // (1 agree, 0 disagree, NULL never compared), when, over which scopes
    // (the policy the peer gives us, as it named it) and both fact counts.
    r#"
    ALTER TABLE peers ADD COLUMN digest_agree INTEGER;
    ALTER TABLE peers ADD COLUMN digest_ms INTEGER;
    ALTER TABLE peers ADD COLUMN digest_scopes TEXT;
    ALTER TABLE peers ADD COLUMN digest_peer_facts INTEGER;
    ALTER TABLE peers ADD COLUMN digest_my_facts INTEGER;
    "#,
    // v11: the figures of the last session with a peer that completed,
    // whichever process ran it (`amos serve`, `amos sync`, the console):
    // when it ended, its duration, facts and frame bytes each way. NULL:
    // none completed since v11.
    r#"
    ALTER TABLE peers ADD COLUMN session_at_ms INTEGER;
    ALTER TABLE peers ADD COLUMN session_ms INTEGER;
    ALTER TABLE peers ADD COLUMN session_facts_in INTEGER;
    ALTER TABLE peers ADD COLUMN session_facts_out INTEGER;
    ALTER TABLE peers ADD COLUMN session_bytes_in INTEGER;
    ALTER TABLE peers ADD COLUMN session_bytes_out INTEGER;
    "#,
    // v12: local-only cache of scoped digests (every sync session computes
    // two): valid while the store's `seq` is the one it was computed at —
    // every change that can move what an export lets out takes a fresh
    // `seq` (docs/design.md §7.1). A later migration that rewrites
    // replicated rows must `DELETE FROM digest_cache`.
    r#"
    CREATE TABLE digest_cache (
        policy TEXT PRIMARY KEY,
        seq    INTEGER NOT NULL,
        digest BLOB NOT NULL,
        facts  INTEGER NOT NULL
    ) STRICT;
    "#,
    // v13: range-based repair (docs/design.md §7.9), per peer: the operator
    // asked for one (`amos sync now --repair`; cleared when one completes),
    // when the last completed, sessions since (periodic anti-entropy), and
    // when the digests began to disagree (NULL while they agree): one
    // repair per disagreement, not one per session; and whether the last
    // repair tried never completed (the next session then does not repair:
    // the peer may not speak it).
    r#"
    ALTER TABLE peers ADD COLUMN disagree_since_ms INTEGER;
    ALTER TABLE peers ADD COLUMN repair_tried INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE peers ADD COLUMN repair_asked INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE peers ADD COLUMN repair_ms INTEGER;
    ALTER TABLE peers ADD COLUMN sessions_since_repair INTEGER NOT NULL DEFAULT 0;
    "#,
    // v14: echo ranges (docs/design.md §7.1), local-only: per peer and
    // epoch of its log, the runs of our `seq`s that batches applied from
    // it took whose rows hold only facts it has (its own, or ones it sent);
    // an export to it reads only the gaps between them.
    r#"
    CREATE TABLE echo_ranges (
        peer      BLOB NOT NULL,
        epoch     TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq  INTEGER NOT NULL,
        PRIMARY KEY (peer, first_seq)
    ) STRICT;
    "#,
    // v(n): what each peer's last session negotiated (docs/design.md §13):
    // its protocol version and the features it decodes, and how many facts
    // are held back for it (and the features they need), sent once it has them.
    r#"
    ALTER TABLE peers ADD COLUMN protocol INTEGER;
    ALTER TABLE peers ADD COLUMN features INTEGER;
    ALTER TABLE peers ADD COLUMN held_back INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE peers ADD COLUMN held_features INTEGER NOT NULL DEFAULT 0;
    "#,
    // v(n): the running session digests (docs/design.md §7.3, store::digest):
    // per policy a session asked for, the sum of its facts' hashes and their
    // number, kept by every write transaction.
    r#"
    CREATE TABLE digest_running (
        policy TEXT PRIMARY KEY,
        sum    BLOB NOT NULL,
        facts  INTEGER NOT NULL
    ) STRICT;
    "#,
    // v(n): the grant history (local-only, store::history, docs/design.md
    // §12.3): a memory's standing here before each change of it, and when
    // that standing ended; `changes_since` reads it.
    r#"
    CREATE TABLE grant_history (
        memory        BLOB NOT NULL,
        until_ms      INTEGER NOT NULL,
        effective     TEXT NOT NULL,
        owner_trusted INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX grant_history_memory ON grant_history(memory, until_ms);
    CREATE INDEX grant_history_until ON grant_history(until_ms);
    "#,
    // v(n): agent tokens (`amos agent token`, store::tokens), local-only:
    // never a fact, never replicated, never part of `seq`. A token's secret
    // is never stored: only its BLAKE3 hash, keyed by the public id.
    r#"
    CREATE TABLE IF NOT EXISTS agent_tokens (
        id         TEXT PRIMARY KEY,
        agent      TEXT NOT NULL,
        label      TEXT,
        hash       BLOB NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER,
        revoked_ms INTEGER
    ) STRICT;
    CREATE INDEX IF NOT EXISTS agent_tokens_agent ON agent_tokens(agent);
    "#,
    // v(n): the console dashboard's recalls per day (store/dashboard.rs),
    // local-only: recalls noted per memory and UTC day (days since the
    // epoch), kept 60 days; and the memories recalled at all, by count.
    // Touches nothing another migration writes.
    r#"
    CREATE TABLE recall_days (
        day     INTEGER NOT NULL,
        memory  BLOB NOT NULL,
        recalls INTEGER NOT NULL,
        PRIMARY KEY (day, memory)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX memories_recalled ON memories(recall_count) WHERE recall_count > 0;
    "#,
    // v(n): where a memory arrived from (store::provenance), local-only:
    // the peer whose applied batch first moved the row here (NULL: written
    // here, or not moved by a peer's batch since this was recorded). Never
    // a fact, never replicated, never in a digest, never moves `seq`.
    r#"
    ALTER TABLE memories ADD COLUMN arrived_from BLOB;
    "#,
    // v(n): mailboxes (docs/design.md §8.2): the directory a peer's sealed
    // bundles are exchanged through, and the watermark of our log its last
    // mailbox bundle acknowledged (where our next one starts).
    r#"
    ALTER TABLE peers ADD COLUMN mailbox TEXT;
    ALTER TABLE peers ADD COLUMN mailbox_ack_epoch TEXT;
    ALTER TABLE peers ADD COLUMN mailbox_ack_seq INTEGER NOT NULL DEFAULT 0;
    "#,
    // v(n): relay links (docs/design.md §7.11): whether a peer's link is a
    // relay link (either side may forward the other's connections), and the
    // relay a peer is reached through (`--via`), a registered peer's id.
    r#"
    ALTER TABLE peers ADD COLUMN relay INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE peers ADD COLUMN via BLOB;
    "#,
    // v(n): legacy scope clashes (store::clashes, docs/design.md §6.2),
    // local-only: a legacy team or project id another node created too.
    // A store from before this table found them only as refusals: each
    // `org_origin_conflict` refusal of a legacy id's record in the audit log
    // is one (its author taken as the other origin; `closed` if the peer
    // that sent it is a `full` peer now); `judged` 0 until the memories held
    // are re-judged for it, which opening the node does.
    r#"
    CREATE TABLE scope_clashes (
        scope    TEXT NOT NULL,
        theirs   BLOB NOT NULL,
        closed   INTEGER NOT NULL,
        first_ms INTEGER NOT NULL,
        judged   INTEGER NOT NULL,
        PRIMARY KEY (scope, theirs)
    ) STRICT;
    INSERT OR IGNORE INTO scope_clashes(scope, theirs, closed, first_ms, judged)
        SELECT register, author,
               MAX(COALESCE((SELECT p.policy = 'full' FROM peers p WHERE p.node_id = audit.peer), 0)),
               MIN(time_ms), 0
        FROM audit
        WHERE code = 'org_origin_conflict' AND instr(register, '@') = 0
          AND (register LIKE 'team:%' OR register LIKE 'project:%')
        GROUP BY register, author;
    "#,
    // v(n): figures kept on write (store::figures), local-only, never a
    // fact: the console dashboard's and `amos status`'s counts without a
    // scan. Memories are counted per standing — effective grants, owner
    // and owner rule, what the read gate decides by — and type
    // (`figure_kinds`), per standing and UTC creation day (`figure_days`),
    // and per state (`memory_tally`: live, archived, forgotten). Triggers
    // on `memories` keep them in the transaction that changes a row,
    // whichever path writes it (local writes, applied facts, bundle
    // imports, tombstones, re-judged standings). A memory with an expiry
    // is not in the first two (it leaves a count by time, not by a write;
    // the dashboard counts those live, by `memories_expiring`). The
    // recalls noted per standing and day (`figure_recalls`) follow
    // `recall_days` and the standing of the memory recalled. Filled here
    // from the rows held; idempotent.
    r#"
    CREATE TABLE IF NOT EXISTS figure_kinds (
        effective TEXT NOT NULL,
        owner     TEXT NOT NULL,
        trusted   INTEGER NOT NULL,
        kind      TEXT NOT NULL,
        n         INTEGER NOT NULL,
        PRIMARY KEY (effective, owner, trusted, kind)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS figure_days (
        day       INTEGER NOT NULL,     -- created_ms / 86400000
        effective TEXT NOT NULL,
        owner     TEXT NOT NULL,
        trusted   INTEGER NOT NULL,
        n         INTEGER NOT NULL,
        PRIMARY KEY (day, effective, owner, trusted)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS figure_recalls (
        day       INTEGER NOT NULL,     -- recall_days.day
        effective TEXT NOT NULL,
        owner     TEXT NOT NULL,
        trusted   INTEGER NOT NULL,
        n         INTEGER NOT NULL,
        PRIMARY KEY (day, effective, owner, trusted)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS recall_days_memory ON recall_days(memory, day);
    CREATE TABLE IF NOT EXISTS memory_tally (
        state TEXT PRIMARY KEY,         -- live | archived | forgotten
        n     INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS memories_expiring ON memories(expires_ms)
        WHERE expires_ms IS NOT NULL;

    DELETE FROM figure_kinds;
    INSERT INTO figure_kinds(effective, owner, trusted, kind, n)
        SELECT effective, owner, owner_trusted, COALESCE(kind, 'note'), COUNT(*) FROM memories
        WHERE content_fact IS NOT NULL AND tombstone_fact IS NULL AND expires_ms IS NULL
        GROUP BY 1, 2, 3, 4;
    DELETE FROM figure_days;
    INSERT INTO figure_days(day, effective, owner, trusted, n)
        SELECT created_ms / 86400000, effective, owner, owner_trusted, COUNT(*) FROM memories
        WHERE content_fact IS NOT NULL AND tombstone_fact IS NULL AND expires_ms IS NULL
        GROUP BY 1, 2, 3, 4;
    DELETE FROM figure_recalls;
    INSERT INTO figure_recalls(day, effective, owner, trusted, n)
        SELECT d.day, m.effective, m.owner, m.owner_trusted, SUM(d.recalls)
        FROM recall_days d JOIN memories m ON m.id = d.memory
        WHERE m.content_fact IS NOT NULL AND m.tombstone_fact IS NULL AND m.expires_ms IS NULL
        GROUP BY 1, 2, 3, 4;
    DELETE FROM memory_tally;
    INSERT INTO memory_tally(state, n) VALUES ('live', 0), ('archived', 0), ('forgotten', 0);
    UPDATE memory_tally SET n = (SELECT COUNT(*) FROM memories m WHERE
        CASE WHEN m.tombstone_fact IS NOT NULL THEN 'forgotten'
                 WHEN m.content_fact IS NULL THEN NULL
                 WHEN m.archived != 0 THEN 'archived' ELSE 'live' END = memory_tally.state);

    CREATE TRIGGER IF NOT EXISTS figures_insert AFTER INSERT ON memories
    WHEN new.content_fact IS NOT NULL AND new.tombstone_fact IS NULL AND new.expires_ms IS NULL
    BEGIN
        INSERT INTO figure_kinds(effective, owner, trusted, kind, n)
            VALUES (new.effective, new.owner, new.owner_trusted, COALESCE(new.kind, 'note'), 1)
            ON CONFLICT(effective, owner, trusted, kind) DO UPDATE SET n = n + 1;
        INSERT INTO figure_days(day, effective, owner, trusted, n)
            VALUES (new.created_ms / 86400000, new.effective, new.owner, new.owner_trusted, 1)
            ON CONFLICT(day, effective, owner, trusted) DO UPDATE SET n = n + 1;
        INSERT INTO figure_recalls(day, effective, owner, trusted, n)
            SELECT d.day, new.effective, new.owner, new.owner_trusted, d.recalls
            FROM recall_days d WHERE d.memory = new.id
            ON CONFLICT(day, effective, owner, trusted) DO UPDATE SET n = n + excluded.n;
    END;
    CREATE TRIGGER IF NOT EXISTS figures_delete AFTER DELETE ON memories
    WHEN old.content_fact IS NOT NULL AND old.tombstone_fact IS NULL AND old.expires_ms IS NULL
    BEGIN
        UPDATE figure_kinds SET n = n - 1 WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND kind = COALESCE(old.kind, 'note');
        DELETE FROM figure_kinds WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND kind = COALESCE(old.kind, 'note') AND n <= 0;
        UPDATE figure_days SET n = n - 1 WHERE day = old.created_ms / 86400000
            AND effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted;
        DELETE FROM figure_days WHERE day = old.created_ms / 86400000
            AND effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted
            AND n <= 0;
        UPDATE figure_recalls SET n = n - (SELECT d.recalls FROM recall_days d
                WHERE d.memory = old.id AND d.day = figure_recalls.day)
            WHERE effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted
              AND day IN (SELECT d.day FROM recall_days d WHERE d.memory = old.id);
        DELETE FROM figure_recalls WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND n <= 0;
    END;
    CREATE TRIGGER IF NOT EXISTS figures_update_out
    AFTER UPDATE OF content_fact, tombstone_fact, expires_ms, effective, owner, owner_trusted,
        kind, created_ms ON memories
    WHEN old.content_fact IS NOT NULL AND old.tombstone_fact IS NULL AND old.expires_ms IS NULL
        AND NOT (new.content_fact IS NOT NULL AND new.tombstone_fact IS NULL AND new.expires_ms IS NULL
            AND new.effective = old.effective
            AND new.owner = old.owner AND new.owner_trusted = old.owner_trusted
            AND COALESCE(new.kind, 'note') = COALESCE(old.kind, 'note')
            AND new.created_ms / 86400000 = old.created_ms / 86400000)
    BEGIN
        UPDATE figure_kinds SET n = n - 1 WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND kind = COALESCE(old.kind, 'note');
        DELETE FROM figure_kinds WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND kind = COALESCE(old.kind, 'note') AND n <= 0;
        UPDATE figure_days SET n = n - 1 WHERE day = old.created_ms / 86400000
            AND effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted;
        DELETE FROM figure_days WHERE day = old.created_ms / 86400000
            AND effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted
            AND n <= 0;
        UPDATE figure_recalls SET n = n - (SELECT d.recalls FROM recall_days d
                WHERE d.memory = old.id AND d.day = figure_recalls.day)
            WHERE effective = old.effective AND owner = old.owner AND trusted = old.owner_trusted
              AND day IN (SELECT d.day FROM recall_days d WHERE d.memory = old.id);
        DELETE FROM figure_recalls WHERE effective = old.effective AND owner = old.owner
            AND trusted = old.owner_trusted AND n <= 0;
    END;
    CREATE TRIGGER IF NOT EXISTS figures_update_in
    AFTER UPDATE OF content_fact, tombstone_fact, expires_ms, effective, owner, owner_trusted,
        kind, created_ms ON memories
    WHEN new.content_fact IS NOT NULL AND new.tombstone_fact IS NULL AND new.expires_ms IS NULL
        AND NOT (old.content_fact IS NOT NULL AND old.tombstone_fact IS NULL AND old.expires_ms IS NULL
            AND new.effective = old.effective
            AND new.owner = old.owner AND new.owner_trusted = old.owner_trusted
            AND COALESCE(new.kind, 'note') = COALESCE(old.kind, 'note')
            AND new.created_ms / 86400000 = old.created_ms / 86400000)
    BEGIN
        INSERT INTO figure_kinds(effective, owner, trusted, kind, n)
            VALUES (new.effective, new.owner, new.owner_trusted, COALESCE(new.kind, 'note'), 1)
            ON CONFLICT(effective, owner, trusted, kind) DO UPDATE SET n = n + 1;
        INSERT INTO figure_days(day, effective, owner, trusted, n)
            VALUES (new.created_ms / 86400000, new.effective, new.owner, new.owner_trusted, 1)
            ON CONFLICT(day, effective, owner, trusted) DO UPDATE SET n = n + 1;
        INSERT INTO figure_recalls(day, effective, owner, trusted, n)
            SELECT d.day, new.effective, new.owner, new.owner_trusted, d.recalls
            FROM recall_days d WHERE d.memory = new.id
            ON CONFLICT(day, effective, owner, trusted) DO UPDATE SET n = n + excluded.n;
    END;
    CREATE TRIGGER IF NOT EXISTS figure_recalls_insert AFTER INSERT ON recall_days
    BEGIN
        INSERT INTO figure_recalls(day, effective, owner, trusted, n)
            SELECT new.day, m.effective, m.owner, m.owner_trusted, new.recalls
            FROM memories m WHERE m.id = new.memory AND m.content_fact IS NOT NULL AND m.tombstone_fact IS NULL AND m.expires_ms IS NULL
            ON CONFLICT(day, effective, owner, trusted) DO UPDATE SET n = n + excluded.n;
    END;
    CREATE TRIGGER IF NOT EXISTS figure_recalls_update AFTER UPDATE OF recalls ON recall_days
    BEGIN
        UPDATE figure_recalls SET n = n + new.recalls - old.recalls
            WHERE day = new.day AND (effective, owner, trusted) IN
                (SELECT m.effective, m.owner, m.owner_trusted FROM memories m
                 WHERE m.id = new.memory AND m.content_fact IS NOT NULL AND m.tombstone_fact IS NULL AND m.expires_ms IS NULL);
    END;
    CREATE TRIGGER IF NOT EXISTS figure_recalls_delete AFTER DELETE ON recall_days
    BEGIN
        UPDATE figure_recalls SET n = n - old.recalls
            WHERE day = old.day AND (effective, owner, trusted) IN
                (SELECT m.effective, m.owner, m.owner_trusted FROM memories m
                 WHERE m.id = old.memory AND m.content_fact IS NOT NULL AND m.tombstone_fact IS NULL AND m.expires_ms IS NULL);
        DELETE FROM figure_recalls WHERE day = old.day AND n <= 0;
    END;
    CREATE TRIGGER IF NOT EXISTS tally_insert AFTER INSERT ON memories
    BEGIN
        UPDATE memory_tally SET n = n + 1 WHERE state =
            CASE WHEN new.tombstone_fact IS NOT NULL THEN 'forgotten'
                 WHEN new.content_fact IS NULL THEN NULL
                 WHEN new.archived != 0 THEN 'archived' ELSE 'live' END;
    END;
    CREATE TRIGGER IF NOT EXISTS tally_delete AFTER DELETE ON memories
    BEGIN
        UPDATE memory_tally SET n = n - 1 WHERE state =
            CASE WHEN old.tombstone_fact IS NOT NULL THEN 'forgotten'
                 WHEN old.content_fact IS NULL THEN NULL
                 WHEN old.archived != 0 THEN 'archived' ELSE 'live' END;
    END;
    CREATE TRIGGER IF NOT EXISTS tally_update
    AFTER UPDATE OF content_fact, tombstone_fact, archived ON memories
    WHEN (old.tombstone_fact IS NULL) != (new.tombstone_fact IS NULL)
        OR (old.content_fact IS NULL) != (new.content_fact IS NULL)
        OR old.archived != new.archived
    BEGIN
        UPDATE memory_tally SET n = n - 1 WHERE state =
            CASE WHEN old.tombstone_fact IS NOT NULL THEN 'forgotten'
                 WHEN old.content_fact IS NULL THEN NULL
                 WHEN old.archived != 0 THEN 'archived' ELSE 'live' END;
        UPDATE memory_tally SET n = n + 1 WHERE state =
            CASE WHEN new.tombstone_fact IS NOT NULL THEN 'forgotten'
                 WHEN new.content_fact IS NULL THEN NULL
                 WHEN new.archived != 0 THEN 'archived' ELSE 'live' END;
    END;
    "#,
    // v(n): indexes of ordered walks that stop after a page. Newest first
    // (`amos list`, the console's list) by created_ms then id: no sort is
    // left, so the planner no longer prefers a scan of every row and a sort
    // when a page selects wide rows (it replaces memories_created); the
    // order valid time starts (the timeline, store::memory::
    // visible_by_valid_start); the most recalled by count then id (it
    // replaces memories_recalled). Idempotent.
    r#"
    CREATE INDEX IF NOT EXISTS memories_created_id ON memories(created_ms, id);
    DROP INDEX IF EXISTS memories_created;
    CREATE INDEX IF NOT EXISTS memories_valid_start
        ON memories(COALESCE(valid_from_ms, created_ms), id);
    CREATE INDEX IF NOT EXISTS memories_recalled_id ON memories(recall_count, id)
        WHERE recall_count > 0;
    DROP INDEX IF EXISTS memories_recalled;
    "#,
    // v(n): the gate's stamp (store::org::gate_stamp), local-only: a random
    // value drawn afresh by every write, from any connection, to what a
    // requester's gate or a token's check reads (agents, teams, projects,
    // memberships, agent tokens), so a process may keep the gates it built
    // while the stamp is the one it built them under (api::gates).
    r#"
    CREATE TABLE IF NOT EXISTS gate_stamp (
        id    INTEGER PRIMARY KEY CHECK (id = 1),
        stamp INTEGER NOT NULL
    ) STRICT;
    INSERT OR IGNORE INTO gate_stamp(id, stamp) VALUES (1, random());
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agents_i AFTER INSERT ON agents
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agents_u AFTER UPDATE ON agents
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agents_d AFTER DELETE ON agents
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_teams_i AFTER INSERT ON teams
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_teams_u AFTER UPDATE ON teams
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_teams_d AFTER DELETE ON teams
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_projects_i AFTER INSERT ON projects
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_projects_u AFTER UPDATE ON projects
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_projects_d AFTER DELETE ON projects
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_memberships_i AFTER INSERT ON memberships
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_memberships_u AFTER UPDATE ON memberships
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_memberships_d AFTER DELETE ON memberships
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agent_tokens_i AFTER INSERT ON agent_tokens
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agent_tokens_u AFTER UPDATE ON agent_tokens
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    CREATE TRIGGER IF NOT EXISTS gate_stamp_agent_tokens_d AFTER DELETE ON agent_tokens
        BEGIN UPDATE gate_stamp SET stamp = random() WHERE id = 1; END;
    "#,
    // v(n): the kept figures (store::figures) are kept by the write
    // transaction, once per standing when it commits (figures::Keeper),
    // no longer by a trigger per memory row (about a second per 100,000
    // rows of a bulk sync). The tables, their fill and what they hold are
    // unchanged. Idempotent.
    r#"
    DROP TRIGGER IF EXISTS figures_insert;
    DROP TRIGGER IF EXISTS figures_delete;
    DROP TRIGGER IF EXISTS figures_update_out;
    DROP TRIGGER IF EXISTS figures_update_in;
    DROP TRIGGER IF EXISTS figure_recalls_insert;
    DROP TRIGGER IF EXISTS figure_recalls_update;
    DROP TRIGGER IF EXISTS figure_recalls_delete;
    DROP TRIGGER IF EXISTS tally_insert;
    DROP TRIGGER IF EXISTS tally_delete;
    DROP TRIGGER IF EXISTS tally_update;
    "#,
    // v(n): the timeline's walk in valid-time order merges two ordered
    // walks (store::memory::valid_start_sql): the memories without a signed
    // valid_from by memories_created_id, the others by a partial index,
    // which a write of a memory without one does not pay for (an index on
    // every row cost a bulk sync about a tenth of a second per 100,000).
    // Idempotent.
    r#"
    DROP INDEX IF EXISTS memories_valid_start;
    CREATE INDEX IF NOT EXISTS memories_valid_from ON memories(valid_from_ms, id)
        WHERE valid_from_ms IS NOT NULL;
    "#,
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The schema version just before the migration that creates `table`
/// (`None`: no migration creates it): where a test that drops the table
/// sets `user_version` to have that migration run again.
pub fn version_creating(table: &str) -> Option<u32> {
    let plain = format!("CREATE TABLE {table} (");
    let guarded = format!("CREATE TABLE IF NOT EXISTS {table} (");
    MIGRATIONS
        .iter()
        .position(|sql| sql.contains(&plain) || sql.contains(&guarded))
        .map(|i| i as u32)
}

/// Bring the database to [`SCHEMA_VERSION`]. Safe to call from many processes
/// at once: the check and the migration run under one write lock.
pub fn migrate(conn: &mut Connection) -> Result<u32> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current == SCHEMA_VERSION {
        return Ok(current);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Err(NodeError::Corrupt(format!(
            "database schema v{current} is newer than this amos (v{SCHEMA_VERSION}); upgrade amos"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
    }
    tx.commit()?;
    Ok(SCHEMA_VERSION)
}
