"""Overrides that turn any config into a seconds-long run on the tiny random model."""

TINY_RUN = [
    "model.name=tiny-random",
    "model.threads=1",
    "data.train_size=64",
    "data.eval_size=8",
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=8",
    # tiny-random never answers; a character-count reward (tests/reward_fixtures.py) still varies
    # within groups, so updates happen
    "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]",
    "rewards.workers=1",
    "algo.micro_batch_size=4",
    "train.time_limit_s=null",
    "train.time_budget_s=null",
]

# A two-step-sized run of the bundled SmolLM2-135M on chain_sum, for the tests that need a model
# vLLM serves (tests/test_rollout_vllm.py, tests/test_train_ray_vllm.py)
SMOLLM_RUN = [
    "model.name=smollm2-135m-instruct",
    "model.threads=1",
    "train.log_trajectories=true",
    "data.train_size=16",
    "data.eval_size=2",
    "eval.before=false",
    "train.final_checkpoint=none",
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=12",
    "algo.dynamic_sampling=false",
    "data.few_shot=[]",
    "rewards.workers=1",
    "rewards.functions=[{name: reasoning_gym}, {name: 'reward_fixtures:scaled_len', weight: 0.01}]",
    "train.time_limit_s=null",
    "train.time_budget_s=null",
]
