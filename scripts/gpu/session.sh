#!/usr/bin/env bash
# One device call: install tkreg and every plugin offline, run the phases asked for (each with its
# own time limit), and pack every log and JSON into $OUT/logs.tgz (the device tool returns at most
# 8 files). A short summary of each phase is printed as it ends. Phases:
#   faults       the fault plugin (tests/fault_plugin) beside every add kernel:
#                pytest --tkreg --tkreg-op=add -m tkreg_correctness --tkreg-timeout=$FAULT_TIMEOUT;
#                exactly the faulty kernels' items must fail; wall time; no runner left behind
#   makerun      `make run` as the README gives it, on the installed environment (wall time)
#   correctness  every generated correctness item (pytest --tkreg -m tkreg_correctness)
#   bench        pytest --tkreg --tkreg-bench -m tkreg_bench (benchmark JSON)
#   script:NAME  python scripts/gpu/NAME.py $ARGS_NAME (its records go to $OUT/raw)
# Usage: bash scripts/gpu/session.sh faults makerun script:matmul_suite
# TKREG_ARGS is passed to the pytest phases; PHASE_TIMEOUT (s) bounds each phase (default 300).
set -uo pipefail
DEST=${OUT:-$PWD/out}
RAW=$DEST/raw
mkdir -p "$RAW"
export PYTHONUNBUFFERED=1 OUT=$RAW  # scripts write their records under raw/
start=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - start ))s] $*"; }
limit=${PHASE_TIMEOUT:-300}

pip_args=(-q --no-deps --no-build-isolation -e .)
for d in plugins/*/; do pip_args+=(-e "$d"); done
python3 -m pip install "${pip_args[@]}" >"$RAW/install.log" 2>&1 || { cat "$RAW/install.log"; exit 1; }
elapsed "installed"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv; date -u; nproc;
  python3 -c "import torch, triton, pytest; print('torch', torch.__version__, 'triton', triton.__version__, 'pytest', pytest.__version__)";
  tkreg doctor; } >"$RAW/env.log" 2>&1
head -12 "$RAW/env.log"

runners_left() { pgrep -f "tkreg.testing.runner_process" | wc -l; }

for phase in "$@"; do
  t0=$(date +%s)
  case "$phase" in
    faults)
      python3 -m pip install -q --no-deps --no-build-isolation -e tests/fault_plugin >>"$RAW/install.log" 2>&1
      timeout "$limit" python3 -m pytest --tkreg --tkreg-op=add -m tkreg_correctness -p no:cacheprovider -rf \
        --tkreg-timeout="${FAULT_TIMEOUT:-10}" --junitxml="$RAW/faults.xml" ${TKREG_ARGS:-} >"$RAW/faults.log" 2>&1
      rc=$?
      elapsed "faults rc=$rc wall=$(( $(date +%s) - t0 ))s runners left: $(runners_left)"
      grep -E "^(FAILED|ERROR)" "$RAW/faults.log" | sed -E 's/\[.*//' | sort | uniq -c
      tail -2 "$RAW/faults.log"
      python3 -m pip uninstall -q -y tkreg-fault-plugin >>"$RAW/install.log" 2>&1
      ;;
    makerun)
      timeout "$limit" make run BIN="$(dirname "$(command -v python3)")" INSTALL= \
        ARGS="--junitxml=$RAW/makerun.xml ${TKREG_ARGS:-}" >"$RAW/makerun.log" 2>&1
      rc=$?
      elapsed "make run rc=$rc wall=$(( $(date +%s) - t0 ))s runners left: $(runners_left)"
      cp out/bench-*.json out/bench-*.jsonl "$RAW/" 2>/dev/null
      grep -E "^(FAILED|ERROR)" "$RAW/makerun.log" | head -20
      grep -A12 "tkreg summary" "$RAW/makerun.log" | head -14
      tail -1 "$RAW/makerun.log"
      ;;
    correctness)
      timeout "$limit" python3 -m pytest --tkreg -m tkreg_correctness -p no:cacheprovider -q ${TKREG_ARGS:-} \
        --junitxml="$RAW/correctness.xml" >"$RAW/correctness.log" 2>&1
      elapsed "correctness rc=$? wall=$(( $(date +%s) - t0 ))s"
      grep -E "^(FAILED|ERROR)" "$RAW/correctness.log" | head -30
      grep -A10 "tkreg summary" "$RAW/correctness.log" | head -12; tail -1 "$RAW/correctness.log"
      ;;
    bench)
      timeout "$limit" python3 -m pytest --tkreg --tkreg-bench -m tkreg_bench -p no:cacheprovider -q ${TKREG_ARGS:-} \
        --benchmark-json="$RAW/bench.json" --tkreg-bench-jsonl="$RAW/bench.jsonl" --benchmark-columns=median,rounds \
        >"$RAW/bench.log" 2>&1
      elapsed "bench rc=$? wall=$(( $(date +%s) - t0 ))s"
      grep -E "^(FAILED|ERROR)" "$RAW/bench.log" | head -10; tail -1 "$RAW/bench.log"
      ;;
    script:*)
      name=${phase#script:}
      args_var="ARGS_$name"
      timeout "$limit" python3 "scripts/gpu/$name.py" ${!args_var:-} >"$RAW/$name.log" 2>&1
      elapsed "$name rc=$? wall=$(( $(date +%s) - t0 ))s"
      tail -30 "$RAW/$name.log"
      ;;
    *) echo "unknown phase $phase" ;;
  esac
  tar czf "$DEST/logs.tgz" -C "$DEST" raw  # after every phase: a call killed at its limit keeps what finished
done
tar czf "$DEST/logs.tgz" -C "$DEST" raw && rm -rf "$RAW"
elapsed "done"
