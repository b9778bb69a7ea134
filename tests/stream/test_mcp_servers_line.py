"""init's ``mcp_servers`` as the parser gives it to the recorder (``SystemLine.mcp_servers``): the
CLI's ``[{name, status}]`` (reference §4.1), anything else in that place read safely."""

from __future__ import annotations

import json

import pytest

from app.stream.parser import SystemLine, parse_line


def init(servers: object) -> SystemLine:
    line = parse_line(json.dumps({"type": "system", "subtype": "init", "session_id": "s", "mcp_servers": servers}))
    assert isinstance(line, SystemLine)
    return line


@pytest.mark.parametrize(("servers", "expected"), [
    ([{"name": "ops", "status": "connected"}], [{"name": "ops", "status": "connected"}]),
    ([{"name": "ops", "status": "connected"}, {"name": "ghost", "status": "failed"}],
     [{"name": "ops", "status": "connected"}, {"name": "ghost", "status": "failed"}]),
    ([], []),
    ([{"name": "ops"}], [{"name": "ops", "status": ""}]),  # a status missing
    ([{"name": "ops", "status": 3}], [{"name": "ops", "status": "3"}]),
    ([{"status": "failed"}, "ops", 7, None, {"name": 5}], []),  # no name: left out
    ([{"name": "x" * 500, "status": "failed"}], [{"name": "x" * 200, "status": "failed"}]),
    ([{"name": f"s{i}", "status": "connected"} for i in range(150)],
     [{"name": f"s{i}", "status": "connected"} for i in range(100)]),
    ({"ops": "connected"}, None),
    (None, None),
])
def test_mcp_servers_of_an_init_line(servers, expected):
    line = init(servers)
    assert line.mcp_servers == expected
    shown = line.display()
    assert shown.startswith("init model=")
    if expected:
        assert f" mcp {expected[0]['name'][:20]}" in shown
