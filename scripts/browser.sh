#!/usr/bin/env bash
# The headless Chromium that the report.html tests drive (tests/reports/browser.py): Debian's
# `chromium` package, installed when no Chromium is on PATH. Called by `make test` before the
# tests, which then require it (LRCHECK_REQUIRE_BROWSER=1). Where it cannot be installed — not
# Debian/Ubuntu, or not root — this says so and exits 0, and those tests skip with the reason.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        exit 0
    fi
done
if [ -n "${LRCHECK_CHROMIUM:-}" ] && [ -x "$LRCHECK_CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "scripts/browser.sh: no Chromium, and no apt-get as root to install it: the" \
         "report.html browser tests will be skipped (install chromium, or set LRCHECK_CHROMIUM)" >&2
    echo skip
    exit 0
fi
echo "scripts/browser.sh: installing Debian's chromium for the report.html tests" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
