""""Reads see the writes before them": the real API in process, under load.

Before the reader pool, one shared reader connection served every request: under six concurrent
readers more than half of the memory creates answered 500 (the memory was created anyway), PATCH
answered stale values and about one escalation in fifty was dropped ("tier 1 gave no escalation
decision"). Here, while reader clients hammer the GET endpoints:

* writer clients (threads) create memories and PATCH them: every answer is 2xx, every POST
  answers with the row it created, every PATCH with the new value, and a GET after a client's
  own write sees it;
* escalation chains run one after another through ``POST /api/v1/runs`` with the fake CLI, tier 1
  asking to escalate: every chain reaches tier 2.

Counted and asserted: 0 errors (5xx or transport), 0 stale answers, 0 lost escalations. The
figures are printed (``-s``) and written to the test's ``record_property`` for the closing note.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fakes.claude_control import new_session_id, structured_stream
from tests.helpers import escalating, healthy

pytestmark = pytest.mark.timeout(120)

CHAINS = 30
WRITERS = 5  # memory-writing clients
READERS = 6  # clients reading the GET endpoints the whole time (twice the reader pool)
MEMORIES_PER_WRITER = 40  # each: POST, GET, PATCH, GET


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.problems: list[str] = []

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def problem(self, kind: str, what: str) -> None:
        with self.lock:
            self.counts[kind] += 1
            if len(self.problems) < 30:
                self.problems.append(f"{kind}: {what}")


def _call(tally: Tally, kind: str, fn: Callable[[], httpx.Response]) -> httpx.Response | None:
    """One request; a 5xx or a transport failure is an error (4xx is the caller's business)."""
    try:
        r = fn()
    except Exception as exc:  # every failure counts, whatever it is
        tally.problem("errors", f"{kind}: {type(exc).__name__}: {exc}")
        return None
    tally.add("reads" if kind.startswith("GET") else "writes")
    if r.status_code >= 500:
        tally.problem("errors", f"{kind}: HTTP {r.status_code} {r.text[:200]}")
        return None
    return r


def _writer(cl: httpx.Client, n: int, tally: Tally) -> None:
    for i in range(MEMORIES_PER_WRITER):
        sent = {"category": f"load-{n}", "value": f"writer {n} memory {i}", "service": f"svc-{n}-{i}",
                "confidence": 0.25}
        r = _call(tally, "POST /memories", lambda sent=sent: cl.post("/api/v1/memories", json=sent))
        if r is None:
            continue
        if r.status_code != 201:
            tally.problem("stale", f"POST answered {r.status_code}: {r.text[:200]}")
            continue
        row = r.json()
        if {k: row.get(k) for k in sent} != sent or not isinstance(row.get("id"), int):
            tally.problem("stale", f"POST answered {row} for {sent}")
            continue
        pk = row["id"]
        # a GET after the client's own write sees it
        r = _call(tally, "GET /memories", lambda: cl.get("/api/v1/memories", params={"category": f"load-{n}",
                                                                                       "limit": 500}))
        if r is not None and pk not in {m["id"] for m in r.json()}:
            tally.problem("stale", f"GET after POST misses memory {pk}")
        new_value = f"writer {n} memory {i} edited"
        patch = {"value": new_value, "confidence": 0.75}
        r = _call(tally, "PATCH /memories", lambda pk=pk, patch=patch: cl.patch(f"/api/v1/memories/{pk}", json=patch))
        if r is None:
            continue
        got = r.json()
        if r.status_code != 200 or got.get("value") != new_value or got.get("confidence") != 0.75:
            tally.problem("stale", f"PATCH answered {r.status_code} {got}")
        r = _call(tally, "GET /memories", lambda: cl.get("/api/v1/memories", params={"category": f"load-{n}",
                                                                                       "limit": 500}))
        if r is not None:
            seen = {m["id"]: m for m in r.json()}
            if seen.get(pk, {}).get("value") != new_value:
                tally.problem("stale", f"GET after PATCH shows {seen.get(pk)} for memory {pk}")


def _reader(cl: httpx.Client, n: int, tally: Tally, stop: threading.Event) -> None:
    paths = ["/api/v1/sessions", "/api/v1/memories", "/api/v1/events", "/api/v1/sessions?status=completed",
             "/api/v1/memories?active=true&limit=200"]
    for k in itertools.count(n):
        if stop.is_set():
            return
        path = paths[k % len(paths)]
        r = _call(tally, f"GET {path}", lambda path=path: cl.get(path))
        if r is not None and r.status_code == 200 and path == "/api/v1/sessions":
            rows = r.json()
            if rows:  # and one session in full, with its lines
                pk = rows[k % len(rows)]["id"]
                _call(tally, "GET /sessions/{id}", lambda pk=pk: cl.get(f"/api/v1/sessions/{pk}"))
                _call(tally, "GET /sessions/{id}/activity", lambda pk=pk: cl.get(f"/api/v1/sessions/{pk}/activity"))


def _run_chains(srv: Any, cl: httpx.Client, tally: Tally, chains: list[int]) -> None:
    for _ in range(CHAINS):
        deadline = time.monotonic() + 30
        while True:  # the previous cycle may still be releasing its lock
            r = _call(tally, "POST /runs", lambda: cl.post("/api/v1/runs", json={"tier": 1}))
            if r is not None and r.status_code == 202:
                chains.append(r.json()["id"])
                break
            if r is not None and r.status_code != 409:
                tally.problem("errors", f"POST /runs answered {r.status_code}: {r.text[:200]}")
                return
            if time.monotonic() > deadline:
                tally.problem("errors", "POST /runs stayed busy for 30 s")
                return
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while srv.state.supervisor.busy:
            if time.monotonic() > deadline:
                tally.problem("errors", f"chain {chains[-1]} did not finish in 30 s")
                return
            time.sleep(0.02)


def test_reads_see_the_writes_before_them_under_load(app_server, record_property):
    stages = []
    for n in range(CHAINS):  # invocation 2n is chain n's tier 1, 2n+1 its tier 2
        stages.append({"lines": structured_stream(new_session_id(), escalating(f"disk full, chain {n}"))})
        stages.append({"lines": structured_stream(new_session_id(), healthy(f"tier 2 fixed chain {n}"))})
    srv = app_server(stages=stages, max_tier=2)
    tally = Tally()
    stop = threading.Event()
    chains: list[int] = []
    clients = [srv.client() for _ in range(WRITERS + READERS + 1)]
    started = time.monotonic()
    try:
        readers = [threading.Thread(target=_reader, args=(clients[i], i, tally, stop)) for i in range(READERS)]
        writers = [threading.Thread(target=_writer, args=(clients[READERS + i], i, tally)) for i in range(WRITERS)]
        runner = threading.Thread(target=_run_chains, args=(srv, clients[-1], tally, chains))
        for t in (*readers, *writers, runner):
            t.start()
        for t in (*writers, runner):
            t.join(timeout=90)
        stop.set()
        for t in readers:
            t.join(timeout=30)
        elapsed = time.monotonic() - started

        # every chain escalated: its tier 1 handed over to a tier 2 that completed
        cl = clients[-1]
        lost: list[str] = []
        for pk in chains:
            parent = cl.get(f"/api/v1/sessions/{pk}").json()
            child_pk = parent.get("escalated_to")
            child = cl.get(f"/api/v1/sessions/{child_pk}").json() if child_pk else None
            if (parent["escalation_needed"] is not True or parent["attention"] is not None or child is None
                    or child["tier"] != 2 or child["status"] != "completed"):
                lost.append(f"session {pk}: escalation_needed={parent['escalation_needed']} "
                            f"attention={parent['attention']!r} escalated_to={child_pk}")
        tally.counts["lost"] = len(lost)
    finally:
        stop.set()
        for c in clients:
            c.close()

    figures = {"chains": len(chains), "writes": tally.counts["writes"], "reads": tally.counts["reads"],
               "concurrent_clients": WRITERS + READERS + 1, "errors": tally.counts["errors"],
               "stale": tally.counts["stale"], "lost": tally.counts["lost"], "seconds": round(elapsed, 1)}
    print("\nreads under load:", figures)
    for key, value in figures.items():
        record_property(key, value)
    assert not tally.problems and not lost, (figures, tally.problems, lost)
    assert len(chains) == CHAINS and figures["writes"] >= WRITERS * MEMORIES_PER_WRITER * 2 + CHAINS
    assert (figures["errors"], figures["stale"], figures["lost"]) == (0, 0, 0)
