#!/usr/bin/env bash
# The dashboard's browser test: headless Chromium (installed when missing,
# see ensure-chromium.sh) loads the pages, replays dead letters from the
# page, and takes the screenshots docs/ui.md shows.
# Usage: scripts/ui-test.sh [--update]   (--update rewrites docs/ui/*.png)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-chromium.sh
if [ "${1:-}" = "--update" ]; then
  export JETFLEET_UPDATE_SCREENSHOTS=1
fi
exec go test -count=1 -run 'TestDashboardInABrowser' -v ./internal/ui/
