"""The monitor: incidents, guards on action and notices, remote stop, attention, alerts in (migrations 0007-0011)."""

import logging

log = logging.getLogger(__name__)

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0007_incidents",
        """
        -- Incidents: findings with a life. One row per episode of a problem, keyed by
        -- key (check:NAME for a probe check, or the key a model gave, or service + normalised
        -- message). At most one unresolved incident per key (incidents_one_open).
        CREATE TABLE incidents (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL,
            service TEXT,
            check_name TEXT,                        -- the probe check, for check:NAME keys
            origin TEXT NOT NULL,                   -- probe | agent
            status TEXT NOT NULL DEFAULT 'open'
                CHECK (status IN ('open', 'acknowledged', 'resolved')),
            severity TEXT NOT NULL,                 -- info | warning | critical: the highest while open
            title TEXT NOT NULL,                    -- the first finding
            evidence TEXT,                          -- the latest finding
            opened_at TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            occurrences INTEGER NOT NULL DEFAULT 1, -- cycles it was seen failing
            last_chain_id INTEGER,                  -- the cycle that last counted an occurrence
            first_session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            last_session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            escalations INTEGER NOT NULL DEFAULT 0,
            escalated_at TEXT,
            escalated_occurrences INTEGER,          -- occurrences when it was last escalated
            flapping INTEGER NOT NULL DEFAULT 0,
            acknowledged_at TEXT,
            acknowledged_by TEXT,
            silenced_until TEXT,
            silenced_by TEXT,
            resolved_at TEXT,
            resolved_by TEXT,                       -- auto, or who resolved it by hand
            duration_s REAL,                        -- opened to resolved
            note TEXT                               -- the last operator note
        );
        CREATE UNIQUE INDEX incidents_one_open ON incidents (key) WHERE status != 'resolved';
        CREATE INDEX incidents_status ON incidents (status, last_seen_at);
        CREATE INDEX incidents_key ON incidents (key, opened_at);
        -- Per check and probe run: what /metrics and an incident's timeline show.
        CREATE TABLE probe_results (
            id INTEGER PRIMARY KEY,
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            check_name TEXT NOT NULL,
            service TEXT,
            status TEXT NOT NULL,                   -- healthy | degraded | down | unreachable
            latency_ms REAL,
            detail TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX probe_results_session ON probe_results (session_pk);
        CREATE INDEX probe_results_check ON probe_results (check_name, id);
        -- What touched an incident, in order: sessions, probe results, escalations, operators.
        CREATE TABLE incident_timeline (
            id INTEGER PRIMARY KEY,
            incident_id INTEGER NOT NULL REFERENCES incidents(id) ON DELETE CASCADE,
            at TEXT NOT NULL,
            kind TEXT NOT NULL,                     -- opened | seen | worsened | flapping | escalated | resolved | acknowledged | silenced | reopened-silence
            session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            probe_result_id INTEGER REFERENCES probe_results(id) ON DELETE SET NULL,
            actor TEXT,
            detail TEXT
        );
        CREATE INDEX incident_timeline_incident ON incident_timeline (incident_id, id);
        CREATE INDEX incident_timeline_session ON incident_timeline (session_pk);
        CREATE INDEX incident_timeline_probe ON incident_timeline (probe_result_id);
        -- Why a tier-0 request to escalate was not acted on (the incident was already escalated).
        ALTER TABLE sessions ADD COLUMN escalation_gate TEXT
        """,
    ),
    (
        "0008_guards_and_notices",
        """
        -- Notifications: one row per message, kept whether sent or not, so the overview
        -- shows failures and dedup_key stops a second message for the same state change.
        CREATE TABLE notifications (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            kind TEXT NOT NULL,                     -- incident_opened | incident_worsened | incident_resolved | escalation | escalation_outcome | attention | approval | monitor | digest | test
            severity TEXT NOT NULL,                 -- info | warning | critical
            dedup_key TEXT,
            title TEXT NOT NULL,
            body TEXT NOT NULL,
            link TEXT,
            status TEXT NOT NULL DEFAULT 'pending', -- pending | sent | failed | suppressed | digested
            why TEXT,                               -- why suppressed or digested
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            sent_at TEXT
        );
        CREATE UNIQUE INDEX notifications_dedup ON notifications (dedup_key) WHERE dedup_key IS NOT NULL;
        CREATE INDEX notifications_status ON notifications (status, id);
        -- Runs waiting for a free cycle (alerts that arrived while one ran), persisted across restarts.
        CREATE TABLE run_queue (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            source TEXT NOT NULL,                   -- alert
            tier INTEGER NOT NULL,
            prompt TEXT,
            incident_id INTEGER REFERENCES incidents(id) ON DELETE SET NULL,
            status TEXT NOT NULL DEFAULT 'queued',  -- queued | started | failed
            started_at TEXT,
            session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
            error TEXT
        );
        CREATE INDEX run_queue_status ON run_queue (status, id);
        -- Escalations waiting for an operator (TIEROPS_TIERn_APPROVAL=manual).
        CREATE TABLE approvals (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL,   -- the session that escalated
            chain_id INTEGER,
            tier INTEGER NOT NULL,                  -- the tier waiting to run
            handoff TEXT NOT NULL,                  -- what the lower tier found and proposes
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
            decided_at TEXT,
            decided_by TEXT,
            note TEXT,
            child_session_pk INTEGER REFERENCES sessions(id) ON DELETE SET NULL
        );
        CREATE INDEX approvals_status ON approvals (status, id);
        ALTER TABLE sessions ADD COLUMN dry_run INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN max_budget_usd REAL;
        -- Actions the tiers reported (markers COOLDOWN and the contract's actions): when and where.
        CREATE INDEX cooldowns_service ON cooldowns (service, action, created_at)
        """,
    ),
    (
        "0009_remote_stop",
        """
        -- Stop for a session another process runs. The stopping process writes when and
        -- who before it signals the recorded CLI, and the owning process reads it when its CLI
        -- exits, so the row says "stopped by an operator" (app/supervisor/remote_stop.py).
        ALTER TABLE sessions ADD COLUMN stop_requested_at TEXT;
        ALTER TABLE sessions ADD COLUMN stop_requested_by TEXT
        """,
    ),
    (
        "0010_attention_ack",
        """
        -- An operator acknowledges a session's needs-attention flag (who, when): the
        -- overview then leaves it out, the session page keeps it, marked. A new attention reason
        -- clears the acknowledgement (app/store/sessions.py set_attention).
        ALTER TABLE sessions ADD COLUMN attention_acked_at TEXT;
        ALTER TABLE sessions ADD COLUMN attention_acked_by TEXT;
        CREATE INDEX sessions_attention_open ON sessions (id) WHERE attention IS NOT NULL AND attention_acked_at IS NULL
        """,
    ),
    (
        "0011_signal",
        """
        -- What people are told, and what they act on. Incidents: a short name for messages
        -- (the check, the alert's alertname or title), the alert sender and its links and
        -- annotations, a maintenance window that held it, the incident of the same key it reopens.
        ALTER TABLE incidents ADD COLUMN name TEXT;
        ALTER TABLE incidents ADD COLUMN alert_source TEXT;          -- alertmanager | grafana | generic
        ALTER TABLE incidents ADD COLUMN links TEXT;                 -- JSON [{label, url}]
        ALTER TABLE incidents ADD COLUMN annotations TEXT;           -- JSON object
        ALTER TABLE incidents ADD COLUMN maintenance TEXT;           -- the window that holds it (NULL: none)
        ALTER TABLE incidents ADD COLUMN maintenance_until TEXT;
        ALTER TABLE incidents ADD COLUMN reopened_from INTEGER REFERENCES incidents(id) ON DELETE SET NULL;
        -- The alerts of an alert incident (one per fingerprint, a group incident lists several).
        CREATE TABLE incident_alerts (
            id INTEGER PRIMARY KEY,
            incident_id INTEGER NOT NULL REFERENCES incidents(id) ON DELETE CASCADE,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,                   -- firing | resolved
            severity TEXT NOT NULL,
            title TEXT NOT NULL,
            labels TEXT,                            -- JSON object
            annotations TEXT,                       -- JSON object
            links TEXT,                             -- JSON [{label, url}]
            starts_at TEXT,
            first_seen_at TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            resolved_at TEXT
        );
        CREATE UNIQUE INDEX incident_alerts_one ON incident_alerts (incident_id, fingerprint);
        -- Messages: what they concern (for routes and for following an opening with its resolution).
        ALTER TABLE notifications ADD COLUMN incident_id INTEGER REFERENCES incidents(id) ON DELETE SET NULL;
        ALTER TABLE notifications ADD COLUMN source TEXT;            -- check | model | alert | monitor
        ALTER TABLE notifications ADD COLUMN service TEXT;
        ALTER TABLE notifications ADD COLUMN check_name TEXT;
        ALTER TABLE notifications ADD COLUMN routes TEXT;            -- JSON array of route names
        CREATE INDEX notifications_incident ON notifications (incident_id, id);
        -- Approvals are per incident: the incidents an approval is for (later escalations attach).
        CREATE TABLE approval_incidents (
            approval_id INTEGER NOT NULL REFERENCES approvals(id) ON DELETE CASCADE,
            incident_id INTEGER NOT NULL REFERENCES incidents(id) ON DELETE CASCADE,
            PRIMARY KEY (approval_id, incident_id)
        );
        CREATE INDEX approval_incidents_incident ON approval_incidents (incident_id);
        ALTER TABLE approvals ADD COLUMN attached INTEGER NOT NULL DEFAULT 0;  -- escalations attached to it
        -- A needs-attention flag raised because of incidents follows them (resolved, acknowledged).
        CREATE TABLE attention_incidents (
            session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            incident_id INTEGER NOT NULL REFERENCES incidents(id) ON DELETE CASCADE,
            PRIMARY KEY (session_pk, incident_id)
        );
        CREATE INDEX attention_incidents_incident ON attention_incidents (incident_id);
        -- Actions the tiers reported, proposals included (outcome 'proposed'), with their incident.
        ALTER TABLE cooldowns ADD COLUMN incident_id INTEGER REFERENCES incidents(id) ON DELETE SET NULL;
        CREATE INDEX cooldowns_incident ON cooldowns (incident_id);
        -- Maintenance windows added at run time (API, CLI, dashboard): configured ones live in
        -- TIEROPS_MAINTENANCE and the checks file.
        CREATE TABLE maintenance_windows (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            created_by TEXT NOT NULL,
            reason TEXT,
            starts_at TEXT NOT NULL,
            ends_at TEXT NOT NULL,
            services TEXT,                          -- JSON array of patterns (NULL: every service)
            checks TEXT,                            -- JSON array of patterns (NULL: every check)
            cancelled_at TEXT,
            cancelled_by TEXT
        );
        CREATE INDEX maintenance_windows_ends ON maintenance_windows (ends_at);
        -- The monitor's own state shared by every process on this database (e.g. the language-model
        -- tiers held back after the API rejected the credentials).
        CREATE TABLE monitor_state (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        -- Alerts in: an incident whose investigation could not be queued needs a human (no session
        -- row carries it), and how many alerts of its latest delivery were not listed.
        ALTER TABLE incidents ADD COLUMN attention TEXT;             -- why a human must look (NULL: no need)
        ALTER TABLE incidents ADD COLUMN attention_at TEXT;
        ALTER TABLE incidents ADD COLUMN alerts_truncated INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX incidents_attention_open ON incidents (id) WHERE attention IS NOT NULL AND status = 'open';
        -- The incidents a queued run investigates: one, or several of one service (coalesced).
        CREATE TABLE run_queue_incidents (
            run_id INTEGER NOT NULL REFERENCES run_queue(id) ON DELETE CASCADE,
            incident_id INTEGER NOT NULL REFERENCES incidents(id) ON DELETE CASCADE,
            PRIMARY KEY (run_id, incident_id)
        );
        CREATE INDEX run_queue_incidents_incident ON run_queue_incidents (incident_id);
        INSERT INTO run_queue_incidents (run_id, incident_id)
            SELECT id, incident_id FROM run_queue WHERE incident_id IS NOT NULL
        """,
    ),
]
