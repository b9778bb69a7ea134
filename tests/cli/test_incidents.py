"""``tierops incidents``, run as a real subprocess against a real SQLite file whose
incidents were made by the store the way the engine makes them (``observe`` on tier-0 sessions)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.config import Settings
from app.engine.alert_batches import batches
from app.engine.alerts import parse_payload
from app.store import alert_incidents
from app.store.db import Database
from app.supervisor.alerts import delivery
from tests.cli.helpers import one_error_line, run
from tests.web.api.test_incidents import HOSTILE_DETAIL, propose, seed_incidents

OPERATOR = {"USER": "opsbot", "LOGNAME": "opsbot"}  # getpass.getuser() reads these first


@pytest.fixture
def seeded_db(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    path = tmp_path / "inc.db"

    async def go() -> dict[str, int]:
        db = await Database.open(path)
        try:
            return await seed_incidents(db)
        finally:
            await db.close()

    return path, asyncio.run(go())


def incident(db: Path, pk: int) -> dict:
    out = run("incidents", "show", str(pk), "--json", db=db)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_bare_incidents_lists_the_unresolved(seeded_db):
    db, ids = seeded_db
    out = run("incidents", db=db)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert lines[0].split() == ["ID", "SEVERITY", "STATUS", "OCC", "ESC", "LAST", "SEEN", "SERVICE", "KEY"]
    rows = {int(line.split()[0]): line for line in lines[1:]}
    assert set(rows) == {ids["api"], ids["disk"]}  # cache is resolved
    assert rows[ids["api"]].split()[1:5] == ["critical", "open", "2", "0"] and rows[ids["api"]].endswith("check:api")
    assert "db" in rows[ids["disk"]].split()


def test_list_filters_and_json(seeded_db):
    db, ids = seeded_db

    def listed(*args: str) -> list[int]:
        out = run("incidents", *args, "--json", db=db)
        assert out.returncode == 0, out.stderr
        return [row["id"] for row in json.loads(out.stdout)]

    assert set(listed("--status", "all")) == {ids["api"], ids["disk"], ids["cache"]}
    assert listed("--status", "resolved") == [ids["cache"]]
    assert set(listed("--status", "open")) == {ids["api"], ids["disk"]}
    assert listed("--status", "acknowledged") == []
    assert listed("--service", "db") == [ids["disk"]]
    assert len(listed("--status", "all", "--limit", "1")) == 1
    text = run("incidents", "--status", "resolved", db=db).stdout.decode()
    assert "resolved after" in text and "check:cache" in text
    assert "no acknowledged incidents" in run("incidents", "--status", "acknowledged", db=db).stdout.decode()
    # --home/--db may also come before the command
    out = run("incidents", "--db", str(db), "show", str(ids["api"]))
    assert out.returncode == 0, out.stderr


def test_show_with_timeline(seeded_db):
    db, ids = seeded_db
    out = run("incidents", "show", str(ids["api"]), db=db)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert text.startswith(f"incident {ids['api']} (check:api): open, critical")
    assert "2 occurrence(s)" in text and "evidence: HTTP 502 from /health" in text
    timeline = text.split("timeline:\n", 1)[1].splitlines()
    assert len(timeline) == 2
    assert "opened" in timeline[0] and f"session {ids['session1']} (tier 0)" in timeline[0]
    assert "api down 12 ms" in timeline[0] and timeline[0].endswith(": HTTP 500 from /health")
    assert "seen" in timeline[1] and f"session {ids['session2']} (tier 0)" in timeline[1]
    body = incident(db, ids["api"])
    assert body["key"] == "check:api" and [t["kind"] for t in body["timeline"]] == ["opened", "seen"]
    assert body["timeline"][0]["tier"] == 0


def test_show_lists_the_proposed_actions(seeded_db):
    db, ids = seeded_db
    assert "proposed actions: none" in run("incidents", "show", str(ids["api"]), db=db).stdout.decode()
    assert incident(db, ids["api"])["proposals"] == []
    hostile = "line one\nFORGED line\x1b[2J" + HOSTILE_DETAIL

    async def go() -> tuple[int, int]:
        store = await Database.open(db)
        try:
            settings = Settings(home=db.parent / "state", db=db)
            first = await propose(store, settings, [("restart", "api", "after the deploy")])
            second = await propose(store, settings, [("<b>redeploy</b>\nFORGED", None, hostile)], tier=3, dry_run=True)
            return first, second
        finally:
            await store.close()

    first, second = asyncio.run(go())
    out = run("incidents", "show", str(ids["api"]), db=db)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    section = text.split("proposed actions (not taken; each awaits a human):\n", 1)[1].split("timeline:\n")[0]
    lines = section.splitlines()
    assert len(lines) == 2  # newest first, each on one line whatever the model wrote
    # routing lower-cased the kind and collapsed its whitespace; the detail is flattened here
    assert f"session {second} (tier 3), dry run  <b>redeploy</b> forged (host-wide): line one FORGED line" in lines[0]
    assert "\x1b" not in lines[0] and len(lines[0]) < 600  # the detail cut to 300 characters
    assert lines[1].endswith(f"session {first} (tier 2)  restart api: after the deploy")
    assert not any(line.startswith("FORGED") for line in text.splitlines())
    body = incident(db, ids["api"])
    assert [(p["session_pk"], p["kind"], p["detail"]) for p in body["proposals"]] == [
        (second, "<b>redeploy</b> forged", hostile), (first, "restart", "after the deploy")]


def test_ack_resolve_silence_record_the_unix_user(seeded_db):
    db, ids = seeded_db
    api = ids["api"]
    out = run("incidents", "ack", str(api), "--note", "on it", db=db, env=OPERATOR)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().strip() == f"incident {api} (check:api) acknowledged by opsbot via CLI"
    row = incident(db, api)
    assert (row["status"], row["acknowledged_by"], row["note"]) == ("acknowledged", "opsbot via CLI", "on it")
    assert row["timeline"][-1]["actor"] == "opsbot via CLI"

    before = datetime.now(UTC)
    out = run("incidents", "silence", str(api), "--until", "2h", "--json", db=db, env=OPERATOR)
    assert out.returncode == 0, out.stderr
    until = datetime.fromisoformat(json.loads(out.stdout)["silenced_until"].replace("Z", "+00:00"))
    assert before + timedelta(hours=2) - timedelta(seconds=1) <= until <= datetime.now(UTC) + timedelta(hours=2)
    target = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    out = run("incidents", "silence", str(ids["disk"]), "--until", target.isoformat(), db=db, env=OPERATOR)
    assert out.returncode == 0, out.stderr
    assert "silenced by opsbot via CLI until" in out.stdout.decode()
    assert incident(db, ids["disk"])["silenced_until"] == target.isoformat().replace("+00:00", ".000Z")

    out = run("incidents", "resolve", str(api), db=db, env=OPERATOR)
    assert out.returncode == 0, out.stderr
    row = incident(db, api)
    assert (row["status"], row["resolved_by"], row["note"]) == ("resolved", "opsbot via CLI", "on it")
    assert row["duration_s"] is not None
    assert [t["kind"] for t in row["timeline"]][-3:] == ["acknowledged", "silenced", "resolved"]


@pytest.mark.parametrize("args,message", [
    (["ack", "{cache}"], "is resolved; only an open incident can be acknowledged"),
    (["resolve", "{cache}"], "is already resolved"),
    (["ack", "999"], "no incident 999"),
    (["show", "999"], "no incident 999"),
    (["silence", "{api}", "--until", "91d"], "--until: until '91d' is longer than a silence may last"),
    (["silence", "{api}", "--until", "tomorrow"], "--until: until must be a duration such as 30m"),
    (["silence", "{api}", "--until", "2026-11-23T18:00:00"], "has no time zone"),
    (["silence", "{api}", "--until", "2020-01-01T00:00:00Z"], "is not in the future"),
    (["silence", "{api}"], "Missing option '--until'"),
    (["ack", "{api}", "--note", "x" * 2001], "--note is too long"),
    (["ack", "x"], "Invalid value for 'ID'"),
    (["--status", "closed"], "Invalid value for '--status'"),
])
def test_refusals_are_one_line_and_change_nothing(seeded_db, args, message):
    db, ids = seeded_db
    before = {pk: incident(db, pk) for pk in (ids["api"], ids["cache"])}
    out = run("incidents", *[a.format(**ids) for a in args], db=db, env=OPERATOR)
    assert message in one_error_line(out)
    assert {pk: incident(db, pk) for pk in before} == before


def test_commands_never_create_a_database(tmp_path):
    db = tmp_path / "none.db"
    for args in (["incidents"], ["incidents", "show", "1"], ["incidents", "ack", "1"],
                 ["incidents", "silence", "1", "--until", "1h"]):
        out = run(*args, db=db)
        assert "no database at" in one_error_line(out), args
        assert not db.exists()
    sqlite3.connect(tmp_path / "empty.db").close()  # an existing database without incidents
    out = run("incidents", db=tmp_path / "empty.db")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().strip() == "no unresolved incidents"


# --- alert incidents --------------------------------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


def _alert_db(tmp_path: Path, body: dict) -> tuple[Path, int]:
    """A database with the incident one webhook delivery opens (grouped, as the server does)."""
    path = tmp_path / "alerts.db"

    async def go() -> int:
        db = await Database.open(path)
        try:
            [batch] = batches(parse_payload(body)[1], "group")
            change = await alert_incidents.observe_alerts(db, delivery(batch), flap_count=3, flap_window_s=3600)
            assert change is not None
            return change.incident["id"]
        finally:
            await db.close()

    return path, asyncio.run(go())


def test_show_an_alert_group_with_its_links_annotations_and_alerts(tmp_path):
    body = json.loads((SAMPLES / "grafana-group-firing.json").read_text(encoding="utf-8"))
    db, pk = _alert_db(tmp_path, body)
    out = run("incidents", "show", str(pk), db=db)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "  name: Disk almost full, sent by grafana" in text
    assert "  links:\n    runbook: https://runbooks.example.com/storage/disk-full\n    dashboard: Disk almost full on " \
           "db-1: https://grafana.example.com/d/node-exporter-full?" in text
    assert "  annotations:\n    runbook_url: https://runbooks.example.com/storage/disk-full" in text
    assert "alerts: 2 firing, 0 resolved" in text
    assert "  firing    critical  Disk almost full on db-1  (fingerprint 8d1f0c3e5b7a9264)" in text
    assert "    panel: https://grafana.example.com/d/node-exporter-full?" in text
    assert "    description: /var/lib/postgresql on db-2 has less than 10% free space." in text
    shown = json.loads(run("incidents", "show", str(pk), "--json", db=db).stdout)
    assert shown["name"] == "Disk almost full" and shown["alert_counts"] == {"firing": 2, "resolved": 0}
    assert [a["fingerprint"] for a in shown["alerts"]] == ["8d1f0c3e5b7a9264", "e27a4b9c1d0f3865"]
    assert shown["links"][0] == {"label": "runbook", "url": "https://runbooks.example.com/storage/disk-full"}


def test_show_prints_sender_text_on_its_own_lines_without_control_characters(tmp_path):
    body = json.loads((SAMPLES / "alertmanager-group-firing.json").read_text(encoding="utf-8"))
    evil = body["alerts"][0]
    evil["annotations"]["summary"] = "ok\x1b[2J\x1b[31mred\nfake line"
    evil["annotations"]["runbook_url"] = "javascript:alert(1)"
    evil["annotations"]["note"] = "x" * 5000
    db, pk = _alert_db(tmp_path, body)
    out = run("incidents", "show", str(pk), db=db)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "\x1b" not in text and "\nfake line" not in text
    assert "ok [2J [31mred fake line  (fingerprint 0b1e5d2a8c3f4e61)" in text  # escapes made visible, one line
    assert "runbook: javascript:" not in text and "    runbook_url: javascript:alert(1)" in text  # text, not a link
    alerts = text[text.index("  name: "):text.index("timeline:")]
    assert max(len(line) for line in alerts.splitlines()) < 400  # each sender text cut on its line
