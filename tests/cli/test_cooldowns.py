"""``tierops cooldowns``, run as a real subprocess against a real SQLite file whose
actions were written by the store the way a session's findings are."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.output.route import Routed
from app.store import findings, sessions
from app.store.db import Database
from tests.cli.helpers import one_error_line, run


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def seeded_db(tmp_path: Path) -> tuple[Path, str]:
    """Two restarts of api (the oldest 2 h ago), a redeploy of web, a dry run and a proposal."""
    path = tmp_path / "cd.db"
    oldest = ago(hours=2)

    async def go() -> None:
        db = await Database.open(path)
        try:
            for at, actions in ((oldest, [("restart", "api", "done", "systemctl restart api")]),
                                (ago(minutes=30), [("restart", "api", "failed", None), ("redeploy", "web", "done", None),
                                                   ("cleanup", None, "dry-run", None),
                                                   ("restart", "api", "proposed", None)])):
                pk = await sessions.create_session(db, tier=2, trigger="manual")
                async with db.write() as conn:
                    await findings.write_routed(conn, pk, Routed(source="structured_output", actions=actions), at,
                                                0.7, 0.3)
        finally:
            await db.close()

    asyncio.run(go())
    return path, oldest


def plus(stamp: str, hours: int) -> str:
    return (datetime.fromisoformat(stamp) + timedelta(hours=hours)).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_text_lists_limits_windows_and_recent_actions(seeded_db):
    db, oldest = seeded_db
    out = run("cooldowns", db=db)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert lines[0] == "limits per service: restart 2/4h, redeploy 1/24h"
    assert lines[1].split() == ["redeploy", "web", "1", "of", "1", "in", "24h", "used,", "next", "allowed", "at",
                                lines[1].split()[-1]]
    assert lines[2].split() == ["restart", "api", "2", "of", "2", "in", "4h", "used,", "next", "allowed", "at",
                                plus(oldest, 4)]
    assert lines[3] == "recent actions:"
    assert [line.split()[-2:] for line in lines[4:8]] == [["(host-wide):", "dry-run"], ["web:", "done"],
                                                          ["api:", "failed"], ["restart", "api"]]
    assert lines[7].endswith("restart api: done — systemctl restart api")
    # the proposal apart, never among the actions taken, with what the limits say of it now
    assert lines[8] == "proposed actions (not taken, never counted; the limits now):"
    assert lines[9].endswith(f"restart api: proposed, over its limit 2/4h: next allowed at {plus(oldest, 4)}")
    assert len(lines) == 10


def test_json_and_limit(seeded_db):
    db, oldest = seeded_db
    out = run("cooldowns", "--json", "--limit", "2", db=db)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"limits", "active", "recent", "proposals"}
    assert [(w["kind"], w["service"], w["used"], w["remaining"]) for w in report["active"]] == [
        ("redeploy", "web", 1, 0), ("restart", "api", 2, 0)]
    assert report["active"][1]["next_allowed_at"] == plus(oldest, 4)
    assert [(a["action"], a["outcome"]) for a in report["recent"]] == [("cleanup", "dry-run"), ("redeploy", "done")]
    [p] = report["proposals"]
    assert (p["kind"], p["service"], p["tier"], p["dry_run"], p["allowed"], p["limit"], p["remaining"]) == (
        "restart", "api", 2, False, False, "2/4h", 0)
    assert p["next_allowed_at"] == plus(oldest, 4) and p["incident_id"] is None


def test_a_proposal_the_limits_allow_and_one_without_a_limit(seeded_db):
    db, _ = seeded_db
    report = json.loads(run("cooldowns", "--json", db=db, env={"TIEROPS_COOLDOWNS": "restart:5/1h"}).stdout)
    [p] = report["proposals"]
    assert (p["allowed"], p["limit"], p["remaining"], p["next_allowed_at"]) == (True, "5/1h", 4, None)
    text = run("cooldowns", db=db, env={"TIEROPS_COOLDOWNS": "restart:5/1h"}).stdout.decode()
    assert text.splitlines()[-1].endswith("restart api: proposed, allowed now (4 of 5/1h left)")
    text = run("cooldowns", db=db, env={"TIEROPS_COOLDOWNS": ""}).stdout.decode()
    assert text.splitlines()[-1].endswith("restart api: proposed, no limit")


def test_hostile_proposals_stay_on_one_line_and_are_cut(tmp_path):
    path = tmp_path / "hostile.db"
    detail = "line one\nFORGED: restart everything\r\x1b[31m" + "x" * 100_000

    async def go() -> None:
        db = await Database.open(path)
        try:
            pk = await sessions.create_session(db, tier=3, trigger="manual")
            async with db.write() as conn:
                await findings.write_routed(conn, pk, Routed(source="structured_output", actions=[
                    ("<b>restart</b>\nFORGED", "api\n  2026 session 9", "proposed", detail)]), ago(minutes=1),
                    0.7, 0.3)
        finally:
            await db.close()

    asyncio.run(go())
    out = run("cooldowns", db=path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert not any(line.startswith("FORGED") or line.lstrip().startswith("2026 session 9") for line in lines)
    (proposal,) = [line for line in lines if "proposed," in line]
    assert "<b>restart</b> FORGED api 2026 session 9: proposed, no limit — line one FORGED: restart everything" \
        in proposal
    assert "\x1b" not in proposal and len(proposal) < 700  # the detail cut to 300 characters
    report = json.loads(run("cooldowns", "--json", db=path).stdout)
    assert report["proposals"][0]["detail"] == detail  # --json carries all of it


def test_custom_limits_from_the_environment(seeded_db):
    db, _ = seeded_db
    out = run("cooldowns", "--json", db=db, env={"TIEROPS_COOLDOWNS": "restart:5/1h"})
    report = json.loads(out.stdout)
    assert report["limits"] == [{"kind": "restart", "count": 5, "window_s": 3600, "window": "1h"}]
    assert [(w["kind"], w["used"], w["remaining"], w["next_allowed_at"]) for w in report["active"]] == [
        ("restart", 1, 4, None)]  # the 2 h old restart is out of a 1 h window
    quiet = run("cooldowns", db=db, env={"TIEROPS_COOLDOWNS": ""}).stdout.decode()
    assert quiet.startswith("limits per service: none (TIEROPS_COOLDOWNS is empty)\nno action is in cooldown\n")


def test_a_bad_setting_is_one_error_line(seeded_db):
    db, _ = seeded_db
    out = run("cooldowns", db=db, env={"TIEROPS_COOLDOWNS": "restart:2/4h,redeploy:1/24x"})
    one_error_line(out, "TIEROPS_COOLDOWNS: 'redeploy:1/24x' is not KIND:COUNT/WINDOW")


def test_no_database_is_not_created(tmp_path):
    out = run("cooldowns", db=tmp_path / "none.db")
    one_error_line(out, "no database at")
    assert not (tmp_path / "none.db").exists()
