#!/usr/bin/env bash
# Refreshes tests/fixtures/claude-code from the shared captures (../shared/fixtures by default,
# or the folder given). The tests only ever read tests/fixtures, so a lone clone runs the whole
# suite in a lone clone; run this when new captures arrive there, then commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:-../shared/fixtures}"
if [ ! -d "$src/claude-code" ]; then
    echo "sync-fixtures: $src/claude-code does not exist (give the shared fixtures folder as the argument)" >&2
    exit 2
fi
mkdir -p tests/fixtures
# schema-rules/ (scripts/capture-schema-rules.py) and o_max_budget_usd/ (python -m
# tests.realcli.test_budget) are ours, not shared captures: kept as is.
if command -v rsync >/dev/null 2>&1; then
    rsync -a --delete --exclude 'schema-rules/' --exclude 'o_max_budget_usd/' "$src/claude-code/" tests/fixtures/claude-code/
else
    for dir in "$src"/claude-code/*/; do
        version=$(basename "$dir")
        mkdir -p "tests/fixtures/claude-code/$version"
        find "tests/fixtures/claude-code/$version" -mindepth 1 -maxdepth 1 ! -name schema-rules ! -name o_max_budget_usd -exec rm -rf {} +
        cp -r "$dir". "tests/fixtures/claude-code/$version/"
    done
fi
echo "tests/fixtures/claude-code now mirrors $src/claude-code ($(find tests/fixtures/claude-code -name stdout.jsonl | wc -l) captures)"
