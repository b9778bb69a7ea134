"""``app/engine/cli_transcripts.py``: the claude CLI's folder names, and what goes when a session
is final or when prune sweeps, on real files. Where the real CLI writes is checked with the
binary itself in ``tests/realcli/test_prompt_channels.py``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.engine.cli_transcripts import _string_hash, remove_session_files, slug, sweep

SID = "5d1895c2-b83f-4645-8c2b-e73c298cabd3"
OTHER = "9a0e7f11-2c4d-4e5f-8a9b-0c1d2e3f4a5b"


def test_the_slug_is_the_cwd_with_every_other_character_a_dash():
    assert slug("/tmp/b22exp/run/state/sessions/7") == "-tmp-b22exp-run-state-sessions-7"
    assert slug("/srv/tier_ops.d/sessions/12") == "-srv-tier-ops-d-sessions-12"


def test_a_long_cwd_is_cut_and_hashed_like_the_cli_does():
    # The CLI's hash is Java's String.hashCode: 32-bit, wrapping (these two are well known).
    assert _string_hash("abc") == 96354
    assert _string_hash("polygenelubricants") == -(2 ** 31)
    cwd = "/" + "/".join(["deeply-nested_folder"] * 12) + "/sessions/3"
    name = slug(cwd)
    assert name.startswith(cwd[:200].replace("/", "-").replace("_", "-") + "-") and len(name) > 200
    assert name[201:].isalnum() and name == slug(cwd)


def transcript(home: Path, cwd: str, sid: str) -> Path:
    folder = home / ".claude" / "projects" / slug(cwd)
    (folder / "memory").mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_text('{"tool_use_result":{"stdout":"PGPASSWORD=hunter22"}}\n')
    return folder


def test_a_final_session_loses_its_project_folder_and_its_per_session_folders(tmp_path):
    home = tmp_path / "home"
    mine = transcript(home, "/state/sessions/7", SID)
    other = transcript(home, "/state/sessions/8", OTHER)
    for name in ("file-history", "session-env"):
        for sid in (SID, OTHER):
            (home / ".claude" / name / sid).mkdir(parents=True)
    report = remove_session_files(home, "/state/sessions/7", SID)
    assert (report.removed, report.errors) == (3, []) and report.bytes > 0
    assert not mine.exists() and other.exists()
    assert [p.name for p in (home / ".claude" / "file-history").iterdir()] == [OTHER]
    assert [p.name for p in (home / ".claude" / "session-env").iterdir()] == [OTHER]
    assert remove_session_files(home, "/state/sessions/7", SID).removed == 0  # gone already: nothing to do


def test_the_transcript_is_found_by_its_session_id_too(tmp_path):
    """A folder named differently (another cwd spelling) holding the session's file goes as well."""
    home = tmp_path / "home"
    elsewhere = transcript(home, "/elsewhere/cwd", SID)
    assert remove_session_files(home, None, SID).removed == 1 and not elsewhere.exists()
    assert remove_session_files(tmp_path / "no-home", "/x", None).removed == 0


def test_a_link_in_place_of_the_folder_is_removed_not_followed(tmp_path):
    home = tmp_path / "home"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    projects = home / ".claude" / "projects"
    projects.mkdir(parents=True)
    (projects / slug("/state/sessions/7")).symlink_to(outside, target_is_directory=True)
    assert remove_session_files(home, "/state/sessions/7", SID).removed == 1
    assert (outside / "keep.txt").read_text() == "keep" and list(projects.iterdir()) == []


def test_sweep_keeps_what_a_running_session_may_resume_and_anything_newer(tmp_path):
    home = tmp_path / "home"
    old = transcript(home, "/state/sessions/1", "0b7e1c2a-0000-4000-8000-000000000001")
    by_cwd = transcript(home, "/state/sessions/2", "0b7e1c2a-0000-4000-8000-000000000002")
    by_id = transcript(home, "/other/spelling/3", SID)
    fresh = transcript(home, "/state/sessions/4", "0b7e1c2a-0000-4000-8000-000000000004")
    (home / ".claude" / "file-history" / SID).mkdir(parents=True)
    (home / ".claude" / "file-history" / OTHER).mkdir(parents=True)
    past = time.time() - 600
    for folder in (old, by_cwd, by_id, home / ".claude" / "file-history" / SID,
                   home / ".claude" / "file-history" / OTHER):
        for path in (*folder.rglob("*"), folder):
            os.utime(path, (past, past))
    before = time.time() - 60  # fresh was written after this
    dry = sweep(home, running_cwds=["/state/sessions/2"], running_ids=[SID], before=before, dry_run=True)
    assert dry.removed == 2 and old.exists()
    report = sweep(home, running_cwds=["/state/sessions/2"], running_ids=[SID], before=before)
    assert (report.removed, report.errors) == (2, [])
    assert not old.exists() and by_cwd.exists() and by_id.exists() and fresh.exists()
    assert [p.name for p in (home / ".claude" / "file-history").iterdir()] == [SID]
    assert sweep(tmp_path / "no-home", running_cwds=[], running_ids=[], before=time.time()).removed == 0
