#!/usr/bin/env bash
# Browser tests drive Debian's Chromium through Playwright (no browser download).
# Installs the `chromium` package when /usr/bin/chromium is missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
