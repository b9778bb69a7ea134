# TierOps in a container: the dashboard, the API and the schedule (`tierops serve`), and the pinned
# Claude Code CLI that it supervises.
#
#   docker build -t tierops:0.1.0 .
#   docker run -d -p 127.0.0.1:8080:8080 -v tierops-state:/var/lib/tierops \
#       -v "$PWD/token:/run/secrets/tierops_token:ro" -e TIEROPS_TOKEN_FILE=/run/secrets/tierops_token \
#       -v "$PWD/examples/checks-starter.yaml:/etc/tierops/checks.yaml:ro" -e TIEROPS_CHECKS=/etc/tierops/checks.yaml \
#       -e ANTHROPIC_API_KEY tierops:0.1.0
#
# Three stages; only the last one ships:
#   wheels   the TierOps wheel (a regular, non-editable build) plus a wheel of every dependency
#   claude   npm installs @anthropic-ai/claude-code at the pinned version
#   runtime  Python slim + the tools the tier prompts use + the wheels + the CLI binary; no build tools,
#            no Node.js, no npm, no pip cache, no source tree
#
# Needs BuildKit for RUN --mount: the default builder since Docker Engine 23; on older engines build
# with DOCKER_BUILDKIT=1 docker build … (or docker buildx build).
# scripts/docker-smoke.sh builds this file and runs one session against the fake CLI; without a
# Docker engine, tests/test_install.py runs the same steps against the installed wheel.

# Full tags: a rebuild gets the same Python and Debian release. For byte-for-byte rebuilds pin the
# digests too (`docker buildx imagetools inspect python:3.11.14-slim-bookworm`) and bump both on purpose.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG NODE_IMAGE=node:22.12.0-bookworm-slim
# The CLI the stream parser, the fake CLI and tests/fixtures were made with (app/cli/doctor.py).
ARG CLAUDE_CODE_VERSION=2.1.197

# --- stage 1: wheels ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheels
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps everything else out of the context).
# app/bundled/{prompts,schemas} are relative symlinks to the top-level folders; the build copies
# the files, so the wheel holds real files and app/paths.py finds them with importlib.resources.
COPY pyproject.toml README.md ./
COPY prompts ./prompts
COPY schemas ./schemas
COPY app ./app
RUN pip wheel --no-deps --wheel-dir /dist . \
 && python -c "import sys, zipfile; names = set(zipfile.ZipFile(sys.argv[1]).namelist()); \
need = ['app/bundled/prompts/tier1-observe.md', 'app/bundled/prompts/tier2-investigate.md', \
'app/bundled/prompts/tier3-remediate.md', 'app/bundled/schemas/agent-response.json']; \
missing = [n for n in need if n not in names]; sys.exit(f'wheel lacks {missing}' if missing else 0)" /dist/tierops-*.whl \
 && pip wheel --wheel-dir /wheels "$(echo /dist/tierops-*.whl)[notify]"

# --- stage 2: claude ------------------------------------------------------------------------------
# npm installs the wrapper package, which pulls the native binary for this platform through its
# optionalDependencies (claude-code-linux-x64 / -linux-arm64) and, in its postinstall, hard-links
# that binary over bin/claude.exe. The result is a self-contained executable (it needs glibc only,
# which both bookworm images have): the runtime stage copies that one file and needs no Node.js.
FROM ${NODE_IMAGE} AS claude
ARG CLAUDE_CODE_VERSION
RUN npm install --prefix /opt/claude-code --no-audit --no-fund --no-update-notifier \
        "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
 && bin=/opt/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe \
 && test "$(stat -c %s "$bin")" -gt 10000000 \
 && HOME=/tmp/claude-home "$bin" --version | grep -q "^${CLAUDE_CODE_VERSION}" \
 && rm -rf /tmp/claude-home

# --- stage 3: runtime -----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG CLAUDE_CODE_VERSION
LABEL org.opencontainers.image.title="TierOps" \
      org.opencontainers.image.description="Tiered Claude Code health-check sessions: stream, validate, route, escalate." \
      org.opencontainers.image.version="0.1.0" \
      io.tierops.claude-code.version="${CLAUDE_CODE_VERSION}"

# tini: PID 1 that forwards SIGTERM to tierops and reaps the zombies the agent's tools leave.
# The rest are the commands the tier prompts run: curl, openssl, dig (dnsutils), ss (iproute2),
# ps/free/uptime (procps); ca-certificates for TLS to the API and to checked hosts; ssh for checks
# run on other hosts with a key you mount (compose.yaml, option 3).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        tini curl openssl dnsutils iproute2 procps ca-certificates openssh-client \
 && rm -rf /var/lib/apt/lists/*

# The wheels are bind-mounted for this one step: they never become a layer of the image. The
# notify extra (Apprise) is installed: TIEROPS_NOTIFY_URLS works in the image.
RUN --mount=type=bind,from=wheels,source=/wheels,target=/tmp/wheels \
    pip install --no-cache-dir --no-index --find-links /tmp/wheels --root-user-action=ignore \
        --disable-pip-version-check 'tierops[notify]' \
 && tierops --version && python -c "import apprise"

COPY --from=claude /opt/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe \
     /usr/local/bin/claude
RUN HOME=/tmp/claude-home claude --version | grep -q "^${CLAUDE_CODE_VERSION}" && rm -rf /tmp/claude-home

# A dedicated user with a fixed uid/gid (10001), so a volume's or a secret's owner can be set from
# the host. Its home is the state directory.
RUN groupadd --gid 10001 tierops \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/tierops \
        --shell /usr/sbin/nologin tierops \
 && install -d -o tierops -g tierops -m 0750 /var/lib/tierops

# TIEROPS_HOME holds everything TierOps writes: tierops.db, sessions/, home/ (the CLI's HOME, with
# its login and settings) and cycle.lock. One volume keeps all of it.
# TIEROPS_LOG_FORMAT: text here; json gives one object per line for a log shipper.
# TIEROPS_REQUIRE_CHECKS: `serve` refuses to start without a checks file (one line saying what to
# mount): without one every scheduled cycle would start at tier 1, a paid language-model run. Mount
# one and set TIEROPS_CHECKS (compose.yaml does); TIEROPS_REQUIRE_CHECKS=false restores tier 1.
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: no auto-update (the CLI stays at the pinned version),
# no telemetry or error reports; set it to an empty value to change that.
ENV TIEROPS_HOME=/var/lib/tierops \
    TIEROPS_LOG_FORMAT=text \
    TIEROPS_REQUIRE_CHECKS=true \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/tierops"]
WORKDIR /var/lib/tierops
USER 10001:10001

EXPOSE 8080
# The port is the one of CMD: serving on another --port needs its own --health-cmd.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/healthz"]

# `serve` on all interfaces refuses to start without TIEROPS_TOKEN or TIEROPS_TOKEN_FILE, and (above)
# without a checks file (one `tierops: error:` line each, exit 2). Any other command works too:
# `docker run … tierops:0.1.0 doctor`.
# -e 143: on `docker stop` uvicorn finishes its shutdown (sessions stopped and recorded, database
# closed) and then re-raises SIGTERM on itself, which tini would report as 143; a clean stop exits 0.
ENTRYPOINT ["tini", "-e", "143", "--", "tierops"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
