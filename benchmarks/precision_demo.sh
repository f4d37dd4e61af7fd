#!/usr/bin/env bash
# The default demo in fp32 and in bf16-mixed (its bf16 sampling copy), seeds 0..2, 70 steps each, no
# time limits, one thread per run. Prints before/after accuracy and wall time per run; a bf16-mixed run
# evaluates its bf16 copy and its fp32 master weights both (eval.weights=auto).
#   bash benchmarks/precision_demo.sh [OUT_DIR] [CORE]   one run at a time, alternating fp32 / bf16 per
#                                                        seed, pinned to CORE so that other work on a
#                                                        2-core machine disturbs both alike
#   PAIRED=1 bash benchmarks/precision_demo.sh [OUT_DIR]  the fp32 and the bf16 run of a seed at once,
#                                                        each pinned to its own core (cores 0 and 1,
#                                                        swapped every seed); the next seed starts when
#                                                        both have ended (half the wall time; the two
#                                                        share the memory bus while both run)
#   SEEDS=0 bash benchmarks/precision_demo.sh             (one seed)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/precision-demo}
core=${2:-0}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out"

run() {  # run PRECISION SEED CORE
  local name=prec-$1-s$2 start
  start=$(date +%s)
  taskset -c "$3" .venv/bin/rlvr train name="$name" output_dir="$out" seed="$2" \
    model.precision="$1" model.threads=1 train.time_limit_s=null train.time_budget_s=null \
    train.final_checkpoint=none --quiet > "$out/$name.log" 2>&1
  echo "$name core=$3 wall_s=$(( $(date +%s) - start )) $(grep -h 'held-out before\|held-out after\|master weights' \
    "$out/$name.log" | sed 's/answer tags.*//' | tr -s ' ' | tr '\n' ' ')"
}

for seed in ${SEEDS:-0 1 2}; do
  if [ "${PAIRED:-0}" = 1 ]; then
    run fp32 "$seed" $(( seed % 2 )) &
    run bf16-mixed "$seed" $(( (seed + 1) % 2 )) &
    wait
  else
    for p in fp32 bf16-mixed; do run "$p" "$seed" "$core"; done
  fi
done
