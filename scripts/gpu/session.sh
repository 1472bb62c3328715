#!/usr/bin/env bash
# One device call: install tkreg and every plugin offline, then run the phases asked for, each
# with its own time limit, logging everything under $OUT. Phases:
#   correctness  every generated correctness item (pytest --tkreg), scheduler order trace
#   sweeps       the tuning sweeps in scripts/gpu/*_sweep.py
#   bench        pytest --tkreg --tkreg-bench (benchmark record) and the timing cross-check
# Usage: bash scripts/gpu/session.sh correctness sweeps bench
# TKREG_ARGS (e.g. --tkreg-op=add) is passed to every pytest run; SWEEPS overrides the sweep scripts.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - start ))s] $*"; }

pip_args=(-q --no-deps --no-build-isolation -e .)
for d in plugins/*/; do pip_args+=(-e "$d"); done
python3 -m pip install "${pip_args[@]}" >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
elapsed "installed"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv; date -u; tkreg doctor; tkreg list; } >"$OUT/env.log" 2>&1
tail -n +1 "$OUT/env.log" | head -40

for phase in "$@"; do
  case "$phase" in
    correctness)
      timeout 330 python3 -m pytest --tkreg -m "tkreg_correctness" -p no:cacheprovider -q -n 8 ${TKREG_ARGS:-} \
        --junitxml="$OUT/correctness.xml" >"$OUT/correctness.log" 2>&1
      elapsed "correctness rc=$?"; grep -E "passed|failed|tkreg summary" -A2 "$OUT/correctness.log" | tail -5
      grep -E "^FAILED|^ERROR" "$OUT/correctness.log" | head -30
      timeout 60 python3 -m pytest -q -p no:cacheprovider plugins/*/tests/*gpu*.py >"$OUT/gpu_tests.log" 2>&1
      elapsed "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
      ;;
    sweeps)
      for s in ${SWEEPS:-scripts/gpu/*_sweep.py scripts/gpu/*_check.py}; do
        [ -f "$s" ] || continue
        name=$(basename "$s" .py)
        timeout 200 python3 "$s" >"$OUT/$name.log" 2>&1
        elapsed "$name rc=$?"; tail -25 "$OUT/$name.log"
      done
      ;;
    bench)
      timeout 420 python3 -m pytest --tkreg --tkreg-bench -m tkreg_bench -p no:cacheprovider -q ${TKREG_ARGS:-} \
        --benchmark-json="$OUT/bench.json" --tkreg-bench-md="$OUT/bench.md" --benchmark-columns=median,rounds \
        >"$OUT/bench.log" 2>&1
      elapsed "bench rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/bench.log" | tail -10; cat "$OUT/bench.md"
      [ -f scripts/gpu/check_timing.py ] && { timeout 60 python3 scripts/gpu/check_timing.py 2>&1 | tee "$OUT/check_timing.log" | tail -8; }
      ;;
    *) echo "unknown phase $phase" ;;
  esac
done
elapsed "done"
