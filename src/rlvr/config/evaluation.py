"""The held-out evaluation's config (``eval.*``): when it runs, greedy and sampled accuracy, per-group
accuracy, and test-time scaling (best-of-N, weighted votes, self-verification; docs/data.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from rlvr.config.section import Section


class EvalConfig(Section):
    every: int = Field(0, ge=0, description="Evaluate every N steps (0 = only before and after training).")
    before: bool = Field(True, description="Evaluate the starting model before training.")
    max_new_tokens: int | None = Field(None, description="Defaults to rollout.max_new_tokens.")
    weights: Literal["auto", "sampler", "master", "both"] = Field(
        "auto",
        description="Which weights a training run evaluates: sampler (what the engine samples from: "
        "the bf16 copy under bf16-mixed), master (the learner's own weights, as `rlvr eval` of the "
        "checkpoint sees them; keys eval/*), both (sampler as eval/*, master as eval_master/*), auto "
        "(both where the engine samples from a copy in another dtype, else sampler).",
    )
    samples: int = Field(
        0, ge=0, description="Sampled completions per prompt for pass@k/mean@k (0 = greedy only)."
    )
    pass_k: list[int] = Field(
        default_factory=lambda: [1], description="k values of pass@k (need k <= samples)."
    )
    temperature: float = Field(1.0, ge=0.0, description="Temperature for the sampled eval.")
    group_by: list[str] = Field(
        default_factory=list,
        description="Also report greedy accuracy per group: registered groupings (operators, "
        "answer_sign, data_source) or metadata.<path>; default: none, except for the default job "
        "(chain_sum: operators, answer_sign).",
    )
    best_of: list[int] = Field(
        default_factory=list,
        description="Test-time scaling over the sampled eval: for each N, best-of-N "
        "(eval/best_of_<N>/<selector>) and weighted votes (eval/vote_<N>/<weight>) over each problem's first "
        "N samples (need N <= eval.samples). Empty: none (docs/data.md, Test-time scaling).",
    )
    reward_model: str | None = Field(
        None,
        description="Sequence-classifier reward model (local dir or hub id) scoring samples for "
        "select_by / vote_weight reward_model; run on the CPU of the evaluating process.",
    )
    select_by: list[Literal["verifier", "reward_model", "logprob"]] = Field(
        default_factory=lambda: ["verifier", "logprob"],
        description="How best-of-N picks one sample: verifier (the eval reward's score: an oracle, pass@N "
        "for a 0/1 grader), reward_model (eval.reward_model's score), logprob (mean token logprob).",
    )
    vote_weight: list[Literal["none", "logprob", "reward_model"]] = Field(
        default_factory=lambda: ["none", "logprob"],
        validate_default=True,
        description="Weights of the answer vote: none (1 each: maj@N), logprob (exp of the mean token "
        "logprob), reward_model (exp of eval.reward_model's score).",
    )
    self_verify: bool = Field(
        False,
        description="Self-verification: the policy gets its greedy answer back with eval.verify_prompt "
        "and may revise it (one more greedy generation per problem): eval/self_verify/*.",
    )
    verify_prompt: str | None = Field(
        None,
        min_length=1,
        description="The self-verification turn ({question}, {answer} are filled in); None: ask whether "
        "the answer is correct and for the corrected final answer in <answer> tags.",
    )

    @field_validator("best_of")
    @classmethod
    def _best_of_fits(cls, ns: list[int], info: ValidationInfo) -> list[int]:
        if any(n < 1 for n in ns):
            raise ValueError(f"every N must be at least 1, got {ns}")
        samples = info.data.get("samples", 0)
        if ns and max(ns) > samples:
            raise ValueError(
                f"N={max(ns)} > eval.samples={samples}: best-of-N and votes take each problem's first N "
                "samples; set eval.samples to at least the largest N"
            )
        return sorted(set(ns))

    @field_validator("reward_model")
    @classmethod
    def _reward_model_path(cls, raw: str | None) -> str | None:
        from pathlib import Path

        if raw is None:
            return raw
        path = Path(raw).expanduser()
        if path.exists() and not (path / "config.json").is_file():
            raise ValueError(f"{path} has no config.json")
        if not path.exists() and (raw.startswith((".", "/", "~")) or raw.count("/") > 1):
            raise ValueError(f"{path} does not exist")
        return raw

    @field_validator("select_by", "vote_weight", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("vote_weight")
    @classmethod
    def _reward_model_given(cls, weights: list[str], info: ValidationInfo) -> list[str]:
        named = "reward_model" in weights or "reward_model" in info.data.get("select_by", [])
        if info.data.get("best_of") and named and not info.data.get("reward_model"):
            raise ValueError(
                "eval.select_by / eval.vote_weight name reward_model: give eval.reward_model (a reward "
                "model directory or hub id)"
            )
        return weights

    @field_validator("group_by")
    @classmethod
    def _known_groupings(cls, names: list[str]) -> list[str]:
        from rlvr.errors import RlvrError
        from rlvr.eval.groups import check_groupings

        try:
            check_groupings(names)
        except RlvrError as exc:
            raise ValueError(str(exc).removeprefix("eval.group_by: ")) from None
        return names
