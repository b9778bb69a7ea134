"""The first schema: sessions and their stream, output contracts, memories, the supervisor's columns (migrations 0001-0006)."""

import logging

log = logging.getLogger(__name__)

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_engine",
        """
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            session_id TEXT UNIQUE,                 -- the CLI's session id (NULL if the stream had none)
            tier INTEGER,
            model TEXT,
            prompt TEXT,
            cwd TEXT,
            trigger TEXT NOT NULL DEFAULT 'ingest', -- ingest | schedule | manual | escalation
            status TEXT NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
            status_reason TEXT,
            degraded INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            duration_ms INTEGER,
            duration_api_ms INTEGER,
            cost_usd REAL,
            input_tokens INTEGER,
            output_tokens INTEGER,
            cache_read_tokens INTEGER,
            cache_creation_tokens INTEGER,
            num_turns INTEGER,
            result_subtype TEXT,
            is_error INTEGER,
            api_error_status INTEGER,
            stop_reason TEXT,
            terminal_reason TEXT,
            result_text TEXT,
            result_errors TEXT,                     -- JSON array from the result line
            permission_denials TEXT,                -- JSON array
            model_usage TEXT,                       -- JSON object
            cli_model TEXT,                         -- model reported by system/init
            cli_version TEXT,
            parent_session_id INTEGER REFERENCES sessions(id),
            escalated_to INTEGER REFERENCES sessions(id),
            source TEXT CHECK (source IN ('structured_output', 'markers', 'handoff', 'none')),
            validation_valid INTEGER,
            validation_errors TEXT,                 -- JSON [{path, message}]
            structured_output TEXT,                 -- accepted output, JSON
            invalid_output TEXT,                    -- the rejected output, kept verbatim
            attempts INTEGER NOT NULL DEFAULT 1,
            summary TEXT,
            escalation_needed INTEGER,
            escalation_reason TEXT,
            escalation_context TEXT,
            escalation_failed_checks TEXT,          -- JSON array
            handoff_raw TEXT,
            notes TEXT,                             -- problems met while routing, JSON array
            stderr_tail TEXT,
            stream_sha256 TEXT,
            line_count INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX sessions_started ON sessions (started_at DESC);
        CREATE INDEX sessions_status ON sessions (status);
        CREATE INDEX sessions_sha ON sessions (stream_sha256);

        CREATE TABLE activity (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            ts TEXT NOT NULL,
            type TEXT NOT NULL,
            subtype TEXT,
            display TEXT NOT NULL,
            raw TEXT NOT NULL,
            UNIQUE (session_pk, seq)
        );

        CREATE TABLE output_attempts (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL,
            kind TEXT NOT NULL,                     -- stream | resume
            result_subtype TEXT,
            is_error INTEGER,
            has_output INTEGER NOT NULL,
            output TEXT,                            -- structured_output as received, JSON
            valid INTEGER,
            errors TEXT,                            -- JSON [{path, message}]
            created_at TEXT NOT NULL,
            UNIQUE (session_pk, attempt)
        );

        CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            level TEXT NOT NULL CHECK (level IN ('info', 'warning', 'critical')),
            original_level TEXT,
            service TEXT,
            message TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX events_session ON events (session_pk);
        CREATE INDEX events_level ON events (level, id DESC);
        CREATE INDEX events_service ON events (service, id DESC);

        CREATE TABLE memories (
            id INTEGER PRIMARY KEY,
            service TEXT,
            category TEXT NOT NULL,
            value TEXT NOT NULL,
            confidence REAL NOT NULL,
            active INTEGER NOT NULL DEFAULT 1,
            times_seen INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            created_by_session INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            reinforced_by_session INTEGER REFERENCES sessions(id) ON DELETE SET NULL
        );
        CREATE UNIQUE INDEX memories_identity ON memories (coalesce(service, ''), category, value);

        CREATE TABLE check_results (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            detail TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX check_results_session ON check_results (session_pk);
        CREATE INDEX check_results_name ON check_results (name, id DESC);

        CREATE TABLE cooldowns (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            action TEXT NOT NULL,
            service TEXT NOT NULL,
            outcome TEXT NOT NULL,
            note TEXT,
            created_at TEXT NOT NULL
        )
        """,
    ),
    (
        "0002_supervisor",
        """
        ALTER TABLE sessions ADD COLUMN chain_id INTEGER REFERENCES sessions(id);
        ALTER TABLE sessions ADD COLUMN attention TEXT;      -- why a human must look (escalation not acted on)
        ALTER TABLE sessions ADD COLUMN argv TEXT;           -- JSON: the command line of the first attempt
        ALTER TABLE sessions ADD COLUMN system_prompt TEXT;  -- the --append-system-prompt text given
        CREATE INDEX sessions_chain ON sessions (chain_id)
        """,
    ),
    (
        "0003_cli_process",
        """
        -- The running CLI (the CLI runs in a process group of its own): pid, process group (its own, setsid) and
        -- psutil create_time(), so a later sweep kills it only if it is the same process.
        ALTER TABLE sessions ADD COLUMN cli_pid INTEGER;
        ALTER TABLE sessions ADD COLUMN cli_pgid INTEGER;
        ALTER TABLE sessions ADD COLUMN cli_start_time REAL
        """,
    ),
    (
        "0004_retention",
        """
        -- Retention: events outlive the sessions that raised them. The events table is
        -- rebuilt (SQLite cannot alter a foreign key) with session_pk nullable and ON DELETE SET
        -- NULL instead of CASCADE, keeping every row and its id.
        CREATE TABLE events_new (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,  -- NULL once pruned
            level TEXT NOT NULL CHECK (level IN ('info', 'warning', 'critical')),
            original_level TEXT,
            service TEXT,
            message TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        INSERT INTO events_new (id, session_pk, level, original_level, service, message, source, created_at)
            SELECT id, session_pk, level, original_level, service, message, source, created_at FROM events;
        DROP TABLE events;
        ALTER TABLE events_new RENAME TO events;
        CREATE INDEX events_session ON events (session_pk);
        CREATE INDEX events_level ON events (level, id DESC);
        CREATE INDEX events_service ON events (service, id DESC);
        -- Deleting a session makes SQLite look up every row that references it. Without these
        -- indexes each lookup scans the whole table (sessions by parent and escalation, cooldowns,
        -- memories by provenance), and a prune of thousands of sessions crawls.
        CREATE INDEX sessions_parent ON sessions (parent_session_id);
        CREATE INDEX sessions_escalated ON sessions (escalated_to);
        CREATE INDEX cooldowns_session ON cooldowns (session_pk);
        CREATE INDEX memories_created_by ON memories (created_by_session);
        CREATE INDEX memories_reinforced_by ON memories (reinforced_by_session)
        """,
    ),
    (
        "0005_output_contracts",
        """
        -- Output contracts: a registry of named, immutable JSON Schemas, and what each
        -- session was asked for. A session keeps its exact schema even after the name is deleted.
        CREATE TABLE schemas (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            description TEXT,
            body TEXT NOT NULL,                     -- the schema, canonical JSON (sorted keys, no spaces)
            sha256 TEXT NOT NULL,                   -- of body
            created_at TEXT NOT NULL
        );
        ALTER TABLE sessions ADD COLUMN schema_source TEXT;   -- inline | named | default (NULL: none)
        ALTER TABLE sessions ADD COLUMN schema_name TEXT;     -- the registry name, when named
        ALTER TABLE sessions ADD COLUMN schema_sha256 TEXT;   -- of the canonical schema it ran with
        ALTER TABLE sessions ADD COLUMN output_schema TEXT;   -- that schema, canonical JSON
        ALTER TABLE sessions ADD COLUMN output_mode TEXT;     -- native | prompted
        ALTER TABLE sessions ADD COLUMN output_via TEXT;      -- tool | extracted | prompted: how valid output came
        -- Every attempt counts: the CLI's own rejections of a StructuredOutput call
        -- too: attempt is now the attempt's number in the session, run the CLI run it happened in
        -- (activity.attempt), where before the two were the same. origin: tool | cli_rejected |
        -- extracted | prompted.
        ALTER TABLE output_attempts ADD COLUMN run INTEGER;
        UPDATE output_attempts SET run = attempt;
        ALTER TABLE output_attempts ADD COLUMN origin TEXT
        """,
    ),
    (
        "0006_memory_lifecycle",
        """
        -- Memory lifecycle (app/store/memories.py). last_seen_at: when a session last
        -- taught or repeated the memory (or an operator renewed it), where its decay starts.
        -- Existing memories start from their last update.
        ALTER TABLE memories ADD COLUMN last_seen_at TEXT;
        UPDATE memories SET last_seen_at = updated_at;
        -- stale: its decayed confidence fell below TIEROPS_MEMORY_FLOOR, so it is not given to
        -- the tiers until it is seen again.
        ALTER TABLE memories ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;
        -- replaced_by: the memory that contradicted this one (same service and category, another
        -- value) and deactivated it.
        ALTER TABLE memories ADD COLUMN replaced_by INTEGER REFERENCES memories(id) ON DELETE SET NULL;
        -- Deleting a memory looks up the rows it replaced: without this index, a scan per delete.
        CREATE INDEX memories_replaced_by ON memories (replaced_by)
        """,
    ),
]
