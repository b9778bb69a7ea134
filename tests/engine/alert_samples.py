"""The alert senders' sample payloads (tests/fixtures/alerts/) and the problems a refused body
lists: shared by the tests of app/engine/alerts.py and its neighbours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.alert_payloads import AlertPayloadError
from app.engine.alerts import parse_payload

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def problems(body: object) -> list[dict[str, str]]:
    with pytest.raises(AlertPayloadError) as info:
        parse_payload(body)
    return info.value.problems


def paths(body: object) -> list[str]:
    return [p["path"] for p in problems(body)]
