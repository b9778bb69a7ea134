#!/usr/bin/env bash
# Installs everything the test suite needs, then runs the whole suite (ruff, mypy, pytest on
# every core with pytest-xdist) and prints the 15 slowest tests at the end.
# Every step is skipped when already done, so a second run starts testing at once:
#   - .venv with the package and its test extras (reinstalled when pyproject.toml changes)
#   - the real Claude Code CLI 2.1.197 from the npm registry (scripts/install-claude.sh)
#   - Debian's chromium for the browser tests (apt)
#   - axe-core for the accessibility checks (npm, cached in ~/.cache/tierops)
#   - Debian's PostgreSQL server for the store's tests on PostgreSQL (apt); each test process
#     starts a throwaway cluster of its own (tests/pg_cluster.py) and removes it at the end
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k ingest`; `-n 0` runs in one process).
# TIEROPS_TEST_WORKERS sets the number of pytest workers (default: twice the cores, since many
# tests wait on subprocesses, sockets and browsers rather than compute).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.tierops-test-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
    touch "$stamp"
fi

# The realcli tests run the real binary; install it (cached in ~/.cache/tierops) up front so a
# missing npm fails here with a clear message instead of inside a test.
bash scripts/install-claude.sh >/dev/null

# Browser tests drive Debian's chromium through Playwright (never Playwright's own browser
# download: only the package registries are reachable).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
fi

# The store's tests run on PostgreSQL too, on a throwaway cluster from Debian's server package.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
fi

# The accessibility checks (tests/web/pages/test_console_browser.py) inject axe-core, from the
# npm registry, cached like the CLI. With AXE_CORE_JS set the tests fail (never skip) without it.
AXE_VERSION="4.10.3"
AXE_DIR="${HOME:?HOME is not set}/.cache/tierops/axe-core-${AXE_VERSION}"
if [ -z "${AXE_CORE_JS:-}" ]; then
    export AXE_CORE_JS="${AXE_DIR}/node_modules/axe-core/axe.min.js"
    if [ ! -f "$AXE_CORE_JS" ]; then
        command -v npm >/dev/null 2>&1 || { echo "scripts/test.sh: npm is needed to install axe-core" >&2; exit 1; }
        npm install --prefix "$AXE_DIR" --no-audit --no-fund --no-save "axe-core@${AXE_VERSION}" >&2
    fi
fi

# Bytecode: hundreds of tests start `tierops` or `python -m app` as a subprocess. Without cached
# bytecode each one compiles the package again (PYTHONDONTWRITEBYTECODE is common in CI images);
# compileall writes it once. pytest caches its rewritten test modules the same way, so the test
# modules are collected once, next to mypy, and the workers start from that cache.
.venv/bin/python -m compileall -q app >/dev/null
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m pytest --collect-only -q -p no:xdist >/dev/null 2>&1 &
collecting=$!
trap 'kill "$collecting" 2>/dev/null || true' EXIT  # ruff or mypy failed: do not leave it running

.venv/bin/ruff check .
.venv/bin/mypy app  # [tool.mypy] in pyproject.toml; strict for the modules listed there
wait "$collecting" || true  # a collection error is reported by the run itself

workers="${TIEROPS_TEST_WORKERS:-$(( $(nproc) * 2 ))}"
set +e
.venv/bin/python -m pytest -n "$workers" --dist worksteal --durations=15 "$@"
rc=$?
if [ "$rc" -eq 0 ] && [ "$#" -eq 0 ]; then
    # The whole store suite once more, on PostgreSQL (tests/conftest.py: the `db` fixture).
    TIEROPS_TEST_STORE=postgresql .venv/bin/python -m pytest -n "$workers" --dist worksteal -q tests/store
    rc=$?
fi
set -e
if [ "$rc" -eq 5 ]; then
    # pytest: "no tests were collected". With a filter that is the operator's choice; for the
    # whole suite it means the suite is broken, which must not pass silently.
    if [ "$#" -gt 0 ]; then
        echo "scripts/test.sh: the given pytest arguments selected no tests" >&2
        exit 0
    fi
    echo "scripts/test.sh: pytest collected no tests at all; the suite is broken" >&2
    exit 1
fi
exit "$rc"
