"""A throwaway PostgreSQL cluster from Debian's server package, for the tests that need a real one.

``Cluster.start()`` runs ``initdb`` and ``pg_ctl start`` on a private port, listening on a
Unix socket in its own temporary folder only (nothing on TCP unless asked), with fsync off (a test cluster never
outlives its run). As root the server runs as the ``postgres`` user the package creates (or
``nobody``): PostgreSQL refuses to run as root. ``stop()`` stops it and removes the folder.

The binaries come from ``/usr/lib/postgresql/<major>/bin`` (``scripts/test.sh`` installs the
``postgresql`` package when they are missing); without them :class:`ClusterUnavailable` says what
to install. Nothing here fakes a server.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PG_ROOT = Path("/usr/lib/postgresql")


class ClusterUnavailable(RuntimeError):
    pass


def binaries() -> Path:
    """The newest installed server's bin folder."""
    found = sorted((p for p in PG_ROOT.glob("*/bin") if (p / "initdb").exists()),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not found:
        raise ClusterUnavailable("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install Debian's "
                                 "postgresql package (scripts/test.sh does: apt-get install -y postgresql)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            user = pwd.getpwnam(name)
            return user.pw_uid, user.pw_gid
    raise ClusterUnavailable("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


@dataclass
class Cluster:
    folder: Path
    port: int
    bin: Path
    owner: tuple[int, int] | None
    user: str = "tierops"
    database: str = "tierops"
    options: str = ""  # the server's command-line settings (port, socket folder, no fsync)

    @property
    def socket_dir(self) -> Path:
        return self.folder / "run"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str | None = None) -> str:
        """A ``postgresql://`` URL over the Unix socket (libpq's ``host=/dir`` form)."""
        return f"postgresql://{self.user}@/{database or self.database}?host={self.socket_dir}&port={self.port}"

    def _cmd(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        def demote() -> None:
            if self.owner is not None:
                os.setgid(self.owner[1])
                os.setuid(self.owner[0])
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}
        proc = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=demote if self.owner is not None else None, check=False)
        if check and proc.returncode != 0:
            raise ClusterUnavailable(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc

    @classmethod
    def start(cls, *, tcp: bool = False) -> Cluster:
        """In a new folder under the system's temporary directory (a test's own tmp_path is 0700
        root's, which the server's user cannot enter)."""
        folder = Path(tempfile.mkdtemp(prefix="tierops-pg-"))
        cluster = cls(folder, _free_port(), binaries(), _run_as())
        cluster.socket_dir.mkdir(exist_ok=True)
        if cluster.owner is not None:
            for path in (folder, cluster.socket_dir):
                os.chown(path, *cluster.owner)
        cluster._cmd(str(cluster.bin / "initdb"), "-D", str(cluster.data), "-U", cluster.user, "-A", "trust",
                     "-E", "UTF8", "--no-sync", "--locale=C.UTF-8")
        cluster.options = (f"-p {cluster.port} -k {cluster.socket_dir} -c fsync=off -c synchronous_commit=off "
                           f"-c full_page_writes=off -c listen_addresses={'127.0.0.1' if tcp else chr(39) * 2} "
                           "-c max_connections=200")
        cluster.pg_ctl("start")
        cluster._cmd(str(cluster.bin / "createdb"), "-h", str(cluster.socket_dir), "-p", str(cluster.port),
                     "-U", cluster.user, cluster.database)
        return cluster

    def create_database(self, name: str) -> str:
        self._cmd(str(self.bin / "createdb"), "-h", str(self.socket_dir), "-p", str(self.port), "-U", self.user, name)
        return self.url(name)

    def pg_ctl(self, action: str) -> None:
        """``stop`` (fast) or ``start`` the server of this cluster (the data stays)."""
        if action == "stop":
            self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
        else:
            self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
                      "-o", self.options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        self.pg_ctl("stop")
        shutil.rmtree(self.folder, ignore_errors=True)
