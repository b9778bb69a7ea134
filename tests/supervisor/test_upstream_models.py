"""app/supervisor/upstream_models.py against the fake Anthropic API on loopback (real HTTP).

The list and its pages, the cache (an injected clock), one fetch at a time however many callers,
a refresh, and every failure: the upstream down, a rejected key, a body that is not the list, no
answer in time — each a clear error naming the URL, the last good list kept and marked stale,
and the credential in no answer and no log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest

from app.config import Settings
from app.supervisor.upstream_models import FAILURE_HOLD, ModelCatalog
from tests.fakes.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.timeout(60)

KEY = "sk-ant-api03-models-test-key-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake():
    with FakeAnthropic(keys={KEY}) as api:
        yield api
    assert not api.errors


def catalog(tmp_path, env: dict[str, str], clock: Clock | None = None, **settings) -> ModelCatalog:
    values = {"home": tmp_path / "state", "db": tmp_path / "t.db", "models_cache_ttl": 600, "models_timeout": 2.0,
              **settings}
    return ModelCatalog(Settings(**values), environ=env, clock=clock or Clock())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_the_list_its_pages_and_the_request_the_cli_would_send(fake, tmp_path):
    fake.models = [{"id": f"claude-m{i}", "display_name": f"Model {i}"} for i in range(5)]
    cat = catalog(tmp_path, {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY,
                             "ANTHROPIC_AUTH_TOKEN": "not-sent-when-a-key-is-set"})
    cat.page_limit = 2
    view = await cat.get()
    assert view.status == 200
    body = view.body
    assert [m["id"] for m in body["models"]] == [f"claude-m{i}" for i in range(5)]
    assert body["models"][0] == {"id": "claude-m0", "display_name": "Model 0", "created_at": "2025-01-01T00:00:00Z"}
    assert body["source_url"] == f"{fake.url}/v1/models" and body["stale"] is False and body["age_s"] == 0
    assert body["fetched_at"] and not body["truncated"] and "error" not in body
    pages = [r for r in fake.requests if r["kind"] == "models"]
    assert [r["path"] for r in pages] == ["/v1/models?limit=2", "/v1/models?limit=2&after_id=claude-m1",
                                          "/v1/models?limit=2&after_id=claude-m3"]
    headers = pages[0]["headers"]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert KEY not in json.dumps(body)


async def test_an_auth_token_goes_as_a_bearer(fake, tmp_path):
    cat = catalog(tmp_path, {"ANTHROPIC_BASE_URL": fake.url + "/", "ANTHROPIC_AUTH_TOKEN": KEY})
    assert (await cat.get()).status == 200
    [req] = [r for r in fake.requests if r["kind"] == "models"]
    assert req["headers"]["authorization"] == f"Bearer {KEY}" and "x-api-key" not in req["headers"]


async def test_kept_for_the_ttl_then_asked_again_and_refresh_asks_at_once(fake, tmp_path):
    clock = Clock()
    cat = catalog(tmp_path, {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}, clock, models_cache_ttl=60)
    first = await cat.get()
    clock.now += 59
    second = await cat.get()
    assert fake.models_requests == 1 and second.body["age_s"] == 59 and second.body["models"] == first.body["models"]
    clock.now += 2  # past the TTL
    fake.models = [{"id": "claude-new", "display_name": "New"}]
    third = await cat.get()
    assert fake.models_requests == 2 and [m["id"] for m in third.body["models"]] == ["claude-new"]
    assert third.body["age_s"] == 0
    refreshed = await cat.get(refresh=True)  # within the TTL: asks anyway
    assert fake.models_requests == 3 and refreshed.status == 200


async def test_concurrent_callers_share_one_fetch(fake, tmp_path):
    fake.models_delay = 0.5
    cat = catalog(tmp_path, {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}, models_cache_ttl=0)
    views = await asyncio.gather(*(cat.get() for _ in range(20)), cat.get(refresh=True))
    assert fake.models_requests == 1  # TTL 0 and a refresh among them: still one request in flight
    assert {v.status for v in views} == {200} and len({json.dumps(v.body["models"]) for v in views}) == 1
    # a caller that gives up (a closed browser) does not cancel the fetch the others wait for
    waiter = asyncio.ensure_future(cat.get())
    other = asyncio.ensure_future(cat.get())
    await asyncio.sleep(0.1)
    waiter.cancel()
    assert (await other).status == 200 and fake.models_requests == 2
    # once it ended, the next call (TTL 0) asks again
    await cat.get()
    assert fake.models_requests == 3


async def test_failures_name_the_url_keep_the_stale_list_and_never_show_the_key(fake, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}
    cat = catalog(tmp_path, env, clock, models_timeout=0.5, models_cache_ttl=60)
    good = await cat.get()
    assert good.status == 200 and len(good.body["models"]) == 3
    url = f"{fake.url}/v1/models"

    # a body that is not the list
    fake.models_raw = b"<html>maintenance " + KEY.encode() + b"</html>"
    clock.now += 5
    bad = await cat.get(refresh=True)
    assert bad.status == 502 and bad.body["error"] == "upstream_bad_answer"
    assert bad.body["detail"].startswith(f"{url} answered with something that is not the Models API's list: not JSON")
    assert bad.body["stale"] is True and bad.body["models"] == good.body["models"] and bad.body["age_s"] == 5
    assert f"fetched at {good.body['fetched_at']} (5 s ago)" in bad.body["detail"]
    fake.models_raw = None

    # within FAILURE_HOLD the failure is answered again without asking; after it, the good list while
    # its TTL lasts, then asked again
    asked = fake.models_requests
    assert (await cat.get()).body["error"] == "upstream_bad_answer" and fake.models_requests == asked
    clock.now += FAILURE_HOLD
    assert (await cat.get()).body["age_s"] == 5 + FAILURE_HOLD and fake.models_requests == asked
    clock.now += 60
    assert (await cat.get()).body["age_s"] == 0 and fake.models_requests == asked + 1

    # the key refused: the API's message, what to check
    cat.environ = {**env, "ANTHROPIC_API_KEY": KEY + "-wrong"}
    refused = await cat.get(refresh=True)
    assert refused.status == 502 and refused.body["error"] == "upstream_error"
    assert refused.body["detail"].startswith(f"{url} answered HTTP 401 authentication_error: invalid x-api-key; "
                                             "check ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN")
    assert refused.body["stale"] is True
    no_key = catalog(tmp_path, {"ANTHROPIC_BASE_URL": fake.url}, clock)
    assert "TierOps' environment has no ANTHROPIC_API_KEY" in (await no_key.get()).body["detail"]
    cat.environ = env

    # an error status of the upstream's own
    fake.models_error = 529
    overloaded = await cat.get(refresh=True)
    assert overloaded.body["detail"].startswith(f"{url} answered HTTP 529 overloaded_error")
    fake.models_error = None

    # no answer in time: 504
    fake.models_delay = 2.0
    slow = await cat.get(refresh=True)
    assert slow.status == 504 and slow.body["error"] == "upstream_timeout" and slow.body["stale"] is True
    assert slow.body["detail"].startswith(f"no complete answer from {url} within 0.5 s (TIEROPS_MODELS_TIMEOUT)")
    fake.models_delay = 0.0

    # nobody listening: connection refused, and no list ever fetched: not stale, empty
    port = closed_port()
    down = catalog(tmp_path, {"ANTHROPIC_BASE_URL": f"http://user:pw-in-url@127.0.0.1:{port}", "ANTHROPIC_API_KEY": KEY})
    view = await down.get()
    assert view.status == 502 and view.body["error"] == "upstream_unreachable"
    assert view.body["detail"] == f"cannot reach http://127.0.0.1:{port}/v1/models: Connection refused"
    assert view.body["stale"] is False and view.body["models"] == [] and view.body["fetched_at"] is None
    assert "pw-in-url" not in json.dumps(view.body)

    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "models list unavailable" in text and KEY not in text and "pw-in-url" not in text
    for answer in (bad, refused, overloaded, slow, view):
        assert KEY not in json.dumps(answer.body)
