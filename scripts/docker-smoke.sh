#!/usr/bin/env bash
# Smoke test of the Docker image: build, check what is inside, run it with a token and
# the fake CLI, wait for /healthz, run one session through the API, check the refusal without a
# token, stop it, check that nothing was left running, clean up.
#
#   bash scripts/docker-smoke.sh [--keep]      # --keep: keep the image (removed by default)
#
# Where no Docker engine answers (`docker info` fails) it prints "docker-smoke: skipped: …" and
# exits 0; tests/test_install.py runs the same steps against the installed wheel without one.
# Needs only bash and docker on the host: JSON is read by the image's own Python, HTTP is done by
# the image's own curl, and the fake CLI (tests/fakes/fake_claude.py) is mounted, not built in.
#
# Environment: DOCKER_SMOKE_IMAGE (tag to build, default tierops:smoke),
#              DOCKER_SMOKE_TIMEOUT (seconds per wait, default 90).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

IMAGE="${DOCKER_SMOKE_IMAGE:-tierops:smoke}"
TIMEOUT="${DOCKER_SMOKE_TIMEOUT:-90}"
NAME="tierops-smoke-$$"
KEEP_IMAGE=0
for arg in "$@"; do
    case "$arg" in
        --keep) KEEP_IMAGE=1 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "docker-smoke: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "docker-smoke: $*" >&2; }
fail() {
    echo "docker-smoke: FAIL: $*" >&2
    if [ -n "${CONTAINER_STARTED:-}" ]; then
        echo "docker-smoke: --- container logs (last 40 lines) ---" >&2
        docker logs --tail 40 "$NAME" >&2 2>&1 || true
    fi
    exit 1
}

if ! command -v docker >/dev/null 2>&1; then
    echo "docker-smoke: skipped: no Docker engine (the docker command is not installed)"
    exit 0
fi
if ! info_err="$(docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null)"; then
    reason="$(printf '%s\n' "$info_err" | grep -v '^[[:space:]]*$' | tail -n 1)"
    echo "docker-smoke: skipped: no Docker engine (${reason:-docker info failed})"
    exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tierops-smoke.XXXXXX")"
CONTAINER_STARTED=""
cleanup() {
    docker rm -f -v "$NAME" >/dev/null 2>&1 || true
    if [ "$KEEP_IMAGE" = 0 ]; then
        docker image rm "$IMAGE" >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- build -------------------------------------------------------------------------------------
log "building $IMAGE (log: $WORK/build.log)"
if ! DOCKER_BUILDKIT=1 docker build --progress=plain -t "$IMAGE" . >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    fail "docker build failed"
fi
size="$(docker image inspect --format '{{.Size}}' "$IMAGE")"
log "built $IMAGE: $((size / 1024 / 1024)) MiB"

# --- what is inside ----------------------------------------------------------------------------
user="$(docker image inspect --format '{{.Config.User}}' "$IMAGE")"
[ "$user" = "10001:10001" ] || fail "the image runs as '$user', not 10001:10001"
version="$(docker run --rm "$IMAGE" --version)" || fail "tierops --version failed"
log "tierops: $version"
claude_version="$(docker run --rm --entrypoint claude "$IMAGE" --version)" || fail "claude --version failed"
case "$claude_version" in
    2.1.197*) log "claude: $claude_version" ;;
    *) fail "claude --version says '$claude_version', not 2.1.197" ;;
esac
docker run --rm --entrypoint sh "$IMAGE" -c '
    set -e
    for tool in tini curl openssl dig ss ps free uptime ssh python3 tierops claude; do
        command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
    done
    for tool in node npm gcc cc make; do
        if command -v "$tool" >/dev/null; then echo "build tool in the runtime image: $tool" >&2; exit 1; fi
    done
    [ "$(id -u)" = 10001 ] && [ -w "$TIEROPS_HOME" ] || { echo "TIEROPS_HOME not writable by $(id -u)" >&2; exit 1; }
    python3 - <<PY
from app.paths import DEFAULT_SCHEMA_PATH, PROMPTS_DIR
for path in (DEFAULT_SCHEMA_PATH, *(PROMPTS_DIR / n for n in ("tier1-observe.md", "tier2-investigate.md", "tier3-remediate.md"))):
    assert path.is_file() and not path.is_symlink(), path
    assert "site-packages" in str(path), path
PY
' || fail "the image lacks a tool, holds build tools, or misses its bundled files"
log "tools, user, state directory and bundled prompts/schema: ok"

# --- refuses to serve without a checks file (TIEROPS_REQUIRE_CHECKS), or on 0.0.0.0 without a token ---
STARTER=(-v "$ROOT/examples/checks-starter.yaml:/etc/tierops/checks.yaml:ro" -e TIEROPS_CHECKS=/etc/tierops/checks.yaml)
set +e
refusal="$(docker run --rm "$IMAGE" 2>&1 >/dev/null)"
code=$?
set -e
[ "$code" = 2 ] || fail "serve without a checks file exited $code, not 2: $refusal"
case "$refusal" in
    *"tierops: error: TIEROPS_REQUIRE_CHECKS is set and there is no checks file"*) log "no checks file: refused (exit 2)" ;;
    *) fail "serve without a checks file did not print the refusal: $refusal" ;;
esac
set +e
refusal="$(docker run --rm "${STARTER[@]}" "$IMAGE" 2>&1 >/dev/null)"
code=$?
set -e
[ "$code" = 2 ] || fail "serve without a token exited $code, not 2: $refusal"
case "$refusal" in
    *"tierops: error: refusing to bind to 0.0.0.0"*) log "no token: refused (exit 2)" ;;
    *) fail "serve without a token did not print the refusal: $refusal" ;;
esac

# --- the fake CLI and the token ----------------------------------------------------------------
# fake_claude.py finds its control file next to argv[0]; the control file is written by the
# image's Python with the stream builders of tests/fakes (running as the host user, so the files
# belong to us); the fake writes its log and counter in the container's /tmp.
mkdir -p "$WORK/fake"
cp tests/fakes/fake_claude.py "$WORK/fake/claude"
chmod 0755 "$WORK/fake" "$WORK/fake/claude"
docker run --rm -i --user "$(id -u):$(id -g)" --entrypoint python3 \
    -v "$ROOT/tests/fakes:/smoke/tests/fakes:ro" -v "$WORK/fake:/out" -w /smoke "$IMAGE" - <<'PY' \
    || fail "could not write the fake CLI's control file"
import json
import os

from tests.fakes import claude_control as cc

healthy = {
    "summary": "All services healthy.",
    "events": [{"level": "info", "service": "nginx", "message": "nginx active (running)"}],
    "memories": [],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "nginx", "status": "healthy", "detail": "active"}],
}
control = {
    "log": "/tmp/fake-claude-invocations.jsonl",
    "state": "/tmp/fake-claude-state.json",
    "check_argv": True,
    "stages": [{"lines": cc.structured_stream(cc.new_session_id(), healthy)}],
}
with open("/out/fake-claude.json", "w", encoding="utf-8") as fh:
    json.dump(control, fh)
os.chmod("/out/fake-claude.json", 0o644)  # the server runs as another user (10001)
PY
TOKEN="smoke-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$TOKEN" >"$WORK/token"
chmod 0644 "$WORK/token"  # a throwaway token; the container's user must read it

# --- run ---------------------------------------------------------------------------------------
# TIEROPS_SCHEDULE=false: no cycle at start, so the session below is the only one. The starter checks
# file is mounted as compose.yaml does (the image requires one); the session below asks for tier 1.
docker run -d --name "$NAME" \
    -p 127.0.0.1::8080 \
    --health-interval=2s --health-start-period=60s \
    "${STARTER[@]}" \
    -e TIEROPS_TOKEN_FILE=/run/secrets/tierops_token \
    -e TIEROPS_CLAUDE_BIN=/opt/fake/claude \
    -e TIEROPS_SCHEDULE=false \
    -e TIEROPS_KILL_GRACE=2 \
    -v "$WORK/token:/run/secrets/tierops_token:ro" \
    -v "$WORK/fake:/opt/fake:ro" \
    "$IMAGE" >/dev/null || fail "docker run failed"
CONTAINER_STARTED=1
log "started $NAME"

deadline=$((SECONDS + TIMEOUT))
while :; do
    health="$(docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$NAME")"
    running="$(docker inspect --format '{{.State.Running}}' "$NAME")"
    [ "$health" = healthy ] && break
    [ "$running" = true ] || fail "the container exited before it was healthy"
    [ "$SECONDS" -lt "$deadline" ] || fail "not healthy after ${TIMEOUT}s (health: ${health:-none})"
    sleep 1
done
log "healthy (the image's HEALTHCHECK on /healthz)"
host_port="$(docker port "$NAME" 8080/tcp | sed -n 1p)"
if command -v curl >/dev/null 2>&1; then
    curl -fsS "http://${host_port}/healthz" >/dev/null || fail "/healthz not reachable on the published port $host_port"
    log "/healthz answers on the published port $host_port"
fi

# api [--anonymous] METHOD PATH [BODY] → prints "STATUS BODY" (the image's Python; the Bearer token is
# read from the mounted secret inside the container)
api() {
    local auth=1
    if [ "$1" = --anonymous ]; then auth=0; shift; fi
    docker exec -i "$NAME" python3 - "$auth" "$@" <<'PY'
import sys
import urllib.error
import urllib.request

auth, method, path = sys.argv[1] == "1", sys.argv[2], sys.argv[3]
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
request = urllib.request.Request(f"http://127.0.0.1:8080{path}", data=body, method=method)
if auth:
    with open("/run/secrets/tierops_token", encoding="utf-8") as fh:
        request.add_header("Authorization", f"Bearer {fh.read().strip()}")
if body is not None:
    request.add_header("Content-Type", "application/json")
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(response.status, response.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode())
PY
}
# field JSON KEY → the value of one top-level key
field() {
    docker exec -i "$NAME" python3 -c 'import json, sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$2" <<<"$1"
}

read -r code _ <<<"$(api --anonymous GET /api/v1/sessions)"
[ "$code" = 401 ] || fail "GET /api/v1/sessions without the token answered $code, not 401"

read -r code body <<<"$(api POST /api/v1/runs '{"tier": 1}')"
[ "$code" = 202 ] || fail "POST /api/v1/runs answered $code: $body"
id="$(field "$body" id)"
log "POST /api/v1/runs: session $id started"

deadline=$((SECONDS + TIMEOUT))
while :; do
    read -r code body <<<"$(api GET "/api/v1/sessions/$id")"
    [ "$code" = 200 ] || fail "GET /api/v1/sessions/$id answered $code: $body"
    status="$(field "$body" status)"
    [ "$status" != running ] && break
    [ "$SECONDS" -lt "$deadline" ] || fail "session $id still running after ${TIMEOUT}s"
    sleep 1
done
[ "$status" = completed ] || fail "session $id ended $status: $body"
origin="$(field "$body" source)"
[ "$origin" = structured_output ] || fail "session $id source is $origin, not structured_output"
docker exec "$NAME" test -s /tmp/fake-claude-invocations.jsonl || fail "the fake CLI never ran"
log "session $id completed (source structured_output) against the fake CLI"

set +e
doctor_out="$(docker exec "$NAME" tierops doctor 2>&1)"
code=$?
set -e
case "$code" in 0|1) ;; *) fail "tierops doctor exited $code: $doctor_out" ;; esac
case "$doctor_out" in *Traceback*) fail "tierops doctor printed a traceback: $doctor_out" ;; esac
log "tierops doctor ran (exit $code; without credentials the credentials check fails)"

# --- stop --------------------------------------------------------------------------------------
docker stop -t 30 "$NAME" >/dev/null
exit_code="$(docker inspect --format '{{.State.ExitCode}}' "$NAME")"
[ "$exit_code" = 0 ] || fail "the container exited $exit_code after docker stop, not 0"
docker logs "$NAME" >"$WORK/container.log" 2>&1
if grep -q Traceback "$WORK/container.log"; then
    fail "the container logged a traceback"
fi
log "stopped cleanly (exit 0)"

# The state is in the volume: read it from a new container, with the image's tierops.
left="$(docker run --rm --volumes-from "$NAME" --entrypoint sh "$IMAGE" -c '
    tierops sessions --json | python3 -c "
import json, sys
rows = json.load(sys.stdin)
print(len(rows), sum(r[\"status\"] == \"running\" for r in rows))"')" || fail "tierops sessions failed on the volume"
read -r total running <<<"$left"
[ "${total:-0}" -ge 1 ] || fail "the volume holds no session"
[ "$running" = 0 ] || fail "$running session(s) left running after the stop"
log "the volume holds $total session(s), none running"

echo "docker-smoke: ok ($IMAGE: build, contents, refusal, healthz, one session, stop)"
