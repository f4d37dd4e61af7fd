"""The data plan resumes exactly: N steps straight equal k steps, a stop, a resume and N − k more,
bit for bit on tiny-random — the draw (a curriculum or a mixture, behind GRESO selection), the
prompt history and the replay buffer are all in the checkpoint.

Planted and seen failing: the collector's ``state()`` leaving out ``history`` (selection then
admits prompts the uninterrupted run skipped), ``replay`` (nothing to replay after the resume), or
``round`` (the history's steps restart).
"""

from __future__ import annotations

import json

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.log import read_jsonl

BASE = [
    *TINY_RUN,
    "data.train_size=4",
    "data.eval_size=0",
    "eval.before=false",
    "train.steps=5",
    "train.save_every=2",
    "optim.lr=1e-3",
    "rollout.prompts_per_step=2",
    "algo.refill=true",
    "data.selection.kind=greso",
    "data.selection.p_start=0.3",
    "data.replay.kind=share",
    "data.replay.share=0.5",
    # rewards the tiny model's completions alike within a group now and then: streaks to skip on
    "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]",
]
PLANS = {
    "band_greso_replay": ["data.curriculum.kind=band"],
    "mixture_greso_replay": [
        "data.sources=[{name: a, task: chain_sum, train_size: 3, eval_size: 0, weight: 2},"
        " {name: b, task: leg_counting, train_size: 3, eval_size: 0}]",
        "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]",
    ],
}
STATE_KEYS = ("sampler", "history", "replay", "round")


@pytest.mark.parametrize("plan", list(PLANS))
def test_the_data_plan_resumes_bit_for_bit(tmp_path, plan: str) -> None:
    def cfg(name: str, *extra: str):
        return load_config(None, [*BASE, *PLANS[plan], f"output_dir={tmp_path}", f"name={name}", *extra])

    api.train(cfg("full"), quiet=True)
    api.train(cfg("cut", "train.time_limit_s=0.001"), quiet=True)  # stops after step 1, checkpointed
    assert [r["step"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")] == [1]
    api.train(cfg("cut"), resume=True, quiet=True)

    def train_rows(name: str) -> list[dict]:
        rows = [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in rows]

    full, resumed = train_rows("full"), train_rows("cut")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5]
    assert resumed == full  # every metric of every step, the data plan's included
    keys = set().union(*full)
    assert {"selection/skipped", "replay/replayed", "history/seen"} <= keys
    assert sum(r["replay/replayed"] for r in full) > 0, "nothing was replayed: the test compares too little"
    history = {name: read_jsonl(tmp_path / name / "prompt_history.jsonl") for name in ("full", "cut")}
    assert history["cut"] == history["full"] and len(history["full"]) >= 10
    states = [
        json.loads((tmp_path / name / "checkpoints" / "step-000005" / "state.json").read_text())
        for name in ("full", "cut")
    ]
    for key in STATE_KEYS:
        assert states[0][key] == states[1][key], key
