#!/usr/bin/env bash
# Installs Debian's chromium (the headless browser tests/html.rs renders the
# HTML report in) when it is missing and this machine can: as root, with
# apt-get. Elsewhere it says so and exits 0; the browser tests then show
# as ignored, with this script named as what runs them.
set -euo pipefail
if command -v chromium >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-chromium: chromium is missing and this is not root with apt-get; the browser tests of tests/html.rs are skipped" >&2
  exit 0
fi
echo "setup-chromium: installing Debian's chromium (first run only)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version >&2
