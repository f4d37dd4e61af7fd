#!/usr/bin/env bash
# The default demo in fp32 and in bf16-mixed (its bf16 sampling copy), seeds 0..2, 70 steps each, no
# time limits, alternating fp32 / bf16 per seed, pinned to one core with one thread so that other work
# on a 2-core machine disturbs both alike. Prints before/after accuracy and wall time per run; a
# bf16-mixed run evaluates its bf16 copy and its fp32 master weights both (eval.weights=auto).
#   bash benchmarks/precision_demo.sh [OUT_DIR] [CORE]      (docs/precision.md reports one such run)
#   SEEDS=0 bash benchmarks/precision_demo.sh               (one seed)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/precision-demo}
core=${2:-0}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out"
for seed in ${SEEDS:-0 1 2}; do
  for p in fp32 bf16-mixed; do
    name=prec-$p-s$seed
    start=$(date +%s)
    taskset -c "$core" .venv/bin/rlvr train name="$name" output_dir="$out" seed="$seed" \
      model.precision="$p" model.threads=1 train.time_limit_s=null train.time_budget_s=null \
      train.final_checkpoint=none --quiet > "$out/$name.log" 2>&1
    echo "$name wall_s=$(( $(date +%s) - start )) $(grep -h 'held-out before\|held-out after\|master weights' "$out/$name.log" \
      | sed 's/answer tags.*//' | tr -s ' ' | tr '\n' ' ')"
  done
done
