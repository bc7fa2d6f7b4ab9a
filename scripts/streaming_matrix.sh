#!/usr/bin/env bash
# MosaicML `streaming` and litdata, the real libraries, under loaderdoctor: a side venv with them,
# then one row per cell (plain torch, `run`, `run --heal`, the drop-in class; clean and with a
# DataLoader worker SIGKILLed once) with the ledger of ids the training loop received against the
# plain clean job's, then their pytest files (tests/ecosystem/test_streaming_libraries.py and the
# names the libraries give an incident).
#
# Not in CI's install: mosaicml-streaming 0.13.0 requires transformers<5, and the eco extra CI
# installs needs transformers>=5.23 (pip cannot put both in one venv); streaming imports
# torchvision at import, and the torchvision for CI's CPU torch 2.13.0 (0.28.0, a CUDA build)
# fails there ("operator torchvision::nms does not exist"), so this venv has torch 2.14.1 and
# torchvision 0.29.1, the CUDA builds (several GB, from the machine's own wheels). Both
# libraries also pull a cloud-storage stack (boto3, azure, google-cloud, oci). Their tests skip,
# saying so, where the libraries cannot be imported.
#
# usage: scripts/streaming_matrix.sh          (about 5 minutes to install the first time; then
#                                              about 3 minutes for the cells and tests)
# env:   STREAMING_MATRIX_DIR  where the venv and logs go (default /tmp/streaming-matrix; an
#                              existing venv there is reused)
#        STREAMING_MATRIX_TORCH  the torch release (default 2.14.1)
set -euo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${STREAMING_MATRIX_DIR:-/tmp/streaming-matrix}
VENV="$WORK/venv"
mkdir -p "$WORK"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
fi
# CI's constraints with the torch release swapped; the libraries pick the torchvision and
# transformers they need
sed -E "s/^torch==.*/torch==${STREAMING_MATRIX_TORCH:-2.14.1}/" "$ROOT/.ci/constraints.txt" > "$WORK/constraints.txt"
"$VENV/bin/pip" install -q -c "$WORK/constraints.txt" -e "$ROOT[dev]" mosaicml-streaming litdata \
    > "$WORK/install.log" 2>&1 || { tail -20 "$WORK/install.log" >&2; exit 1; }
PY="$VENV/bin/python"
echo "installed: $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("torch", "mosaicml-streaming", "litdata", "transformers", "torchvision")))')"

STACK="$ROOT/tests/ecosystem/stacks/streaming_libraries.py"
status=0
printf '| %-8s | %-14s | %-6s | %-40s |\n' library cell exit "ledger (each loader: ids received / stock)"
printf '|%s|%s|%s|%s|\n' ---------- ---------------- -------- ------------------------------------------
for library in mosaic litdata; do
    cells_dir="$WORK/$library"
    rm -rf "$cells_dir" && mkdir -p "$cells_dir/data"
    if [[ $library == litdata ]]; then "$PY" "$STACK" litdata-data "$cells_dir/data" "$cells_dir/x" > /dev/null 2>&1; fi
    for cell in plain run heal dropin plain-kill heal-kill; do
        data="$cells_dir/data"
        rm -f "$data/killed"
        command=("$PY" "$STACK" "$library" "$data" "$cells_dir/$cell")
        env=(OMP_NUM_THREADS=1)
        case $cell in
            run) command=("$PY" -m loaderdoctor run --report-dir "$cells_dir/report-$cell" -- "${command[@]}") ;;
            heal|heal-kill) command=("$PY" -m loaderdoctor run --heal --hang-timeout 30 --report-dir "$cells_dir/report-$cell" -- "${command[@]}") ;;
            dropin) env+=(LD_DROP_IN=1) ;;
        esac
        [[ $cell == *-kill ]] && env+=(LD_KILL_AT=50)
        set +e
        (cd "$ROOT/tests/ecosystem/stacks" && env "${env[@]}" PYTHONPATH="$ROOT/tests/ecosystem/stacks" timeout 300 "${command[@]}") \
            > "$cells_dir/$cell.log" 2>&1
        rc=$?
        set -e
        ledger=$("$PY" - "$cells_dir" "$cell" <<'PYEOF'
import json, pathlib, sys
folder, cell = pathlib.Path(sys.argv[1]), sys.argv[2]
stock = {p.name[len("plain-"):-5]: json.loads(p.read_text()) for p in folder.glob("plain-*.json")}
parts = []
for path in sorted(folder.glob(f"{cell}-*.json")):
    name = path.name[len(cell) + 1 : -5]
    ids = json.loads(path.read_text())
    want = stock.get(name, stock.get("torch"))
    same = "same order" if ids == want else ("same set" if sorted(ids) == sorted(want or []) else "DIFFERENT")
    parts.append(f"{name} {len(ids)}/{len(want or [])} {same}")
print("; ".join(parts) or "no ledger")
PYEOF
)
        report="$cells_dir/report-$cell/report.json"
        if [[ -f $report ]]; then
            ledger+=" | $("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], [(i["cause"], i["action"]) for i in r["incidents"]])' "$report")"
        fi
        printf '| %-8s | %-14s | %-6s | %-40s |\n' "$library" "$cell" "$rc" "$ledger"
    done
done

echo "== pytest (logs: $WORK/pytest.log)"
set +e
(cd "$ROOT" && timeout 900 "$PY" -m pytest -q -p no:cacheprovider -n 0 \
    tests/ecosystem/test_streaming_libraries.py tests/ecosystem/test_library_names.py) > "$WORK/pytest.log" 2>&1
rc=$?
set -e
tail -3 "$WORK/pytest.log"
[[ $rc -eq 0 ]] || status=1
exit $status
