#!/usr/bin/env bash
# Regenerate every stored GPU result (results/gpu/*.json) in one command on a CUDA machine.
#
#   NORMEDU_GIT_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_results.sh [OUTDIR]
#
# Steps, most important first, each under its own time limit and all under one overall
# budget (GPU_BUDGET_S, default 500 s) so that a short GPU lease returns whatever finished:
#   1. the benchmark (python -m normedu.bench --store): results/gpu/bench.json
#   2. the CUDA-only tests (pytest -m gpu)
#   3. the scale experiments (python -m normedu.experiments --store --only NAME)
# GPU_STEPS="gradflow prepost" runs only the steps named: bench, tests, and the experiments
# that `python -m normedu.experiments --list` names (the registry is the one list; those with
# no stored result yet run first).
# Each finished results/gpu/*.json is copied to OUTDIR (default gpu-out/) at once, with the log.
# It uses the machine's own python3 and torch (no install step): the package runs from this
# checkout through PYTHONPATH.
set -u
OUTDIR=${1:-${OUT:-gpu-out}}
mkdir -p "$OUTDIR/gpu"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
START=$(date +%s)
BUDGET=${GPU_BUDGET_S:-500}
exec > >(tee -a "$OUTDIR/gpu-log.txt") 2>&1

# step CAP_SECONDS CMD...: run CMD for at most CAP seconds and never past the overall budget.
step() {
  local cap=$1
  shift
  local left=$((BUDGET - ($(date +%s) - START)))
  if ((left < 20)); then
    echo "== skipped (budget spent): $*"
    return
  fi
  ((cap > left)) && cap=$left
  echo "== $(date -u +%T) [${cap}s] $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$cap" "$@"
  echo "== exit $? after $((SECONDS - t0)) s"
  cp results/gpu/*.json "$OUTDIR/gpu/" 2>/dev/null
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name(), 'cpus', torch.get_num_threads())"

# The scale experiments, from the registry: the ones without a stored result first.
ALL_EXPERIMENTS=$($PY -m normedu.experiments --list) || exit 1
EXPERIMENTS=""
for n in $ALL_EXPERIMENTS; do [ -f "results/gpu/$n.json" ] || EXPERIMENTS+="$n "; done
for n in $ALL_EXPERIMENTS; do [ -f "results/gpu/$n.json" ] && EXPERIMENTS+="$n "; done
# GPU_STEPS picks steps by name (default: all, in this order).
wanted() { [[ " ${GPU_STEPS:-bench tests $EXPERIMENTS} " == *" $1 "* ]]; }
wanted bench && step 300 $PY -m normedu.bench --store --out /tmp/normedu-bench --no-progress \
  --impl eager textbook compiled fast fast_out --shape 8192x768 8192x4096 2048x16384
wanted tests && step 120 $PY -m pytest -m gpu -q -p no:cacheprovider tests/test_fast.py \
  tests/test_bench.py tests/test_distributed.py
for name in $EXPERIMENTS; do
  wanted $name && step 150 $PY -m normedu.experiments --store --only $name
done
echo "== done after $(($(date +%s) - START)) s"
ls -l "$OUTDIR/gpu"
