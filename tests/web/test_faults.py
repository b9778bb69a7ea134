"""app/web/faults.py: a storage condition is a 503 with ``Retry-After`` and the reason, for the API
and for form pages, never a 500 with a traceback.

The disk is made full the way SQLite reports a full disk: ``PRAGMA max_page_count`` on the
server's own writer connection (the app in process, ``app_server``), then filler rows until the
file cannot grow. Every write that needs a new page then fails with ``SQLITE_FULL`` ("database or
disk is full"), exactly as on a full disk; reads keep working.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path

import pytest

from app.web.common import WebState
from app.web.faults import RETRY_AFTER_S, storage_fault
from tests.web.api.test_routes import assert_error

pytestmark = pytest.mark.timeout(60)

BIG = "€" * 9_000  # 27 kB of UTF-8: more than one 16 KiB page, whatever table it goes to


async def fill_the_disk(st: WebState) -> None:
    async with st.db.write() as conn:
        await conn.execute("CREATE TABLE test_filler (blob BLOB)")
    pages = await st.db.fetchval("PRAGMA page_count", fresh=True)
    async with st.db.write() as conn:
        await conn.execute(f"PRAGMA max_page_count = {int(pages)}")
    while True:
        try:
            async with st.db.write() as conn:
                await conn.execute("INSERT INTO test_filler VALUES (randomblob(2000))")
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
            return


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logged = [r for r in caplog.records if r.exc_info]
    assert logged == [], [r.getMessage() for r in logged]


def test_a_full_disk_is_503_for_the_api(app_server, caplog):
    srv = app_server()
    srv.run_async(fill_the_disk)
    with caplog.at_level(logging.INFO), srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"prompt": BIG[:20_000]})
        body = assert_error(r, 503, "storage_unavailable")
        assert r.headers["retry-after"] == str(RETRY_AFTER_S)
        assert body["detail"].startswith("the cycle could not start: storage error: the disk is full "
                                         "(database or disk is full)")
        r = cl.post("/api/v1/memories", json={"category": "disk", "value": BIG})
        body = assert_error(r, 503, "storage_unavailable")
        assert r.headers["retry-after"] == str(RETRY_AFTER_S) and "the disk is full" in body["detail"]
        assert cl.get("/api/v1/sessions").status_code == 200  # reads still work
        assert srv.fake.invocations() == []  # no CLI started for a cycle that could not be recorded
    no_traceback(caplog)
    assert any(r.getMessage().startswith("POST /api/v1/memories answered 503: storage error: the disk is full")
               for r in caplog.records)


def test_a_full_disk_is_503_with_an_error_page_for_forms(app_server, caplog):
    srv = app_server()
    srv.run_async(fill_the_disk)
    with caplog.at_level(logging.INFO), srv.client() as cl:
        for url, form in [("/memories", {"category": "disk", "value": BIG}), ("/run", {"tier": "1", "prompt": BIG[:20_000]})]:
            r = cl.post(url, data=form)
            assert r.status_code == 503, (url, r.text)
            assert r.headers["content-type"].startswith("text/html") and r.headers["retry-after"] == str(RETRY_AFTER_S)
            assert "Error 503" in r.text and "the disk is full" in r.text, url
            assert "Traceback" not in r.text
    no_traceback(caplog)


def test_only_a_storage_condition_is_a_storage_fault():
    """A bug stays a bug (the middleware passes it on: a 500, logged with its traceback); a storage
    error a raiser declared not to be the cause (``from None``) is not one either; one it was
    raised from is."""
    try:
        raise RuntimeError("a bug")
    except RuntimeError as exc:
        assert storage_fault(exc) is None
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise ValueError("not because of the disk") from None
    except ValueError as exc:
        assert storage_fault(exc) is None
    try:
        Path("/nonexistent/prompt.md").read_text()
    except OSError as exc:
        assert storage_fault(exc) is None  # a missing file is not storage
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as inner:
            raise LookupError("wrapped") from inner
    except LookupError as exc:
        assert storage_fault(exc) == ("storage error: the disk is full (database or disk is full); nothing was "
                                      "changed: free some space and try again")
