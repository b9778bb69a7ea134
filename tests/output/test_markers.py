from __future__ import annotations

import json

import pytest

from app.engine.ingest import ingest_path
from app.output.markers import MarkerCooldown, MarkerEvent, MarkerMemory, MarkerSet, map_level, parse_markers
from tests.helpers import fixture_stream


def test_event_forms_and_dotted_services():
    m = parse_markers("[EVENT:info] all good\n[EVENT:critical:api.payments-v2] down\n"
                      "prefix [EVENT:WARNING:nginx@web-1] slow")
    assert m.events == [MarkerEvent("info", None, "all good"), MarkerEvent("critical", "api.payments-v2", "down"),
                        MarkerEvent("warning", "nginx@web-1", "slow")]


# -- levels: as the Go original's normalizeEventLevel maps them -------------------------------------

@pytest.mark.parametrize("written,stored", [
    ("info", "info"), ("INFO", "info"),
    ("warning", "warning"), ("warn", "warning"), ("Warn", "warning"), ("degraded", "warning"),
    ("DEGRADED", "warning"),
    ("critical", "critical"), ("Critical", "critical"), ("error", "critical"), ("ERROR", "critical"),
    ("err", "critical"), ("Err", "critical"), ("fatal", "critical"), ("FATAL", "critical"),
    ("failure", "critical"), ("failed", "critical"), ("Failed", "critical"),
])
def test_the_levels_the_go_original_names_map_without_a_flag(written, stored):
    assert map_level(written) == (stored, None)
    assert parse_markers(f"[EVENT:{written}:db] boom").events == [MarkerEvent(stored, "db", "boom")]


@pytest.mark.parametrize("written", ["urgent", "P1", "sev-2", "notice", "debug", "success", "ok", "healthy",
                                     "health-check-success", "page"])
def test_any_other_level_is_info_as_in_the_go_original_and_kept_as_written(written):
    (e,) = parse_markers(f"[EVENT:{written}:db] boom").events
    assert (e.level, e.original_level) == ("info", written)  # original_level set = the flag


def test_level_may_have_spaces_around_it():
    assert parse_markers("[EVENT: error :db] boom").events == [MarkerEvent("critical", "db", "boom")]


# -- names: up to the closing bracket -------------------------------------------------------------

def test_service_names_run_to_the_closing_bracket():
    m = parse_markers("[EVENT:critical:payments api v2] 5xx\n[EVENT:warning:web-1.example.com:8080] slow\n"
                      "[EVENT:info:  spaced   out  ] ok\n[EVENT:info:svc/with@odd_chars.v2-b] fine")
    assert [e.service for e in m.events] == ["payments api v2", "web-1.example.com:8080", "spaced out",
                                             "svc/with@odd_chars.v2-b"]


def test_blank_service_is_none_and_brackets_end_a_name():
    assert parse_markers("[EVENT:info: ] none").events == [MarkerEvent("info", None, "none")]
    assert not parse_markers("[EVENT:info:a[b] no\n[EVENT:info:never closed")


def test_memory_category_then_service():
    m = parse_markers("[MEMORY:disk:web-1.prod] grows 2%/day\n[MEMORY:pattern] deploys on Tuesday\n"
                      "[MEMORY:root cause:payments api] pool exhausted\n[MEMORY:baseline:db:5432] p99 40ms")
    assert m.memories == [MarkerMemory("disk", "web-1.prod", "grows 2%/day"),
                          MarkerMemory("pattern", None, "deploys on Tuesday"),
                          MarkerMemory("root cause", "payments api", "pool exhausted"),
                          MarkerMemory("baseline", "db:5432", "p99 40ms")]


def test_cooldown_forms():
    m = parse_markers("[COOLDOWN:restart:nginx] success — ok\n[COOLDOWN:redeployment:api.v2] failure - image pull\n"
                      "[COOLDOWN:reboot:host] success\n[COOLDOWN:restart:payments api] success")
    assert m.cooldowns == [MarkerCooldown("restart", "nginx", "success", "ok"),
                           MarkerCooldown("redeployment", "api.v2", "failure", "image pull"),
                           MarkerCooldown("restart", "payments api", "success", "")]


def test_two_markers_on_one_line_split():
    m = parse_markers("[EVENT:info:a] one [EVENT:warning:b] two")
    assert [(e.service, e.message) for e in m.events] == [("a", "one"), ("b", "two")]


def test_fences_inline_code_and_empty_messages_skipped():
    text = "```bash\n[EVENT:critical:x] example\n```\n`[EVENT:info] inline`\n[EVENT:info]\n~~~\n[MEMORY:a] b\n"
    assert not parse_markers(text)


def test_unclosed_fence_hides_the_rest():
    assert not parse_markers("```\n[EVENT:info:x] y")


# -- a marker repeated later in the session is one finding -----------------------------------------

def test_repeated_markers_across_text_blocks_are_one_each():
    m = MarkerSet()
    first = ("[EVENT:error:db] replication lag 40s\n[MEMORY:baseline:db] lag under 1s\n"
             "[COOLDOWN:restart:db] success — back in 3s")
    m.scan(first)
    m.scan("Summary:\n" + first.replace("40s", "40s  ").replace("lag under", "lag  under"))  # whitespace aside
    m.scan("[EVENT:fatal:db] replication lag 40s")  # another Go spelling of the same stored event
    assert m.events == [MarkerEvent("critical", "db", "replication lag 40s")]
    assert m.memories == [MarkerMemory("baseline", "db", "lag under 1s")]
    assert m.cooldowns == [MarkerCooldown("restart", "db", "success", "back in 3s")]


def test_different_content_is_not_deduplicated():
    m = parse_markers("[EVENT:warning:db] lag\n[EVENT:critical:db] lag\n[EVENT:warning:db2] lag\n[EVENT:warning] lag\n"
                      "[COOLDOWN:restart:db] success\n[COOLDOWN:restart:db] failure\n"
                      "[MEMORY:port:db] 5432\n[MEMORY:port:db] 5433")
    assert len(m.events) == 4 and len(m.cooldowns) == 2 and len(m.memories) == 2


def _capture_with_marker_text(tmp_path, text: str):
    """The real d_text_only capture (a model that repeats its final message after the CLI's
    "call StructuredOutput now" nudge) with that final text replaced by ``text``."""
    lines = []
    for raw in fixture_stream("d_text_only").read_text().splitlines():
        line = json.loads(raw)
        if line.get("type") == "assistant":
            for block in line["message"]["content"]:
                if block.get("type") == "text" and block["text"].startswith("Everything looks healthy"):
                    block["text"] = text
        lines.append(json.dumps(line))
    path = tmp_path / "stream.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_the_real_repeated_final_message_routes_each_marker_once(tmp_path, db, validator, settings):
    text = ("Checked.\n[EVENT:error:payments api] 5xx at 12%\n[EVENT:urgent:db.main] disk 91%\n"
            "[MEMORY:quirk:payments api] restarts take 40s\n[COOLDOWN:restart:payments api] failure — still 5xx")
    assert fixture_stream("d_text_only").read_text().count("Everything looks healthy (plain text") >= 2
    report, _ = await ingest_path(db, _capture_with_marker_text(tmp_path, text), validator, settings)
    assert report["source"] == "markers" and report["degraded"]
    assert report["events"] == [
        {"level": "critical", "original_level": None, "service": "payments api", "message": "5xx at 12%"},
        {"level": "info", "original_level": "urgent", "service": "db.main", "message": "disk 91%"}]
    assert [(m["service"], m["category"], m["value"], m["times_seen"]) for m in report["memories"]] == [
        ("payments api", "quirk", "restarts take 40s", 1)]
    assert report["cooldowns"] == [
        {"action": "restart", "service": "payments api", "outcome": "failure", "note": "still 5xx",
         "evidence_status": "uncited", "evidence": []}]
