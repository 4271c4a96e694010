#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Rapid builds and tests with (tools/deb-packages.txt).
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2046
$SUDO apt-get install -y -qq --no-install-recommends $(cat deb-packages.txt) >/dev/null
echo "setup: packages installed"
