"""``app/engine/cooldowns.py``: parsing ``TIEROPS_COOLDOWNS``, the windows, proposals over a limit,
actions that exceeded one, the prompt text — against a real SQLite file where rows are involved."""

from __future__ import annotations

import pytest

from app.config import Settings
from app.engine import cooldowns as cd
from app.errors import ConfigError
from app.output.route import Routed
from app.store import findings, sessions

LIMITS = cd.parse_limits("restart:2/4h,redeploy:1/24h")
NOW = "2026-03-01T12:00:00.000Z"


def row(action: str, service: str, at: str) -> dict:
    return {"action": action, "service": service, "created_at": at}


# -- parsing -----------------------------------------------------------------------------------

def test_the_default_is_the_go_originals_limits():
    expected = {"restart": cd.Limit("restart", 2, 4 * 3600, "4h"), "redeploy": cd.Limit("redeploy", 1, 24 * 3600, "24h")}
    assert cd.parse_limits(Settings.model_fields["cooldowns"].default) == expected
    assert LIMITS["restart"].text == "2/4h"
    assert LIMITS["restart"].as_dict() == {"kind": "restart", "count": 2, "window_s": 14400, "window": "4h"}


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    (" , ", {}),
    ("restart:2/4h,", {"restart": (2, 14400)}),
    (" Restart : 3 / 90m , cleanup:10/1d ", {"restart": (3, 5400), "cleanup": (10, 86400)}),
    ("config-change:1/30s", {"config-change": (1, 30)}),
    ("redeployment:1/2H", {"redeploy": (1, 7200)}),  # the markers' word, the limit's kind
    ("restart:0/1h", {"restart": (0, 3600)}),  # never allowed
])
def test_parse_limits(text, expected):
    assert {k: (v.count, v.window_s) for k, v in cd.parse_limits(text).items()} == expected


@pytest.mark.parametrize(("text", "bad"), [
    ("restart:2", "'restart:2'"),
    ("restart:2/4h,redeploy", "'redeploy'"),
    ("restart:two/4h", "'restart:two/4h'"),
    ("restart:2/4w", "'restart:2/4w'"),
    ("restart:2/h", "'restart:2/h'"),
    (":2/4h", "':2/4h'"),
    ("restart:-1/4h", "'restart:-1/4h'"),
])
def test_a_bad_part_is_named_in_one_line(text, bad):
    with pytest.raises(cd.CooldownError) as exc:
        cd.parse_limits(text)
    message = str(exc.value)
    assert isinstance(exc.value, ConfigError)
    assert message.startswith(f"TIEROPS_COOLDOWNS: {bad} is not KIND:COUNT/WINDOW") and "\n" not in message


def test_an_empty_window_and_a_repeated_kind_are_refused():
    with pytest.raises(cd.CooldownError, match=r"'restart:2/0h' has an empty window"):
        cd.parse_limits("restart:2/0h")
    with pytest.raises(cd.CooldownError, match=r"'Restart:1/1h' repeats the kind 'restart'"):
        cd.parse_limits("restart:2/4h,Restart:1/1h")


# -- windows -----------------------------------------------------------------------------------

def test_windows_count_per_kind_and_service_inside_the_window():
    actions = [
        row("restart", "api", "2026-03-01T08:00:00.000Z"),  # exactly 4 h old: out
        row("restart", "api", "2026-03-01T08:00:00.001Z"),
        row("restart", "api", "2026-03-01T11:00:00.000Z"),
        row("restart", "web", "2026-03-01T11:30:00.000Z"),
        row("redeployment", "api", "2026-02-28T13:00:00.000Z"),  # a marker's word
        row("cleanup", "api", "2026-03-01T11:00:00.000Z"),  # no limit: not a window
        row("restart", "api", "2026-03-01T12:00:00.001Z"),  # after now: not yet
        row("restart", "", "2026-03-01T10:00:00.000Z"),  # host-wide
    ]
    got = {(w.kind, w.service): w for w in cd.windows(actions, LIMITS, NOW)}
    assert sorted(got, key=lambda k: (k[0], k[1] or "")) == [
        ("redeploy", "api"), ("restart", None), ("restart", "api"), ("restart", "web")]
    api = got[("restart", "api")]
    assert (api.used, api.remaining) == (2, 0)
    assert api.next_allowed_at == "2026-03-01T12:00:00.001Z"  # when the older of the two leaves the window
    assert api.frees_at == "2026-03-01T12:00:00.001Z"
    assert api.describe() == "restart api: 2 of 2 in 4h used, next allowed at 2026-03-01T12:00:00.001Z"
    web = got[("restart", "web")]
    assert (web.used, web.remaining, web.next_allowed_at, web.frees_at) == (1, 1, None, "2026-03-01T15:30:00.000Z")
    assert web.describe() == "restart web: 1 of 2 in 4h used, 1 more allowed"
    assert got[("redeploy", "api")].next_allowed_at == "2026-03-01T13:00:00.000Z"
    assert got[("restart", None)].describe().startswith("restart (host-wide): 1 of 2")
    assert api.as_dict() == {"kind": "restart", "service": "api", "used": 2, "limit": 2, "window_s": 14400,
                             "window": "4h", "remaining": 0, "next_allowed_at": "2026-03-01T12:00:00.001Z",
                             "frees_at": "2026-03-01T12:00:00.001Z"}


def test_next_allowed_with_more_actions_than_the_limit_is_when_enough_have_left():
    actions = [row("restart", "api", f"2026-03-01T{h:02d}:00:00.000Z") for h in (9, 10, 11)]
    [w] = cd.windows(actions, LIMITS, NOW)
    assert (w.used, w.remaining) == (3, 0)
    # 3 used of 2: one more is allowed once two have left, i.e. when the 10:00 one is 4 h old
    assert w.next_allowed_at == "2026-03-01T14:00:00.000Z" and w.frees_at == "2026-03-01T13:00:00.000Z"


def test_a_zero_limit_is_never_allowed():
    limits = cd.parse_limits("restart:0/1h")
    [w] = cd.windows([row("restart", "api", NOW)], limits, NOW)
    assert (w.remaining, w.next_allowed_at) == (0, None)
    assert w.describe().endswith("next allowed at never (limit 0)")
    assert cd.over_limit([("restart", "db")], [], limits) == ("restart", "db", limits["restart"], None)


def test_over_limit_counts_the_proposals_against_what_remains():
    active = cd.windows([row("restart", "api", "2026-03-01T11:00:00.000Z")], LIMITS, NOW)
    assert cd.over_limit([("restart", "api")], active, LIMITS) is None  # 1 of 2 used
    over = cd.over_limit([("Restart", "api"), ("restart", "api")], active, LIMITS)
    assert over == ("restart", "api", LIMITS["restart"], None)
    assert cd.over_limit([("cleanup", "api")] * 50, active, LIMITS) is None  # no limit for cleanup
    assert cd.over_limit([("redeploy", "web"), ("redeploy", "web")], active, LIMITS)[:2] == ("redeploy", "web")
    full = cd.windows([row("restart", "api", "2026-03-01T10:00:00.000Z"),
                       row("restart", "api", "2026-03-01T11:00:00.000Z")], LIMITS, NOW)
    assert cd.over_limit([("restart", "api")], full, LIMITS) == (
        "restart", "api", LIMITS["restart"], "2026-03-01T14:00:00.000Z")
    assert cd.over_limit([("restart", "web")], full, LIMITS) is None  # another service


def test_prompt_block():
    assert cd.prompt_block([], {}) == ""
    quiet = cd.prompt_block([], LIMITS)
    assert quiet.startswith("## Cooldowns (limits on actions per service)\nLimits: restart at most 2 per service "
                            "in 4h; redeploy at most 1 per service in 24h.")
    assert quiet.endswith("No action is in cooldown now.")
    active = cd.windows([row("restart", "api", "2026-03-01T10:00:00.000Z"),
                         row("restart", "api", "2026-03-01T11:00:00.000Z"),
                         row("redeploy", "web", "2026-03-01T11:00:00.000Z"),
                         row("restart", "db", "2026-03-01T11:00:00.000Z")], LIMITS, NOW)
    text = cd.prompt_block(active, LIMITS)
    assert ("- restart api: 2 of 2 in 4h used, next allowed at 2026-03-01T14:00:00.000Z; do not restart api, "
            "propose it instead (an action with result `proposed`)") in text
    assert text.endswith("\n- restart db: 1 of 2 in 4h used, 1 more allowed")
    assert "do not redeploy web, propose it instead" in text
    assert "No action is in cooldown now." not in text


# -- against the store -------------------------------------------------------------------------

async def _session_with(db, actions, *, at: str, cooldowns=()) -> int:
    pk = await sessions.create_session(db, tier=2, trigger="manual")
    async with db.write() as conn:
        await findings.write_routed(conn, pk, Routed(source="structured_output", actions=list(actions),
                                                     cooldowns=list(cooldowns)), at, 0.7, 0.3)
    return pk


async def test_active_counts_taken_actions_and_markers_not_dry_runs_or_proposals(db):
    await _session_with(db, [("restart", "api", "done", None), ("restart", "api", "dry-run", None),
                             ("restart", "api", "proposed", None)], at="2026-03-01T10:00:00.000Z")
    await _session_with(db, [], cooldowns=[("restart", "api", "failure", "still down")],
                        at="2026-03-01T11:00:00.000Z")
    await _session_with(db, [("restart", "api", "failed", None)], at="2026-03-01T06:00:00.000Z")  # too old
    await _session_with(db, [("redeploy", None, "done", None)], at="2026-03-01T11:00:00.000Z")
    active = await cd.active(db, LIMITS, NOW)
    assert [(w.kind, w.service, w.used, w.remaining) for w in active] == [
        ("redeploy", None, 1, 0), ("restart", "api", 2, 0)]
    assert await cd.active(db, {}, NOW) == []
    assert [w.used for w in await cd.active(db, LIMITS, "2026-03-01T14:30:00.000Z")] == [1, 1]  # 10:00 left
    report = await cd.report(db, LIMITS, recent=3, now=NOW)
    assert [lim["kind"] for lim in report["limits"]] == ["restart", "redeploy"]
    assert [w["service"] for w in report["active"]] == [None, "api"]
    assert [(a["action"], a["outcome"]) for a in report["recent"]] == [
        ("redeploy", "done"), ("restart", "failed"), ("restart", "failure")]
    # the proposal apart, judged against the actions taken (2 of 2 restarts of api used)
    [proposal] = report["proposals"]
    assert (proposal["kind"], proposal["service"], proposal["allowed"], proposal["limit"], proposal["remaining"],
            proposal["next_allowed_at"]) == ("restart", "api", False, "2/4h", 0, "2026-03-01T14:00:00.000Z")


def proposal(kind: str, service: str | None) -> dict:
    return {"id": 1, "session_pk": 1, "tier": 2, "dry_run": False, "kind": kind, "service": service,
            "detail": None, "created_at": NOW, "incident_id": None}


def test_judge_says_whether_the_limits_allow_each_proposal_now():
    windows = cd.windows([row("restart", "api", "2026-03-01T10:00:00.000Z"),
                          row("restart", "api", "2026-03-01T11:00:00.000Z"),
                          row("restart", "web", "2026-03-01T11:00:00.000Z")], LIMITS, NOW)
    full = cd.judge(proposal("Restart", "api"), windows, LIMITS)  # kinds compared lower-cased
    assert (full["allowed"], full["limit"], full["remaining"], full["next_allowed_at"]) == (
        False, "2/4h", 0, "2026-03-01T14:00:00.000Z")
    assert cd.judgement(full) == "over its limit 2/4h: next allowed at 2026-03-01T14:00:00.000Z"
    room = cd.judge(proposal("restart", "web"), windows, LIMITS)
    assert (room["allowed"], room["remaining"], room["next_allowed_at"]) == (True, 1, None)
    assert cd.judgement(room) == "allowed now (1 of 2/4h left)"
    fresh = cd.judge(proposal("redeploy", None), windows, LIMITS)  # nothing in its window: all of it
    assert (fresh["allowed"], fresh["remaining"]) == (True, 1)
    free = cd.judge(proposal("cleanup", "api"), windows, LIMITS)
    assert (free["allowed"], free["limit"], free["remaining"]) == (True, None, None)
    assert cd.judgement(free) == "no limit"
    never = cd.judge(proposal("restart", "db"), [], cd.parse_limits("restart:0/1h"))
    assert cd.judgement(never) == "over its limit 0/1h: next allowed at never (limit 0)"


async def test_exceeded_by_is_the_window_at_the_sessions_action(db):
    await _session_with(db, [("restart", "api", "done", None)], at="2026-03-01T09:00:00.000Z")
    second = await _session_with(db, [("restart", "api", "done", None)], at="2026-03-01T10:00:00.000Z")
    assert await cd.exceeded_by(db, LIMITS, second) == []  # 2 of 2: at the limit, not over it
    third = await _session_with(db, [("restart", "api", "failed", None), ("restart", "web", "done", None),
                                     ("cleanup", "api", "done", None)], at="2026-03-01T11:00:00.000Z")
    [over] = await cd.exceeded_by(db, LIMITS, third)
    assert (over.kind, over.service, over.used, over.limit.text) == ("restart", "api", 3, "2/4h")
    # a later session's actions do not change what an earlier one did
    await _session_with(db, [("restart", "api", "done", None)], at="2026-03-01T11:30:00.000Z")
    assert await cd.exceeded_by(db, LIMITS, second) == []
    assert await cd.exceeded_by(db, {}, third) == []
