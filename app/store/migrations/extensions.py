"""Acting inside a session and what it is given: the guard, runbooks, MCP servers, evidence; chat
conversations; settings changed at run time; nodes and leases (migrations 0012-0018)."""

import logging

log = logging.getLogger(__name__)

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0012_guard",
        """
        -- What the PreToolUse guard may allow in a session, fixed when the session starts (JSON).
        ALTER TABLE sessions ADD COLUMN guard_policy TEXT;
        -- Every tool call the guard decided: allowed or denied, by which rule, and why.
        CREATE TABLE guard_decisions (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            tool_use_id TEXT,
            tool_name TEXT NOT NULL,
            command TEXT,                           -- a Bash command (cut), or the tool's input in short
            decision TEXT NOT NULL CHECK (decision IN ('allow', 'deny')),
            rule TEXT NOT NULL,                     -- which rule decided (dry-run, cooldown, tool-rules, ...)
            reason TEXT NOT NULL,
            mutating INTEGER NOT NULL DEFAULT 0,
            kind TEXT,                              -- the action kind counted against cooldowns, if any
            service TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX guard_decisions_session ON guard_decisions (session_pk, id);
        CREATE INDEX guard_decisions_denied ON guard_decisions (created_at) WHERE decision = 'deny'
        """,
    ),
    (
        "0013_runbooks",
        """
        -- The runbooks a session's system prompt quoted (or linked): from a file or a fetched URL.
        CREATE TABLE session_runbooks (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            source TEXT NOT NULL,                   -- runbooks folder | extension NAME | check NAME | alert NAME
            title TEXT,
            origin TEXT NOT NULL,                   -- the file as shown, or the URL (redacted)
            delivery TEXT NOT NULL CHECK (delivery IN ('file', 'fetched', 'linked')),
            chars_given INTEGER NOT NULL DEFAULT 0,
            chars_total INTEGER,                    -- NULL: linked, never read
            truncated INTEGER NOT NULL DEFAULT 0,
            error TEXT,                             -- why it is only linked
            incident_ids TEXT NOT NULL DEFAULT '[]' -- JSON array: the incidents it was matched for
        );
        CREATE INDEX session_runbooks_session ON session_runbooks (session_pk, id)
        """,
    ),
    (
        "0014_mcp",
        """
        -- The MCP servers of a session as the CLI's init line reported them: JSON [{name, status}]
        -- (status connected, failed, ...; the latest CLI run's list). NULL: no init line yet.
        ALTER TABLE sessions ADD COLUMN mcp_servers TEXT
        """,
    ),
    (
        "0015_evidence",
        """
        -- Whether a finding's cited tool output is really in its session's tool calls: the status
        -- (verified | unsupported | uncited; NULL: not checked) and the citations as checked, JSON
        -- [{quote, tool_use_id, holds, found_in, why}]. Actions are the cooldowns rows.
        ALTER TABLE events ADD COLUMN evidence_status TEXT;
        ALTER TABLE events ADD COLUMN evidence TEXT;
        ALTER TABLE check_results ADD COLUMN evidence_status TEXT;
        ALTER TABLE check_results ADD COLUMN evidence TEXT;
        ALTER TABLE cooldowns ADD COLUMN evidence_status TEXT;
        ALTER TABLE cooldowns ADD COLUMN evidence TEXT;
        -- Per session: how many of its findings have each status (NULL: not checked), and the
        -- escalation's own citations as checked (the evidence policy's hold reads them).
        ALTER TABLE sessions ADD COLUMN findings_verified INTEGER;
        ALTER TABLE sessions ADD COLUMN findings_unsupported INTEGER;
        ALTER TABLE sessions ADD COLUMN findings_uncited INTEGER;
        ALTER TABLE sessions ADD COLUMN escalation_evidence_status TEXT;
        ALTER TABLE sessions ADD COLUMN escalation_evidence TEXT
        """,
    ),
    (
        "0016_chat",
        """
        -- A conversation with the ops agent (the chat page, /v1/chat/completions, /api/chat): one
        -- claude CLI session continued with --resume (same HOME and cwd), so later turns see the
        -- earlier ones. public_id names it in URLs; cli_session_id is the CLI's session id (NULL
        -- until the first turn's init line); history_sha256 is the hash of the messages so far
        -- (questions and answers), how a stateless client's next request finds its conversation.
        CREATE TABLE chat_conversations (
            id INTEGER PRIMARY KEY,
            public_id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            model TEXT NOT NULL,
            tier INTEGER NOT NULL,
            client TEXT NOT NULL,
            incident_id INTEGER,
            cwd TEXT NOT NULL,
            cli_session_id TEXT,
            history_sha256 TEXT,
            created_by TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX chat_conversations_history ON chat_conversations(history_sha256);
        CREATE INDEX chat_conversations_updated ON chat_conversations(updated_at);
        -- One question and its answer; session_id is the recorded session (trigger chat) that
        -- answered it (NULL once retention removed that session).
        CREATE TABLE chat_turns (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES chat_conversations(id) ON DELETE CASCADE,
            session_id INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            question TEXT NOT NULL,
            answer TEXT,
            status TEXT NOT NULL,
            asked_by TEXT,
            created_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE INDEX chat_turns_conversation ON chat_turns(conversation_id, id);
        CREATE INDEX chat_turns_session ON chat_turns(session_id)
        """,
    ),
    (
        "0017_runtime_settings",
        """
        -- Settings changed at run time (PUT /api/v1/config, the /config page): one row per setting
        -- whose value is used instead of the environment's and .env's until it is reverted. value is
        -- JSON, checked by the Settings class when written and again when read (a value that no
        -- longer passes is skipped). Only the settings a cycle reads afresh can be here; no secret.
        CREATE TABLE runtime_settings (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            changed_by TEXT NOT NULL,
            changed_at TEXT NOT NULL
        );
        -- Every change and revert, kept: old_value and new_value are the JSON values in force
        -- before and after it (a revert's new value is the environment's, .env's or the default).
        CREATE TABLE runtime_setting_changes (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            old_value TEXT,
            new_value TEXT,
            changed_by TEXT NOT NULL,
            changed_at TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('set', 'revert'))
        );
        CREATE INDEX runtime_setting_changes_name ON runtime_setting_changes(name, id)
        """,
    ),
    (
        "0018_nodes",
        """
        -- The TierOps processes (nodes) sharing this database: who they are and when each was last
        -- seen (its heartbeat); stopped_at is set by a node that shut down cleanly.
        CREATE TABLE nodes (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            version TEXT NOT NULL,
            labels TEXT NOT NULL DEFAULT '',
            started_at TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            stopped_at TEXT,
            running INTEGER NOT NULL DEFAULT 0
        );
        -- A lease: held by one node until expires_at (database time), renewed by its holder. The
        -- "leader" lease decides which node runs the schedule, approvals, notifications, pruning.
        CREATE TABLE leases (
            name TEXT PRIMARY KEY,
            holder TEXT,
            acquired_at TEXT,
            expires_at TEXT NOT NULL
        );
        -- The node a session runs on, and the node that claimed a queued run (NULL: one process
        -- alone, before nodes were recorded).
        ALTER TABLE sessions ADD COLUMN node_id TEXT;
        ALTER TABLE run_queue ADD COLUMN claimed_by TEXT;
        -- The node labels a queued run needs (comma separated, TIEROPS_RUNS_ON; '' any node), and
        -- for the rest of a chain moved to another node: the session that escalated and its handoff.
        ALTER TABLE run_queue ADD COLUMN needs TEXT NOT NULL DEFAULT '';
        ALTER TABLE run_queue ADD COLUMN parent_session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL;
        ALTER TABLE run_queue ADD COLUMN handoff TEXT
        """,
    ),
]
