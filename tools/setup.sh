#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Rapid builds and tests with (tools/deb-packages.txt:
# the build's libraries, and Chromium with a font for the web page's browser test), Node.js
# when it is missing, and the end-to-end suite's npm packages (tests/e2e, playwright-core among them).
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2046
$SUDO apt-get install -y -qq --no-install-recommends $(cat deb-packages.txt) >/dev/null
echo "setup: packages installed"

# Node.js for the end-to-end suite (tests/e2e). Debian's nodejs and npm only where no
# node is installed: NodeSource's nodejs bundles npm and conflicts with Debian's npm.
if ! command -v node >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
elif ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
# The suite's pinned SDKs (tests/e2e/package-lock.json).
npm ci --prefix ../tests/e2e --no-audit --no-fund --loglevel=error
echo "setup: node $(node --version) and the e2e suite's packages installed"
