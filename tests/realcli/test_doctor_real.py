"""`tierops doctor` against the real Claude Code CLI 2.1.197: its --help has every
flag TierOps puts on the command line, and probing it writes nothing into the state directory."""

from __future__ import annotations

from tests.cli.test_doctor import doctor, lines_by_check


def test_the_real_cli_passes_the_cli_check(tmp_path, claude_bin):
    out = doctor(tmp_path, env={"TIEROPS_CLAUDE_BIN": str(claude_bin)})
    got = lines_by_check(out.stdout)["claude CLI"]
    assert got[0] == "ok", out.stdout
    assert "2.1.197 (Claude Code)" in got[1]
    assert not (tmp_path / "home").exists()  # --version/--help ran with a throwaway HOME
