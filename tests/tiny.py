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
