#!/usr/bin/env bash
# The CUDA paths, end to end: short runs on tiny-random with model.device=cuda (fp32 and bf16-mixed
# GRPO, PPO's critic, each training stage, a two-stage pipeline). Prints one line per run (its exit
# code, steps, last loss) and ends non-zero if any run failed. Not a speed benchmark: a check that
# the same configs that run on the CPU run on a GPU, on a machine that has one.
#   bash benchmarks/gpu_paths.sh [OUT_DIR]          (DEVICE=cpu to try the script itself here)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/rlvr-gpu-paths}
device=${DEVICE:-cuda}
py=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD/src:$PWD/tests:${PYTHONPATH:-}"
mkdir -p "$out"
rm -rf "${out:?}"/*
chat="$out/chat.jsonl"
for a in 1 2 3 4 5 6 7 8; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"What is $a + $a?\"}, {\"role\": \"assistant\", \"content\": \"<answer>$((a + a))</answer>\"}]}"
done > "$chat"
common=(model.name=tiny-random "model.device=$device" data.train_size=32 data.eval_size=8
  rollout.prompts_per_step=2 rollout.group_size=4 rollout.max_new_tokens=16 train.steps=2
  train.time_limit_s=null train.time_budget_s=null rewards.workers=1 algo.dynamic_sampling=false
  "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]" "output_dir=$out")
failed=0
run() {
  local name=$1
  shift
  local start=$SECONDS
  "$py" -m rlvr.cli train "$@" "${common[@]}" "name=$name" --quiet > "$out/$name.log" 2>&1
  local rc=$?
  local last
  last=$("$py" - "$out/$name" <<'EOF'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
files = sorted(run.glob("**/metrics.jsonl"))
rows = [json.loads(x) for f in files for x in f.read_text().splitlines() if x.strip()]
train = [r for r in rows if r.get("phase") == "train"]
loss = next((r[k] for r in reversed(train) for k in ("update/loss", "sft/loss", "dpo/loss", "distill/loss") if k in r), None)
print(f"steps={len(train)} last_loss={loss}")
EOF
)
  echo "$name rc=$rc $last $((SECONDS - start))s"
  if [ $rc -ne 0 ]; then failed=1; tail -5 "$out/$name.log"; fi
}
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
run grpo-fp32 grpo
run grpo-bf16 grpo model.precision=bf16-mixed
run ppo-critic ppo
run sft sft "sft.path=$chat" sft.batch_size=4
run sft-unpacked sft "sft.path=$chat" sft.batch_size=4 sft.packing=false
run rft rft rft.min_reward=0.0 rft.keep_truncated=true
run dpo dpo
run opd opd distill.teacher=tiny-random
run self-distill self_distill
run kd kd "distill.path=$chat" distill.teacher=tiny-random
run luffy luffy
run chord chord
run pipeline grpo "stages=[{name: sft, stage: sft, set: {sft.path: '$chat', sft.batch_size: 4}}, {name: rl, stage: rl}]"
exit $failed
