#!/bin/sh
# run.sh - runs the end-to-end suite of `rapid serve` (tests/e2e/*.test.js) with
# node's built-in test runner, one file at a time. CTest's "e2e" test calls it;
# by hand: tests/e2e/run.sh [FILE.test.js ...] (RAPID_BINARY defaults to build/rapid).
# Without node or tests/e2e/node_modules it skips (exit 77, CTest's "skipped")
# with a message; under CI=true that is a failure instead.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

missing() {
    if [ "${CI:-}" = true ]; then
        echo "e2e: $1 (under CI=true that is a failure)" >&2
        exit 1
    fi
    echo "e2e: skipping: $1" >&2
    exit 77
}

command -v node >/dev/null 2>&1 || missing "node is not installed (tools/setup.sh installs it)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || missing "node $(node --version) is too old (18 or later)"
[ -f "$here/node_modules/openai/package.json" ] && [ -f "$here/node_modules/@anthropic-ai/sdk/package.json" ] ||
    missing "tests/e2e/node_modules is missing (run: npm ci --prefix tests/e2e)"

cd "$here"
if [ "$#" -eq 0 ]; then
    set -- *.test.js
fi
exec node --test --test-concurrency=1 --test-reporter=spec "$@"
