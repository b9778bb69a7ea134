"""TierOps installed from its wheel works on its own, away from the repository.

The module builds the wheel once from a copy of the sources (nothing is written into the
checkout), installs it with ``--no-deps`` into a fresh venv under pytest's temporary folder and
makes the dependencies importable without the network through a ``.pth`` file naming this test
venv's site-packages. ``app`` itself can then only come from the wheel: the editable install's
finder is not active there (a ``.pth`` line adds a folder to ``sys.path``; it does not run the
``.pth`` files inside it). Every command runs from an unrelated folder with its own TIEROPS_HOME.

These are the steps of ``scripts/docker-smoke.sh`` (which needs a Docker engine) against the same
wheel the image installs: version, bundled files, ingest, a session against the fake CLI, the
refusal to serve without a token, serve with a token file + /healthz + one session through the API
+ SIGTERM, and ``tierops doctor``. Only loopback is used; ``pip`` runs with ``--no-index``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fakes import claude_control as cc
from tests.helpers import healthy, kill_leftovers

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
# What the wheel is built from: the same list as the Dockerfile's wheels stage and .dockerignore.
SOURCES = ("pyproject.toml", "README.md", "app", "prompts", "schemas")
PROMPTS = ("tier0-probe.md", "tier1-observe.md", "tier2-investigate.md", "tier3-remediate.md")
SCHEMA = "agent-response.json"
SCHEMAS = (SCHEMA, "checks.json")
STARTUP_S = 30
SESSION_S = 30


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment minus anything that could point Python or TierOps at the checkout."""
    drop = ("TIEROPS_", "PYTHON", "VIRTUAL_ENV", "FAKE_CLAUDE", "PIP_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def _copy_sources(dest: Path) -> None:
    """The package sources, symlinks kept (app/bundled/* → ../../prompts, ../../schemas)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        item = REPO / name
        if item.is_dir():
            shutil.copytree(item, dest / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(item, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(REPO), "the wheel must be built outside the repository"
    src = base / "src"
    src.mkdir()
    _copy_sources(src)
    assert (src / "app" / "bundled" / "prompts").is_symlink()  # built the way a checkout is
    dist = base / "dist"
    # --no-build-isolation: the build uses this venv's setuptools, so nothing is downloaded.
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", "--quiet", "--wheel-dir", str(dist), str(src)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=base, env=_clean_env(), timeout=120)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if "invalid command 'bdist_wheel'" in output:
            pytest.skip("this venv cannot build a wheel offline: its setuptools has no bdist_wheel "
                        "(needs setuptools>=70.1, or the wheel package, in the test venv)")
        pytest.fail(f"pip wheel failed (exit {done.returncode}):\n{output[-4000:]}")
    [built] = dist.glob("tierops-*.whl")
    return built


@dataclass
class Installed:
    venv: Path
    python: Path
    tierops: Path
    elsewhere: Path  # an unrelated working directory: no .env, no checkout, no state

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        home.mkdir(parents=True, exist_ok=True)
        return _clean_env(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            HOME=str(home.parent / "user-home"), TIEROPS_HOME=str(home),
            TIEROPS_KILL_GRACE="1", **extra)

    def run(self, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.tierops), *args], capture_output=True, text=True, env=env,
                              cwd=self.elsewhere, timeout=timeout)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    # This venv's pip installs into the new one (--python). --ignore-installed: pip must never
    # touch another tierops it might see, such as the editable install of the checkout.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--ignore-installed", "--disable-pip-version-check", "--quiet", str(wheel)],
        capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    site_packages = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, env=_clean_env(), timeout=30).stdout.strip())
    # The dependencies, offline: this venv's site-packages, appended to sys.path after the new
    # venv's own (so the wheel's app and tierops metadata come first).
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site_packages / "_tierops_test_dependencies.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return Installed(venv=venv, python=python, tierops=venv / "bin" / "tierops", elsewhere=elsewhere)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text


# --- the wheel ------------------------------------------------------------------------------

def test_wheel_ships_bundled_prompts_schema_templates_and_static_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {info.filename: info for info in zf.infolist()}
        for name in PROMPTS:
            assert f"app/bundled/prompts/{name}" in infos
            assert zf.read(f"app/bundled/prompts/{name}") == (REPO / "prompts" / name).read_bytes()
        for name in SCHEMAS:
            assert f"app/bundled/schemas/{name}" in infos
            assert zf.read(f"app/bundled/schemas/{name}") == (REPO / "schemas" / name).read_bytes()
        web = REPO / "app" / "web"
        expected = [p for p in (*web.glob("templates/*.html"), *web.glob("static/*")) if p.is_file()]
        assert any(p.suffix == ".html" for p in expected) and any(p.parent.name == "static" for p in expected)
        for path in expected:
            assert path.relative_to(REPO).as_posix() in infos, path
        # real files: no entry is a symlink (the high 16 bits of external_attr are the Unix mode)
        links = [n for n, i in infos.items() if stat.S_ISLNK(i.external_attr >> 16)]
        assert links == []
        assert not any(n.startswith(("tests/", "prompts/", "schemas/")) for n in infos)
        entry_points = zf.read(f"tierops-{VERSION}.dist-info/entry_points.txt").decode()
        assert "tierops = app.cli:main" in entry_points


# --- the installed package --------------------------------------------------------------------

def test_the_installed_app_is_the_wheel_not_the_checkout(installed: Installed, tmp_path: Path) -> None:
    probe = (
        "import importlib.metadata as md, json, sys, app, app.paths as p\n"
        "print(json.dumps({'app': app.__file__, 'finders': [type(f).__module__ + '.' + type(f).__name__ "
        "for f in sys.meta_path], 'modules': sorted(m for m in sys.modules if 'editable' in m),"
        " 'dist': str(md.distribution('tierops').locate_file('')), 'version': md.version('tierops'),"
        " 'schema': str(p.DEFAULT_SCHEMA_PATH), 'prompts': str(p.PROMPTS_DIR)}))\n"
    )
    env = installed.env(tmp_path / "state")
    done = subprocess.run([str(installed.python), "-c", probe], capture_output=True, text=True, env=env,
                          cwd=installed.elsewhere, timeout=60)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    venv = installed.venv.resolve()
    assert Path(info["app"]).resolve().is_relative_to(venv), info["app"]
    assert not Path(info["app"]).resolve().is_relative_to(REPO)
    assert Path(info["dist"]).resolve().is_relative_to(venv), info["dist"]
    assert info["version"] == VERSION
    assert not [f for f in info["finders"] if "editable" in f.lower()], info["finders"]
    assert info["modules"] == []
    # the bundled files, found with importlib.resources inside the installed package: real files
    schema = Path(info["schema"])
    assert schema.resolve().is_relative_to(venv) and schema.is_file() and not schema.is_symlink()
    assert json.loads(schema.read_text(encoding="utf-8")) == json.loads((REPO / "schemas" / SCHEMA).read_text(encoding="utf-8"))
    prompts = Path(info["prompts"])
    assert prompts.resolve().is_relative_to(venv) and not prompts.is_symlink()
    for name in PROMPTS:
        path = prompts / name
        assert path.is_file() and not path.is_symlink(), path
        assert path.read_bytes() == (REPO / "prompts" / name).read_bytes()


def test_version_and_python_dash_m_app(installed: Installed, tmp_path: Path) -> None:
    env = installed.env(tmp_path / "state")
    version = installed.run(env, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"tierops, version {VERSION}"
    helped = subprocess.run([str(installed.python), "-m", "app", "--help"], capture_output=True, text=True,
                            env=env, cwd=installed.elsewhere, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: tierops ")
    for command in ("ingest", "sessions", "run", "serve"):
        assert command in helped.stdout
    assert list(installed.elsewhere.iterdir()) == []  # nothing written where the command ran


def test_ingest_an_example_and_list_it_from_an_unrelated_folder(installed: Installed, tmp_path: Path) -> None:
    home = tmp_path / "state"
    env = installed.env(home)
    example = REPO / "examples" / "tier1-escalation.jsonl"
    session_id = json.loads(example.read_text(encoding="utf-8").splitlines()[0])["session_id"]
    ingested = installed.run(env, "ingest", str(example))
    assert ingested.returncode == 0, ingested.stderr
    _no_traceback(ingested.stderr)
    assert ingested.stdout.startswith(f"session 1 (CLI {session_id})")
    assert "escalation: NEEDED" in ingested.stdout
    listed = installed.run(env, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["session_id"]) for r in rows] == [(1, session_id)]
    assert (home / "tierops.db").is_file()
    assert list(installed.elsewhere.iterdir()) == []


def test_run_one_session_against_the_fake_cli(installed: Installed, tmp_path: Path) -> None:
    home = tmp_path / "state"
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    env = installed.env(home, TIEROPS_CLAUDE_BIN=str(fake.path), TIEROPS_TIER1_TIMEOUT="30")
    try:
        done = installed.run(env, "run", "--json")
    finally:
        kill_leftovers(fake)
    assert done.returncode == 0, done.stderr
    _no_traceback(done.stderr)
    [link] = json.loads(done.stdout)
    assert (link["tier"], link["status"], link["source"]) == (1, "completed", "structured_output")
    [inv] = fake.invocations()
    # the prompt and the schema the CLI got are the wheel's bundled copies
    prompt = inv["parsed"].get("prompt") or inv.get("stdin_prompt") or ""
    assert prompt.strip() == (REPO / "prompts" / "tier1-observe.md").read_text(encoding="utf-8").strip()
    assert json.loads(inv["parsed"]["json_schema"])["type"] == "object"
    rows = json.loads(installed.run(env, "sessions", "--json").stdout)
    assert [(r["id"], r["status"]) for r in rows] == [(link["id"], "completed")]
    assert (home / "sessions" / str(link["id"])).is_dir()


def test_tier0_cycle_from_the_example_checks_file(installed: Installed, tmp_path: Path) -> None:
    """The probe runs from the installed package (not the checkout) in a session folder,
    validates the shipped example, and a failing check opens an incident with no claude CLI."""
    home = tmp_path / "state"
    env = installed.env(home, TIEROPS_CLAUDE_BIN=str(tmp_path / "no-claude"))
    example = REPO / "examples" / "checks.yaml"
    valid = installed.run(env, "checks", "validate", str(example))
    assert valid.returncode == 0, valid.stderr
    checks = tmp_path / "checks.yaml"
    checks.write_text("checks:\n  - {name: closed, service: demo, tcp: '127.0.0.1:9', timeout: 2s}\n"
                      "  - {name: resolver, service: dns, dns: localhost}\n", encoding="utf-8")
    done = installed.run(env, "run", "--checks", str(checks), "--json")
    _no_traceback(done.stderr)
    assert done.returncode == 0, done.stderr
    [link] = json.loads(done.stdout)
    assert (link["tier"], link["status"], link["cost_usd"]) == (0, "completed", 0)
    assert "check:closed" in link["attention"] and "claude CLI not found" in link["attention"]
    listed = installed.run(env, "incidents", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(i["key"], i["status"]) for i in json.loads(listed.stdout)] == [("check:closed", "open")]


def test_serve_on_all_interfaces_without_a_token_is_refused(installed: Installed, tmp_path: Path) -> None:
    env = installed.env(tmp_path / "state")
    done = installed.run(env, "serve", "--host", "0.0.0.0", "--port", str(_free_port()), timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierops: error: refusing to bind to 0.0.0.0"), done.stderr
    assert "TIEROPS_TOKEN" in lines[0]


def test_the_image_refuses_to_serve_without_a_checks_file(installed: Installed, tmp_path: Path) -> None:
    """The image sets TIEROPS_REQUIRE_CHECKS=true (Dockerfile): without a checks file `serve` would start
    every scheduled cycle at a paid tier, so it refuses with one line saying what to mount. compose.yaml
    mounts the starter file, whose checks all pass on a fresh host (tests/probe/test_variables.py)."""
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert "TIEROPS_REQUIRE_CHECKS=true" in dockerfile
    compose = (REPO / "compose.yaml").read_text(encoding="utf-8")
    assert "source: ./examples/checks-starter.yaml" in compose and "TIEROPS_CHECKS: /etc/tierops/checks.yaml" in compose
    token_file = tmp_path / "token"
    token_file.write_text("install-test-" + secrets.token_hex(16), encoding="utf-8")
    env = installed.env(tmp_path / "state", TIEROPS_REQUIRE_CHECKS="true", TIEROPS_TOKEN_FILE=str(token_file))
    done = installed.run(env, "serve", "--host", "0.0.0.0", "--port", str(_free_port()), timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("tierops: error: TIEROPS_REQUIRE_CHECKS is set and there is no checks file: `serve` would "
                           "start every scheduled cycle at tier 1, a paid language-model run."), line
    assert "TIEROPS_CHECKS=/etc/tierops/checks.yaml" in line and "examples/checks-starter.yaml" in line
    assert not (tmp_path / "state" / "tierops.db").exists()  # refused before anything was created
    starter = installed.run(env, "checks", "validate", str(REPO / "examples" / "checks-starter.yaml"))
    assert starter.returncode == 0, starter.stderr


def test_serve_with_a_token_file_runs_a_session_and_stops_on_sigterm(installed: Installed, tmp_path: Path) -> None:
    """What the image does: serve on 0.0.0.0 with TIEROPS_TOKEN_FILE, healthz, one run, SIGTERM."""
    token = "install-test-" + secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    home = tmp_path / "state"
    env = installed.env(home, TIEROPS_TOKEN_FILE=str(token_file), TIEROPS_CLAUDE_BIN=str(fake.path),
                        TIEROPS_SCHEDULE="false", TIEROPS_TIER1_TIMEOUT="30")
    port = _free_port()
    log_out, log_err = tmp_path / "serve.out", tmp_path / "serve.err"
    with log_out.open("w") as out, log_err.open("w") as err:
        proc = subprocess.Popen([str(installed.tierops), "serve", "--host", "0.0.0.0", "--port", str(port)],
                                stdout=out, stderr=err, env=env, cwd=installed.elsewhere)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5) as client:
            deadline = time.monotonic() + STARTUP_S
            while True:
                assert proc.poll() is None, f"serve exited {proc.returncode}: {log_err.read_text()}"
                try:
                    health = client.get("/healthz")
                    if health.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"/healthz not up after {STARTUP_S} s: {log_err.read_text()}"
                time.sleep(0.1)
            assert health.json()["status"] == "ok"
            assert client.get("/api/v1/sessions").status_code == 401  # the token is in force
            auth = {"Authorization": f"Bearer {token}"}
            started = client.post("/api/v1/runs", json={}, headers=auth)
            assert started.status_code == 202, started.text
            pk = started.json()["id"]
            deadline = time.monotonic() + SESSION_S
            while True:
                row = client.get(f"/api/v1/sessions/{pk}", headers=auth)
                assert row.status_code == 200, row.text
                if row.json()["status"] != "running":
                    break
                assert time.monotonic() < deadline, f"session {pk} still running after {SESSION_S} s"
                time.sleep(0.1)
            assert (row.json()["status"], row.json()["source"]) == ("completed", "structured_output"), row.text
        assert len(fake.invocations()) == 1
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down (lifespan: sessions stopped, store closed), then re-raises SIGTERM
        # on itself: -SIGTERM here, a clean stop for systemd, 0 in the image (tini -e 143).
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM), log_err.read_text()
        assert "Application shutdown complete." in log_err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(fake)
    _no_traceback(log_out.read_text(), log_err.read_text())
    assert token not in log_out.read_text() + log_err.read_text()
    rows = json.loads(installed.run(installed.env(home), "sessions", "--json").stdout)
    assert [r["id"] for r in rows] == [pk]
    assert [r for r in rows if r["status"] == "running"] == []


def test_doctor_in_the_installed_venv(installed: Installed, tmp_path: Path) -> None:
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    env = installed.env(tmp_path / "state", TIEROPS_CLAUDE_BIN=str(fake.path))
    if installed.run(env, "doctor", "--help").returncode != 0:
        pytest.skip("this version has no `tierops doctor`")
    try:
        text = installed.run(env, "doctor")
        as_json = installed.run(env, "doctor", "--json")
    finally:
        kill_leftovers(fake)
    assert text.returncode in (0, 1), (text.stdout, text.stderr)
    _no_traceback(text.stdout, text.stderr, as_json.stdout, as_json.stderr)
    lines = [line for line in text.stdout.splitlines() if line.strip()]
    assert lines, text.stderr
    if as_json.returncode in (0, 1) and as_json.stdout.strip().startswith("["):
        checks = json.loads(as_json.stdout)
        assert len(lines) == len(checks)  # one line per check
        by_name = {c.get("name"): c.get("status") for c in checks}
        # the bundled schema and prompts are found inside the installed package
        for name in ("schema", "prompts"):
            if name in by_name:
                assert by_name[name] == "ok", checks
