"""Acting inside a session and what it is given: the guard, runbooks, MCP servers, evidence (migrations 0012-0015)."""

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
]
