"""SSE fan-out latency and its cost to ingestion (issue #4).

Starts ``create_app`` on a real uvicorn (127.0.0.1, a free port, one worker, in a thread of this
process) whose claude binary is a tiny dedicated fake: it prints an init line, N assistant text
lines ~``--delay`` apart, each carrying its own write time (``t=<time.time()>``), then a valid
StructuredOutput result. For each client count (default 0, 1, 10, 100) one session is run through
``POST /api/v1/runs``; the clients (asyncio + httpx streaming, all in ONE separate process so they
do not share the server's event loop or GIL) connect to ``/sessions/{id}/stream`` before the fake
prints anything (the fake waits on a gate file), then read until ``event: end``.

Reported per client count:

* latency: line written by the fake (its ``t=``) -> event received by a client, p50/p99/max over
  every event of every client (replayed events after a ``resync`` included: that is what a user sees);
* events per client (distinct seqs; every client must get every line exactly once), resyncs;
* ingestion: lines/s stored (first to last text line, from the activity table's ``ts``) and the
  store lag (``ts`` - ``t``) p50/p99, to compare 0 clients with 100.

Bounded: every scenario has a deadline and the whole run stays under ~90 s; only 127.0.0.1.

    python bench/sse.py [--lines 2000] [--delay 0.001] [--clients 0,1,10,100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import re
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T_RE = re.compile(r"t=(\d+\.\d+) i=(\d+)")
TARGET_P99_MS = 20.0
SCENARIO_TIMEOUT = 35.0  # per client count: clients still reading then are cancelled (reported incomplete)
TIME_BUDGET = 90.0

FAKE_CLI = '''#!{python} -I
# bench/sse.py's fake claude: gate, init, N timestamped text lines, a valid result.
import json, os, sys, time
c = json.load(open({control!r}, encoding="utf-8"))
deadline = time.time() + 60
while not os.path.exists(c["gate"]) and time.time() < deadline:
    time.sleep(0.002)
w = sys.stdout.write
fl = sys.stdout.flush
w(c["init"] + "\\n"); fl()
text, n, delay = c["text"], c["n"], c["delay"]
nxt = time.perf_counter()
for i in range(n):
    w(text.replace("__T__", "t=%.6f i=%d" % (time.time(), i)) + "\\n"); fl()
    nxt += delay
    rest = nxt - time.perf_counter()
    if rest > 0:
        time.sleep(rest)
for line in c["tail"]:
    w(line + "\\n"); fl()
'''


# --- the clients (a separate process) -------------------------------------------------------

async def _client(http, url: str, connected: asyncio.Event, counter: list[int], k: int) -> dict:
    import httpx

    lat: list[float] = []
    seqs: list[int] = []
    resyncs = 0
    status = None
    try:
        async with http.stream("GET", url) as r:
            status = r.status_code
            counter[0] += 1
            if counter[0] == k:
                connected.set()
            event = ""
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    now = time.time()
                    if event == "activity":
                        m = T_RE.search(line)
                        if m:
                            lat.append(now - float(m.group(1)))
                    elif event == "resync":
                        resyncs += 1
                    elif event == "end":
                        break
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("id:"):
                    seqs.append(int(line[3:].strip()))
    except (httpx.HTTPError, asyncio.CancelledError) as exc:
        return {"status": status, "lat": lat, "seqs": seqs, "resyncs": resyncs, "error": repr(exc)}
    return {"status": status, "lat": lat, "seqs": seqs, "resyncs": resyncs, "error": None}


async def _run_clients(base: str, pk: int, k: int, conn) -> list[dict]:
    import httpx

    limits = httpx.Limits(max_connections=k + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=httpx.Timeout(60, read=60)) as http:
        connected = asyncio.Event()
        counter = [0]
        tasks = [asyncio.create_task(_client(http, f"/sessions/{pk}/stream", connected, counter, k)) for _ in range(k)]
        await asyncio.wait_for(connected.wait(), 20)
        conn.send(("connected", None))
        _done, pending = await asyncio.wait(tasks, timeout=SCENARIO_TIMEOUT)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() if t.done() and not t.cancelled() else {"status": None, "lat": [], "seqs": [],
                                                                     "resyncs": 0, "error": "timeout"}
                for t in tasks]


def client_process(base: str, conn) -> None:
    """Serve ("run", pk, k) commands until ("quit",)."""
    while True:
        cmd = conn.recv()
        if cmd[0] == "quit":
            return
        _, pk, k = cmd
        try:
            cpu = time.process_time()
            results = asyncio.run(_run_clients(base, pk, k, conn))
            conn.send(("done", {"clients": results, "cpu": time.process_time() - cpu}))
        except Exception as exc:  # report, never hang the bench
            conn.send(("error", repr(exc)))


# --- the server (a thread of this process) --------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_rendering() -> None:
    """What-if for the report: render each line's SSE event once, not once per client (the shipped
    streams.py calls render_activity() for every subscriber). Patches this process only."""
    from collections import OrderedDict

    from app.web import streams

    original = streams._activity_event
    cache: OrderedDict = OrderedDict()

    def cached(row: dict):
        key = (row.get("session_pk"), row["seq"], row.get("attempt"))
        ev = cache.get(key)
        if ev is None:
            ev = cache[key] = original(row)
            if len(cache) > 20_000:
                cache.popitem(last=False)
        return ev

    streams._activity_event = cached


def start_server(settings):
    import uvicorn

    from app.web.app import create_app

    app = create_app(settings, token=None)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), name="bench-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return app, server, thread, f"http://127.0.0.1:{port}"


def write_fake(directory: Path, n: int, delay: float) -> tuple[Path, Path]:
    from tests.fakes.claude_control import (
        assistant_text,
        assistant_tool_use,
        init_line,
        result_success,
        structured_output_ack,
    )
    from tests.helpers import healthy

    sid = "bench5ee-0000-4000-8000-000000000000"
    so = assistant_tool_use(sid, "StructuredOutput", healthy("bench run"))
    control = directory / "fake.json"
    gate = directory / "gate"
    control.write_text(json.dumps({
        "gate": str(gate), "n": n, "delay": delay,
        "init": json.dumps(init_line(sid, tools=["Bash", "StructuredOutput"])),
        "text": json.dumps(assistant_text(sid, "__T__")),
        "tail": [json.dumps(so), json.dumps(structured_output_ack(sid, so["message"]["content"][0]["id"])),
                 json.dumps(result_success(sid, healthy("bench run")))],
    }))
    fake = directory / "claude"
    fake.write_text(FAKE_CLI.format(python=sys.executable, control=str(control)))
    fake.chmod(0o755)
    return fake, gate


# --- measuring ------------------------------------------------------------------------------

def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ingest_figures(db: Path, pk: int) -> dict:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT ts, raw FROM activity WHERE session_pk = ? AND type = 'assistant' ORDER BY seq",
                           (pk,)).fetchall()
    finally:
        con.close()
    stored, written = [], []
    for ts, raw in rows:
        m = T_RE.search(raw)
        if m:
            stored.append(_ts(ts))
            written.append(float(m.group(1)))
    if len(stored) < 2:
        return {"lines": len(stored)}
    lag = sorted((s - w) * 1000 for s, w in zip(stored, written, strict=True))
    return {
        "lines": len(stored),
        "stored_rate": (len(stored) - 1) / max(stored[-1] - stored[0], 1e-3),
        "written_rate": (len(written) - 1) / max(written[-1] - written[0], 1e-3),
        "lag_p50": pct(lag, 50), "lag_p99": pct(lag, 99),
    }


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def wait_http(base: str, pk: int, deadline: float) -> tuple[str, float, int]:
    """Poll the session until it ends; returns (status, slowest API answer in ms, API timeouts)."""
    import httpx

    status, slowest, timeouts = "running", 0.0, 0
    with httpx.Client(base_url=base, timeout=5) as http:
        while time.monotonic() < deadline:
            t = time.monotonic()
            try:  # a saturated server may not answer in time: keep asking until the deadline
                status = http.get(f"/api/v1/sessions/{pk}").json()["status"]
            except httpx.HTTPError:
                timeouts += 1
                continue
            finally:
                slowest = max(slowest, (time.monotonic() - t) * 1000)
            if status != "running":
                break
            time.sleep(0.05)
    return status, slowest, timeouts


def run_scenario(base: str, app, gate: Path, conn, db: Path, k: int, expected: int) -> dict:
    import httpx

    gate.unlink(missing_ok=True)
    sup = app.state.tierops.supervisor
    while sup.busy:
        time.sleep(0.05)
    with httpx.Client(base_url=base, timeout=10) as http:
        r = http.post("/api/v1/runs", json={"tier": 1})
        r.raise_for_status()
        pk = r.json()["id"]
    t0 = time.monotonic()
    cpu0 = time.process_time()  # this process: the server thread (and this thread, mostly asleep)
    results: list[dict] = []
    client_cpu = None
    if k:
        conn.send(("run", pk, k))
        kind, payload = conn.recv()
        if kind != "connected":
            raise RuntimeError(f"clients failed: {payload}")
    gate.touch()
    status, api_ms, api_timeouts = wait_http(base, pk, t0 + SCENARIO_TIMEOUT)
    if k:
        kind, payload = conn.recv()
        if kind != "done":
            raise RuntimeError(f"clients failed: {payload}")
        results, client_cpu = payload["clients"], payload["cpu"]
    elapsed = time.monotonic() - t0
    server_cpu = time.process_time() - cpu0
    while sup.busy and time.monotonic() - t0 < SCENARIO_TIMEOUT + 10:
        time.sleep(0.05)
    out = {"clients": k, "pk": pk, "status": status, "elapsed": elapsed, "server_cpu": server_cpu,
           "client_cpu": client_cpu, "api_ms": api_ms, "api_timeouts": api_timeouts, **ingest_figures(db, pk)}
    if results:
        lat = sorted(x * 1000 for r in results for x in r["lat"])
        counts = [len(set(r["seqs"])) for r in results]
        dups = sum(len(r["seqs"]) - len(set(r["seqs"])) for r in results)
        complete = [set(r["seqs"]) == set(range(1, expected + 1)) and len(r["seqs"]) == expected for r in results]
        out.update(p50=pct(lat, 50), p99=pct(lat, 99), max=lat[-1] if lat else float("nan"),
                   mean=statistics.fmean(lat) if lat else float("nan"), events_min=min(counts),
                   events_max=max(counts), all_complete=all(complete), duplicates=dups,
                   resyncs=sum(r["resyncs"] for r in results),
                   errors=sorted({r["error"] for r in results if r["error"]}),
                   http=sorted({r["status"] for r in results}, key=str))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--delay", type=float, default=0.001, help="seconds between the fake's lines")
    ap.add_argument("--clients", default="0,1,10,100", help="client counts, comma separated")
    ap.add_argument("--cache-render", action="store_true",
                    help="what-if: render each event once for all clients (patches app.web.streams in-process)")
    args = ap.parse_args()
    if args.cache_render:
        cache_rendering()
    counts = [int(x) for x in args.clients.split(",") if x.strip()]
    expected = args.lines + 4  # init, N texts, StructuredOutput call, its ack, result

    from app.config import Settings

    logging.getLogger("asyncio").setLevel(logging.ERROR)  # "socket.send() raised exception" of cancelled clients
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tierops-bench-sse-") as tmp:
        tmpdir = Path(tmp)
        fake, gate = write_fake(tmpdir, args.lines, args.delay)
        settings = Settings(db=tmpdir / "bench.db", home=tmpdir / "state", claude_bin=str(fake),
                            schedule=False, kill_grace=1, max_tier=1, output_max_retries=0, _env_file=None)
        app, server, thread, base = start_server(settings)
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=client_process, args=(base, child), daemon=True)
        proc.start()
        print(f"SSE bench{' (WHAT-IF: events rendered once, cached)' if args.cache_render else ''}: "
              f"{args.lines} lines ~{args.delay * 1000:g} ms apart per session; server {base} "
              f"(uvicorn, 1 worker, thread); clients in pid {proc.pid} (asyncio + httpx); {os.cpu_count()} CPUs")
        rows = []
        try:
            for k in counts:
                if time.monotonic() - started + SCENARIO_TIMEOUT + 10 > TIME_BUDGET:
                    print(f"skipping {k} clients: not enough of the {TIME_BUDGET:g} s budget left")
                    continue
                row = run_scenario(base, app, gate, parent, tmpdir / "bench.db", k, expected)
                rows.append(row)
                print_row(row, expected)
        finally:
            parent.send(("quit",))
            proc.join(10)
            if proc.is_alive():
                proc.kill()
            server.should_exit = True
            thread.join(30)

    print()
    print(f"{'clients':>7} {'got/client':>13} {'all':>4} {'dup':>4} {'resync':>6} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'max ms':>8} {'stored l/s':>10} {'written l/s':>11} {'store lag p50/p99 ms':>21} {'wall s':>6} "
          f"{'srv cpu s':>9} {'cli cpu s':>9} {'API max ms':>10}")
    for r in rows:
        got = f"{r['events_min']}..{r['events_max']}" if "events_min" in r else "-"
        print(f"{r['clients']:>7} {got:>13} {('yes' if r.get('all_complete') else 'NO') if 'events_min' in r else '-':>4} "
              f"{r.get('duplicates', '-'):>4} {r.get('resyncs', '-'):>6} {_f(r.get('p50')):>8} {_f(r.get('p99')):>8} "
              f"{_f(r.get('max')):>8} {_f(r.get('stored_rate'), 0):>10} {_f(r.get('written_rate'), 0):>11} "
              f"{_f(r.get('lag_p50')) + ' / ' + _f(r.get('lag_p99')):>21} {r['elapsed']:>6.1f} "
              f"{_f(r['server_cpu']):>9} {_f(r['client_cpu']):>9} {_api(r):>10}")
    base_row = next((r for r in rows if r["clients"] == 0), None)
    top = max((r for r in rows if r["clients"]), key=lambda r: r["clients"], default=None)
    if base_row and top:
        print(f"\ningest rate with {top['clients']} clients: {top['stored_rate']:.0f} lines/s vs "
              f"{base_row['stored_rate']:.0f} with none ({top['stored_rate'] / base_row['stored_rate']:.0%})")
    if top:
        verdict = "PASS" if top["p99"] < TARGET_P99_MS and top["all_complete"] else "FAIL"
        print(f"target: p99 < {TARGET_P99_MS:g} ms with {top['clients']} clients, every client gets every line: "
              f"{verdict} (p99 {top['p99']:.1f} ms, all complete: {top['all_complete']})")
    print("store lag = activity.ts (ms resolution) - the fake's write time; srv cpu = CPU of the server's "
          "process over the scenario (saturated when close to wall s); API max = slowest GET /api/v1/sessions/{id} "
          "while the session ran (5 s timeout)")
    print(f"total {time.monotonic() - started:.1f} s")
    return 0


def _api(r: dict) -> str:
    text = _f(r["api_ms"], 0)
    return f"{text} ({r['api_timeouts']} t/o)" if r["api_timeouts"] else text


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_row(r: dict, expected: int) -> None:
    line = (f"  {r['clients']:>3} clients: session {r['pk']} {r['status']}, {r['lines']} text lines stored at "
            f"{r.get('stored_rate', 0):.0f}/s (fake wrote {r.get('written_rate', 0):.0f}/s), store lag p50 "
            f"{_f(r.get('lag_p50'))} ms p99 {_f(r.get('lag_p99'))} ms")
    if "p50" in r:
        line += (f"; SSE latency p50 {r['p50']:.1f} ms p99 {r['p99']:.1f} ms max {r['max']:.1f} ms; events/client "
                 f"{r['events_min']}..{r['events_max']} of {expected}, duplicates {r['duplicates']}, resyncs "
                 f"{r['resyncs']}, http {r['http']}")
        if r["errors"]:
            line += f", errors {r['errors']}"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
