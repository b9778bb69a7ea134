"""``tierops prune`` and ``tierops backup``, run as real subprocesses
(``python -m app``) against a real state directory (``TIEROPS_HOME``)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from app.store.db import Database
from tests.cli import forkserver
from tests.store.test_backup import INCONSISTENT, concurrent_writer, fill
from tests.store.test_retention import make_chain, make_old_database, make_session, table_counts

ROOT = Path(__file__).resolve().parents[2]


def tierops(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update(TIEROPS_HOME=str(home), PYTHONPATH=str(ROOT))
    return forkserver.run("app", args, env=env, cwd=home.parent, timeout=120, text=True)


async def populate(home: Path) -> dict[str, list[int]]:
    """Old and new sessions with their folders, in HOME."""
    async with await Database.open(home / "tierops.db") as db:
        made = {
            "chain": await make_chain(db, [40, 38]),
            "old": [await make_session(db, days=31, lines=5)],
            "recent": [await make_session(db, days=2)],
            "running": [await make_session(db, days=60, status="running")],
        }
    for pk in (i for ids in made.values() for i in ids):
        (home / "sessions" / str(pk)).mkdir(parents=True)
        (home / "sessions" / str(pk) / "handoff.json").write_text("{}")
    return made


async def counts(home: Path) -> dict[str, int]:
    async with await Database.open(home / "tierops.db") as db:
        return await table_counts(db)


async def test_prune_json_report(tmp_path):
    home = tmp_path / "home"
    made = await populate(home)

    out = tierops(home, "prune", "--json")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"dry_run", "keep_days", "cutoff", "sessions", "chains", "session_ids", "deleted", "kept",
                           "folders", "transcripts", "skipped", "space", "seconds"}
    assert report["transcripts"] == {"removed": 0, "bytes": 0, "errors": []}  # the claude CLI left nothing
    assert report["dry_run"] is False and report["keep_days"] == 30 and report["cutoff"].endswith("Z")
    assert report["sessions"] == 3 and report["chains"] == 1
    assert sorted(report["session_ids"]) == sorted(made["chain"] + made["old"])
    assert report["deleted"] == {"activity": 11, "output_attempts": 3, "check_results": 3, "cooldowns": 3,
                                 "maintenance_windows": 0}
    assert report["kept"] == {"events": 3, "memories": 3, "old_sessions": 1}
    assert report["folders"] == {"removed": 3, "bytes": 6, "missing": 0, "errors": []}
    assert set(report["space"]) == {"auto_vacuum", "page_size", "free_pages", "pages_reclaimed", "bytes_reclaimed",
                                    "file_bytes_before", "file_bytes_after", "vacuum", "note"}
    assert report["space"]["auto_vacuum"] == "incremental"
    assert sorted(os.listdir(home / "sessions")) == sorted(str(i) for i in made["recent"] + made["running"])

    listed = json.loads(tierops(home, "sessions", "--json").stdout)
    assert sorted(s["id"] for s in listed) == sorted(made["recent"] + made["running"])
    events = tierops(home, "events")
    assert events.returncode == 0 and events.stdout.count("session pruned") == 3
    assert f"session {made['recent'][0]}" in events.stdout


async def test_prune_dry_run_changes_nothing(tmp_path):
    home = tmp_path / "home"
    await populate(home)
    before, folders = await counts(home), sorted(os.listdir(home / "sessions"))

    out = tierops(home, "prune", "--dry-run")

    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("would prune 3 sessions (1 chain) last active before ")
    assert "would delete: 11 activity lines" in out.stdout
    assert await counts(home) == before and sorted(os.listdir(home / "sessions")) == folders
    dry = json.loads(tierops(home, "prune", "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True and dry["sessions"] == 3
    assert await counts(home) == before


async def test_prune_text_report_and_keep_days(tmp_path):
    home = tmp_path / "home"
    made = await populate(home)
    out = tierops(home, "prune", "--keep-days", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("pruned 4 sessions (1 chain)") and "(older than 1 day)" in lines[0]
    assert any(line.startswith("  kept: 4 events and 4 memories") for line in lines)
    assert any(line.startswith("  kept 1 older session: running") for line in lines)
    assert json.loads(tierops(home, "sessions", "--json").stdout)[0]["id"] == made["running"][0]
    off = tierops(home, "prune", "--keep-days", "0")
    assert off.returncode == 0 and "nothing pruned" in off.stdout
    bad = tierops(home, "prune", "--keep-days", "-1")
    assert bad.returncode == 2 and bad.stderr.startswith("tierops: error:")


async def test_an_old_database_is_pointed_at_vacuum_which_then_shrinks_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    make_old_database(home / "tierops.db")
    async with await Database.open(home / "tierops.db") as db:
        for days in (40, 41, 42):
            await make_session(db, days=days, lines=100, line_bytes=3000)
        await make_session(db, days=1)
    out = tierops(home, "prune")
    assert out.returncode == 0, out.stderr
    assert "tierops prune --vacuum" in out.stdout and "free pages" in out.stdout
    vacuum = json.loads(tierops(home, "prune", "--vacuum", "--json").stdout)
    space = vacuum["space"]
    assert space["vacuum"] == "full" and space["auto_vacuum"] == "incremental"
    assert space["file_bytes_after"] < space["file_bytes_before"]


def test_prune_and_backup_refuse_to_create_a_database(tmp_path):
    home = tmp_path / "nothing-here"
    for args in (["prune"], ["backup", str(tmp_path / "b.db")]):
        out = tierops(home, *args)
        assert out.returncode == 2 and out.stderr.startswith("tierops: error: no database at"), out.stderr
    assert not home.exists() and not (tmp_path / "b.db").exists()


async def test_backup_then_restore(tmp_path):
    home = tmp_path / "home"
    made = await populate(home)
    target = tmp_path / "tierops-backup.db"

    out = tierops(home, "backup", str(target), "--json")

    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {"path", "source", "bytes", "pages", "page_size", "sessions", "integrity", "seconds"}
    assert result["path"] == str(target) and result["source"] == str(home / "tierops.db")
    assert result["integrity"] == "ok" and result["sessions"] == 5 and result["bytes"] == target.stat().st_size

    again = tierops(home, "backup", str(target))
    assert again.returncode == 2 and "already exists; use --force" in again.stderr
    forced = tierops(home, "backup", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith(f"backed up {home / 'tierops.db'} to {target}: ")
    assert "integrity ok" in forced.stdout and "to restore: stop the server" in forced.stdout

    # things change after the backup ...
    assert tierops(home, "prune", "--keep-days", "1").returncode == 0
    assert len(json.loads(tierops(home, "sessions", "--json").stdout)) == 1
    # ... and the documented restore brings the backed-up state back
    shutil.copyfile(target, home / "tierops.db")
    for suffix in ("-wal", "-shm"):
        (home / f"tierops.db{suffix}").unlink(missing_ok=True)
    listed = json.loads(tierops(home, "sessions", "--json").stdout)
    assert sorted(s["id"] for s in listed) == sorted(i for ids in made.values() for i in ids)


async def test_backup_while_another_process_writes(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    async with await Database.open(home / "tierops.db") as db:
        await fill(db)
    target = tmp_path / "b.db"
    with concurrent_writer(home / "tierops.db"):
        out = tierops(home, "backup", str(target), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["integrity"] == "ok"
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute(INCONSISTENT).fetchone()[0] == 0
    finally:
        conn.close()
