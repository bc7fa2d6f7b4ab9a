#!/usr/bin/env bash
# The extended tier of the test suite: the other start methods, fault kinds and chaos seeds of
# cases the suite already runs (marker `extended`), which CI skips to stay within its 15 minutes
# on two cores. Run it before a release and before a session ends, from the repo's root with the
# test extra installed:  bash scripts/extended_tests.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")/.."
LOADERDOCTOR_EXTENDED=1 exec python -m pytest -q -m extended -p no:cacheprovider "$@"
