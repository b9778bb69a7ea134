"""The OpenAPI document matches behaviour: schemathesis, every check, against the app
in process, once without a token and once with one, must find nothing.

The run is the CLI's ``schemathesis run --checks all`` through the Python API: every phase
(examples, coverage, fuzzing, stateful), a fixed seed and a bounded number of examples per
operation. It goes through the ASGI app itself (schemathesis runs its lifespan: store,
supervisor), so ``POST /runs`` starts real cycles of a fake CLI that prints nothing and exits at
once: runs are quick, and a run refused while one is going (409) is documented behaviour.
Requests carry a loopback ``Host`` (without a token any other Host is refused, as documented).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.engine import events, from_schema  # noqa: E402
from schemathesis.python import asgi  # noqa: E402

from app.config import Settings  # noqa: E402
from app.web.app import create_app  # noqa: E402
from tests.fakes.claude_control import make_fake_claude  # noqa: E402

SEED = 20260923
MAX_EXAMPLES = 10  # per operation and phase, without a token
MAX_EXAMPLES_TOKEN = 6  # with one: the same operations, what differs is the authentication
HOST = {"Host": "127.0.0.1:8080"}
TOKEN = "schemathesis-token-0123456789"
# Every check schemathesis has for OpenAPI; all of them must have run (max_response_time only
# runs with a limit, which we do not set).
EXPECTED_CHECKS = {
    "not_a_server_error", "status_code_conformance", "content_type_conformance", "response_headers_conformance",
    "response_schema_conformance", "positive_data_acceptance", "negative_data_rejection",
    "missing_required_header", "unsupported_method", "use_after_free", "ensure_resource_availability",
    "ignored_auth",
}


def run_schemathesis(tmp_path: Path, token: str | None) -> dict[str, Any]:
    fake = make_fake_claude(tmp_path / "bin", [{"lines": []}])
    settings = Settings(db=tmp_path / "st.db", home=tmp_path / "state", claude_bin=str(fake.path),
                        schedule=False, kill_grace=1)
    app = create_app(settings, token=token)
    config: dict[str, Any] = {"seed": SEED, "headers": HOST,
                              "generation": {"max-examples": MAX_EXAMPLES_TOKEN if token else MAX_EXAMPLES,
                                             "database": "none"},
                              # A schema-valid body can still name an output schema that
                              # is not stored, or carry one the preflight refuses (what the pinned
                              # CLI drops cannot be said in OpenAPI): those are documented 422s.
                              # A maintenance window's times are read against the clock (an end in
                              # the past, more than 90 days): also documented 422s.
                              "operations": [{
                                  "include-path-regex": "^/(runs|schemas|maintenance)$", "include-method": "POST",
                                  "checks": {"positive_data_acceptance": {"expected-statuses": [
                                      "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]}}},
                                  # A run-time setting's value is checked by the Settings class: a
                                  # cron expression's syntax, a value the redactor would mask (400).
                                  {"include-path-regex": "^/config$", "include-method": "PUT",
                                   "checks": {"positive_data_acceptance": {"expected-statuses": [
                                       "2xx", "400", "401", "403", "409", "429", "5xx"]}}},
                                  # No Models API here (tests/web/conftest.py: a closed port): the
                                  # documented 502, a gateway's failure, not the server's own.
                                  {"include-path-regex": "^/models", "checks": {"not_a_server_error": {
                                      "expected-statuses": ["2xx", "3xx", "4xx", "502", "504"]}}}]}
    if token:
        config["auth"] = {"openapi": {"bearer": {"bearer": token}}}
    cfg = SchemathesisConfig.from_dict(config)
    cfg.projects.override.checks.update(included_check_names=["all"])  # --checks all
    started = time.monotonic()
    failures: list[str] = []
    errors: list[str] = []
    checks: Counter[str] = Counter()
    cases = 0
    finished = None
    try:
        schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app, config=cfg, headers=HOST)
        for event in from_schema(schema).execute():
            if isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
                cases += len(event.recorder.cases)
                for nodes in event.recorder.checks.values():
                    for node in nodes:
                        checks[node.name] += 1
                        if node.failure_info is not None:
                            failure = node.failure_info.failure
                            failures.append(f"{event.recorder.label}: {node.name}: {failure.title}: "
                                            f"{(failure.message or '')[:300]}\n{node.failure_info.code_sample}")
            elif isinstance(event, (events.NonFatalError, events.FatalError)):
                errors.append(repr(event))
            elif isinstance(event, events.EngineFinished):
                finished = event
    finally:
        asgi.shutdown_lifespans()  # the app's lifespan: stop running sessions, close the store
    assert finished is not None
    return {"failures": failures, "errors": errors, "checks": checks, "cases": cases,
            "stop_reason": str(finished.stop_reason), "after_run": finished.failures,
            "seconds": time.monotonic() - started}


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token", "token"])
def test_schemathesis_finds_nothing(tmp_path, token):
    result = run_schemathesis(tmp_path, token)
    print(f"schemathesis ({'token' if token else 'no token'}): {result['cases']} cases, "
          f"{sum(result['checks'].values())} checks, seed {SEED}, {result['seconds']:.1f} s")
    assert result["stop_reason"] == "completed"
    assert not result["errors"], result["errors"]
    assert not result["failures"], "\n\n".join(sorted(set(result["failures"]))[:20])
    assert not result["after_run"]
    assert set(result["checks"]) >= EXPECTED_CHECKS, EXPECTED_CHECKS - set(result["checks"])
    assert result["cases"] > 300
