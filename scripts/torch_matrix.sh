#!/usr/bin/env bash
# Run loaderdoctor's torch-facing tests against each torch release it declares (the floor and the
# newest), each in a throwaway venv, and print one table row per release.
#
# Not run in CI: a release other than the CI pin is a multi-GB CUDA build. Slow; run it in the
# background on a shared machine:  nohup scripts/torch_matrix.sh > /tmp/torch-matrix.log 2>&1 &
#
# usage: scripts/torch_matrix.sh [TORCH_VERSION ...]      (default: 2.13.0 2.14.1)
# env:   TORCH_MATRIX_DIR  where the venvs and logs go (default: a new /tmp/torch-matrix.XXXXXX;
#                          an existing venv there is reused)
#        TORCH_MATRIX_TESTS  the test files to run (default below)
#        TORCH_MATRIX_TIMEOUT  seconds for one release's pytest run (default 3600)
#        TORCH_MATRIX_PYTEST_ARGS  extra pytest arguments (e.g. --runxfail, -k ...)
set -euo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -gt 0 ]]; then VERSIONS=("$@"); else VERSIONS=(2.13.0 2.14.1); fi
WORK=${TORCH_MATRIX_DIR:-$(mktemp -d /tmp/torch-matrix.XXXXXX)}
TESTS=${TORCH_MATRIX_TESTS:-tests/test_torch_compat.py tests/test_equivalence.py tests/test_dropin.py tests/test_faults.py tests/test_portable.py}
TIMEOUT=${TORCH_MATRIX_TIMEOUT:-3600}
PYTEST_ARGS=${TORCH_MATRIX_PYTEST_ARGS:-}
mkdir -p "$WORK"
echo "torch matrix: ${VERSIONS[*]} in $WORK" >&2

declare -a ROWS=()
status=0
for version in "${VERSIONS[@]}"; do
    venv="$WORK/venv-$version"
    log="$WORK/pytest-$version.log"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --upgrade pip >&2
    fi
    if ! "$venv/bin/pip" install -q "torch==$version" -e "$ROOT[dev]" > "$WORK/install-$version.log" 2>&1; then
        ROWS+=("$(printf '| %-12s | %-16s | %6s | %6s | %7s | %7s | %6s |' "$version" "install failed" - - - - -)")
        status=1
        continue
    fi
    installed=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
    start=$(date +%s)
    set +e
    # shellcheck disable=SC2086  # TESTS is a list of paths
    (cd "$ROOT" && timeout "$TIMEOUT" "$venv/bin/python" -m pytest -q -p no:cacheprovider $PYTEST_ARGS $TESTS) > "$log" 2>&1
    rc=$?
    set -e
    seconds=$(($(date +%s) - start))
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | tail -1 || true)
    count() { grep -oE "[0-9]+ $1" <<< "$summary" | grep -oE '^[0-9]+' || echo 0; }
    verdict=$([[ $rc -eq 0 ]] && echo pass || echo "FAIL (rc $rc)")
    [[ $rc -eq 0 ]] || status=1
    ROWS+=("$(printf '| %-12s | %-16s | %6s | %6s | %7s | %7s | %5ss |' "$installed" "$verdict" \
        "$(count passed)" "$(count failed)" "$(count xfailed)" "$(count skipped)" "$seconds")")
done

printf '| %-12s | %-16s | %6s | %6s | %7s | %7s | %6s |\n' torch result passed failed xfailed skipped time
printf '|%s|%s|%s|%s|%s|%s|%s|\n' -------------- ------------------ -------- -------- --------- --------- --------
printf '%s\n' "${ROWS[@]}"
echo "logs: $WORK/pytest-<version>.log" >&2
exit $status
