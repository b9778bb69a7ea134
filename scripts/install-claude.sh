#!/usr/bin/env bash
# Idempotent installer of the real Claude Code CLI used by the realcli tests.
#
#   DIR = ${TIEROPS_CLAUDE_DIR:-$HOME/.cache/tierops/claude-code-2.1.197}
#
# Installs @anthropic-ai/claude-code@2.1.197 with npm into DIR (only the npm
# registry is needed: the package pulls its native binary as an optional npm
# dependency). Skips the install when DIR/node_modules/.bin/claude --version
# already reports 2.1.197. The last line printed is the path of the binary.
set -euo pipefail

VERSION="2.1.197"
PACKAGE="@anthropic-ai/claude-code@${VERSION}"
DIR="${TIEROPS_CLAUDE_DIR:-${HOME:?HOME is not set}/.cache/tierops/claude-code-${VERSION}}"
BIN="${DIR}/node_modules/.bin/claude"

die() {
    echo "install-claude.sh: ERROR: $*" >&2
    exit 1
}

installed_version_ok() {
    [ -x "$BIN" ] || return 1
    local out
    out="$("$BIN" --version 2>/dev/null)" || return 1
    case "$out" in
        "${VERSION}"|"${VERSION} "*) return 0 ;;
        *) return 1 ;;
    esac
}

if installed_version_ok; then
    echo "install-claude.sh: claude ${VERSION} already installed in ${DIR}" >&2
    echo "$BIN"
    exit 0
fi

command -v npm >/dev/null 2>&1 || die "npm not found on PATH; install Node.js + npm first (e.g. 'apt-get install -y nodejs npm')."

mkdir -p "$DIR" || die "cannot create ${DIR}"
echo "install-claude.sh: installing ${PACKAGE} into ${DIR} (about 245 MB) ..." >&2
if ! npm install --prefix "$DIR" --no-audit --no-fund --no-save "$PACKAGE" >&2; then
    die "npm install --prefix ${DIR} ${PACKAGE} failed (see npm output above)."
fi

[ -e "$BIN" ] || die "npm finished but ${BIN} does not exist."
if ! installed_version_ok; then
    got="$("$BIN" --version 2>&1 || true)"
    die "${BIN} --version did not report ${VERSION} (got: ${got:-nothing}). The native optional dependency @anthropic-ai/claude-code-linux-x64 may be missing (npm --omit=optional?)."
fi

echo "install-claude.sh: installed $("$BIN" --version 2>/dev/null)" >&2
echo "$BIN"
