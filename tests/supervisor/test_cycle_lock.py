"""app/supervisor/cycle_lock.py: the lock file names its holder, and probing whether a cycle runs
never makes a claim fail (two real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import CycleBusy
from app.supervisor.cycle_lock import CycleLock

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


def test_cycle_lock_file_names_the_holder(tmp_path):
    lock = CycleLock(tmp_path / "state" / "cycle.lock")
    lock.acquire("manual cycle from tier 2")
    try:
        data = json.loads((tmp_path / "state" / "cycle.lock").read_text())
        assert data["pid"] == os.getpid() and data["what"] == "manual cycle from tier 2"
        assert lock.held_elsewhere() is True  # another open file of this process counts too
        with pytest.raises(CycleBusy, match=r"\(pid \d+, manual cycle from tier 2, started "):
            CycleLock(tmp_path / "state" / "cycle.lock").acquire("x")
    finally:
        lock.release()
    assert lock.held_elsewhere() is False


PROBER = """
import sys
from pathlib import Path
from app.supervisor.cycle_lock import CycleLock
lock, probes = CycleLock(Path(sys.argv[1])), 0
print("probing", flush=True)
while not Path(sys.argv[2]).exists():
    lock.holder()
    probes += 1
print(probes, flush=True)
"""


CLAIMER = """
import sys
from pathlib import Path
from app.errors import CycleBusy
from app.supervisor.cycle_lock import CycleLock
refused = 0
for _ in range(int(sys.argv[2])):
    lock = CycleLock(Path(sys.argv[1]))
    try:
        lock.acquire("claim while probed")
    except CycleBusy:
        refused += 1
        continue
    lock.release()
print(refused, flush=True)
"""


def test_probing_for_a_cycle_never_makes_a_claim_fail(tmp_path):
    """/healthz, /metrics and the overview ask whether a cycle runs, in one process, while another
    process claims cycles: no claim may be refused because of a probe (it would skip a scheduled
    cycle). Two real processes, one probing and one claiming, as fast as they can."""
    lock_path, stop = tmp_path / "state" / "cycle.lock", tmp_path / "stop-probing"
    lock_path.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prober = subprocess.Popen([sys.executable, "-c", PROBER, str(lock_path), str(stop)], stdout=subprocess.PIPE,
                              cwd=REPO, env=env, text=True)
    try:
        assert prober.stdout.readline() == "probing\n"
        claimer = subprocess.run([sys.executable, "-c", CLAIMER, str(lock_path), "4000"], capture_output=True,
                                 cwd=REPO, env=env, text=True, timeout=50)
        assert claimer.returncode == 0, claimer.stderr
    finally:
        stop.touch()
        probes = int(prober.communicate(timeout=10)[0])
    assert probes > 100  # the probes ran beside the claims
    assert int(claimer.stdout) == 0, f"{claimer.stdout.strip()} of 4000 claims refused while {probes} probes ran"
