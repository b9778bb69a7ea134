"""Secrets are never stored, shown or re-sent.

One supervised session prints every shape of tests/secrets_corpus.py (59 of them) everywhere a
session can: assistant text, a Bash command, its tool result, the StructuredOutput (summary, events,
memories, service details, escalation), the result text and stderr; the operator's prompt holds
some too; memories are created and edited through the API with secrets in them; a handoff.json
carries more. Then the database files (main and WAL, byte by byte), every API response and every
page are searched for each secret, in plain and JSON-escaped form: none may survive.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.redact import MASK
from tests.fakes import claude_control as cc
from tests.secrets_corpus import CORPUS, ENV_SECRET_NAME, ENV_SECRET_VALUE, escaped, secrets

TEXTS = [text for _, text, _ in CORPUS]


def _agent_output() -> dict:
    """A schema-valid report that carries a share of the corpus in each of its text fields."""
    chunk = [TEXTS[i::6] for i in range(6)]
    return {
        "summary": " | ".join(chunk[0]),
        "events": [{"level": "warning", "service": "vault", "message": t} for t in chunk[1]],
        "memories": [{"key": f"vault:secret{i}", "value": t} for i, t in enumerate(chunk[2])],
        "escalation": {"needed": False, "reason": " ; ".join(chunk[3]), "context": " ; ".join(chunk[4]),
                       "failed_checks": []},
        "services_checked": [{"name": f"svc{i}", "status": "degraded", "detail": t} for i, t in enumerate(chunk[5])],
    }


def _stream() -> list[str]:
    sid = cc.new_session_id()
    lines = cc.structured_stream(sid, _agent_output(), text="Found these:\n" + "\n".join(TEXTS),
                                 command="cat /etc/app/.env; " + " ".join(TEXTS[:20]),
                                 command_output="\n".join(TEXTS))
    lines[-1]["result"] = "Report: " + " / ".join(TEXTS)
    return [escaped(json.dumps(line)) for line in lines]


def _forms(secret: str) -> list[bytes]:
    """The byte sequences a secret could be stored or shown as."""
    forms = {secret, json.dumps(secret)[1:-1], secret.replace("/", "\\/"),
             secret.replace("&", "&amp;"), secret.replace("+", "&#43;")}
    if "-" in secret:
        forms.add(secret.replace("-", "\\u002d"))
    return [f.encode() for f in forms if len(f) >= 8]


def _survivors(blob: bytes) -> list[str]:
    return [s for s in secrets() if any(form in blob for form in _forms(s))]


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SECRET_NAME, ENV_SECRET_VALUE)


def _wait_finished(client, pk: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = client.get(f"/api/v1/sessions/{pk}").json()
        if row["status"] != "running":
            return row
        time.sleep(0.1)
    raise AssertionError(f"session {pk} still running after {timeout} s")


def test_no_secret_survives_in_the_database_the_api_or_the_pages(app_server, secret_env, tmp_path: Path):
    stderr = "warning: leaked " + " ".join(TEXTS[::3]) + "\n"
    server = app_server(token="t0ken-for-the-dashboard-7788", stages=[
        {"lines": _stream(), "stderr": stderr, "exit_code": 0}])
    with server.client() as client:
        started = client.post("/api/v1/runs", json={"tier": 1, "prompt": "check vault; creds: " + " ".join(TEXTS[:12])})
        assert started.status_code == 202, started.text
        pk = started.json()["id"]
        row = _wait_finished(client, pk)
        assert row["status"] == "completed" and row["source"] == "structured_output", row

        created = client.post("/api/v1/memories", json={"category": "creds", "service": "db",
                                                         "value": "root login " + TEXTS[37]})
        assert created.status_code == 201 and MASK in created.json()["value"]
        mid = created.json()["id"]
        patched = client.patch(f"/api/v1/memories/{mid}", json={"value": "rotated to " + TEXTS[41]})
        assert patched.status_code == 200 and MASK in patched.json()["value"]

        # The legacy fallback: no structured output, escalation from a handoff.json full of secrets.
        cwd = tmp_path / "legacy"
        cwd.mkdir()
        (cwd / "handoff.json").write_text(json.dumps({"needed": True, "reason": TEXTS[25], "context": TEXTS[29],
                                                      "failed_checks": [TEXTS[30]]}))
        legacy = tmp_path / "legacy.jsonl"
        sid = cc.new_session_id()
        legacy.write_text("\n".join(json.dumps(x) for x in [
            cc.init_line(sid, cwd=str(cwd)), cc.assistant_text(sid, "[EVENT:critical:db] " + TEXTS[44]),
            cc.result_success(sid, None, result_text="done " + TEXTS[45])]) + "\n")

        async def ingest(state):
            from app.engine.ingest import ingest_path

            report, _ = await ingest_path(state.db, legacy, state.validator, state.settings)
            return report

        report = server.run_async(ingest)
        assert report["source"] == "markers" and report["escalation"]["needed"] is True

        shown: list[tuple[str, bytes]] = []
        for url in ["/api/v1/sessions", f"/api/v1/sessions/{pk}", f"/api/v1/sessions/{pk}/activity?limit=5000",
                    f"/api/v1/sessions/{pk}/result", f"/api/v1/sessions/{report['id']}",
                    f"/api/v1/sessions/{report['id']}/result", "/api/v1/events", "/api/v1/memories",
                    "/", "/sessions", f"/sessions/{pk}", f"/sessions/{report['id']}", "/events", "/memories"]:
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code)
            shown.append((url, resp.content))

    leaks = {url: _survivors(body) for url, body in shown}
    assert {u: s for u, s in leaks.items() if s} == {}, "secrets shown by the API or pages"
    # What the session shows must still be there, masked, not dropped.
    assert any(MASK.encode() in body for _, body in shown)

    db_file = Path(server.settings.db)
    files = [p for p in (db_file, db_file.with_name(db_file.name + "-wal")) if p.exists()]
    blob = b"".join(p.read_bytes() for p in files)
    assert _survivors(blob) == [], f"secrets stored in {[p.name for p in files]}"
    assert len(blob) > 0 and MASK.encode() in blob


def test_the_corpus_is_large_and_every_shape_is_masked_alone():
    from app.redact import Redactor

    assert len(CORPUS) >= 50
    redact = Redactor(secrets=[ENV_SECRET_VALUE])
    for name, text, secret in CORPUS:
        line = escaped(json.dumps({"type": "user", "message": {"content": text}}))
        out = redact(line)
        json.loads(out)  # still a JSON line
        assert not any(form in out.encode() for form in _forms(secret)), name
