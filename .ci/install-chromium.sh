#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard's browser tests (test/dashboard/, driven by playwright-core
# with executablePath /usr/bin/chromium). Idempotent; uses sudo when not root.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"; exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
