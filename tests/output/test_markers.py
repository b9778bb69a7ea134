from __future__ import annotations

from app.output.markers import MarkerCooldown, MarkerEvent, MarkerMemory, parse_markers


def test_event_forms_and_dotted_services():
    m = parse_markers("[EVENT:info] all good\n[EVENT:critical:api.payments-v2] down\n"
                      "prefix [EVENT:WARNING:nginx@web-1] slow")
    assert m.events == [MarkerEvent("info", None, "all good"), MarkerEvent("critical", "api.payments-v2", "down"),
                        MarkerEvent("warning", "nginx@web-1", "slow")]


def test_unknown_level_is_recorded_not_rewritten_silently():
    assert parse_markers("[EVENT:error:db] boom").events == [MarkerEvent("warning", "db", "boom", original_level="error")]


def test_memory_category_then_service():
    m = parse_markers("[MEMORY:disk:web-1.prod] grows 2%/day\n[MEMORY:pattern] deploys on Tuesday")
    assert m.memories == [MarkerMemory("disk", "web-1.prod", "grows 2%/day"),
                          MarkerMemory("pattern", None, "deploys on Tuesday")]


def test_cooldown_forms():
    m = parse_markers("[COOLDOWN:restart:nginx] success — ok\n[COOLDOWN:redeployment:api.v2] failure - image pull\n"
                      "[COOLDOWN:reboot:host] success")
    assert m.cooldowns == [MarkerCooldown("restart", "nginx", "success", "ok"),
                           MarkerCooldown("redeployment", "api.v2", "failure", "image pull")]


def test_two_markers_on_one_line_split():
    m = parse_markers("[EVENT:info:a] one [EVENT:warning:b] two")
    assert [(e.service, e.message) for e in m.events] == [("a", "one"), ("b", "two")]


def test_fences_inline_code_and_empty_messages_skipped():
    text = "```bash\n[EVENT:critical:x] example\n```\n`[EVENT:info] inline`\n[EVENT:info]\n~~~\n[MEMORY:a] b\n"
    assert not parse_markers(text)


def test_unclosed_fence_hides_the_rest():
    assert not parse_markers("```\n[EVENT:info:x] y")
