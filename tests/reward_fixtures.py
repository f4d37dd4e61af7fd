"""Misbehaving and helper rewards for the reward-pool tests.

They live in an importable module (not in the test file) because rewards run in worker processes,
which find them by import path ("reward_fixtures:spin") or by registered name.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import time

from rlvr.rewards import register_group_reward, register_reward


def spin(completion, example):
    while True:
        pass


def sleep_long(completion, example):
    time.sleep(100)
    return 1.0


def hang_in_c(completion, example):
    # Catastrophic backtracking: the regex engine runs in C and holds the GIL the whole time.
    re.match(r"(a+)+$", "a" * 64 + "b")
    return 1.0


def crash(completion, example):
    os._exit(3)


def segfault(completion, example):
    ctypes.string_at(0)
    return 1.0


def boom(completion, example):
    raise ValueError("bad thing happened\nsecond line")


def exits(completion, example):
    raise SystemExit(0)


def nan(completion, example):
    return float("nan")


def wrong_type(completion, example):
    return "1.0"


def returns_none(completion, example):
    return None


def parts(completion, example):
    return {"score": 0.5, "bonus": 2.0}


def parts_no_score(completion, example):
    return {"a": 1.0, "b": 2.0}


def pid(completion, example):
    return float(os.getpid())


def sleep_then_len(completion, example, *, seconds: float = 0.1):
    time.sleep(seconds)
    return float(len(completion))


def misbehave(completion, example):
    """Behaviour chosen per item, so that one batch can mix good and bad calls."""
    if completion == "spin":
        return spin(completion, example)
    if completion == "crash":
        return crash(completion, example)
    if completion == "segfault":
        return segfault(completion, example)
    if completion == "raise":
        return boom(completion, example)
    if completion == "sleep":
        return sleep_long(completion, example)
    return float(len(completion))


def token_info(completion, example, *, completion_tokens=None, finish_reason=None):
    return {"tokens": float(completion_tokens), "cut": 1.0 if finish_reason == "length" else 0.0}


def any_kwargs(completion, example, **kwargs):
    return float(len(kwargs))


@register_reward("fixture_scaled_len")
def scaled_len(completion, example, *, scale: float = 1.0):
    return scale * len(completion)


def slow_len(completion, example, *, seconds: float = 0.05):
    """``scaled_len`` (scale 0.01) that takes ``seconds``: a slow verifier."""
    import time

    time.sleep(seconds)
    return 0.01 * len(completion)


def scaled_len_odd_ids(completion, example, *, scale: float = 1.0):
    """``scaled_len`` for examples whose id ends in an odd number, 0 for the rest: every other
    group has equal rewards, so dynamic sampling drops it."""
    return scale * len(completion) if int(example.id.rsplit("-", 1)[-1]) % 2 else 0.0


@register_group_reward("fixture_group_len")
def group_len(completions, example, *, completion_tokens=None):
    """Each completion's length, plus its rank in the group (so the test sees the whole group)."""
    order = sorted(range(len(completions)), key=lambda i: len(completions[i]))
    rank = {index: position for position, index in enumerate(order)}
    return [len(c) + rank[i] / 10 for i, c in enumerate(completions)]


@register_group_reward("fixture_group_misbehave")
def group_misbehave(completions, example):
    if "spin" in completions:
        while True:
            pass
    if "short" in completions:
        return [1.0]
    return [0.0] * len(completions)


def _failing_setup(params):
    raise OSError(f"cannot load {params['path']}")


@register_reward("fixture_bad_setup", setup=_failing_setup)
def bad_setup(completion, example, *, path: str = "model"):
    return 1.0


# ------------------------------------------------------------------ trainer-wiring rewards
# (tests/test_train_wiring.py). They depend on the example's number (the last part of its id,
# "chain_sum-0-29" -> 29), so a test can tell from samples.jsonl which groups they made constant,
# which ones errored, and what each group's rewards must be.
def example_number(example_id: str) -> int:
    return int(example_id.rsplit("-", 1)[-1])


def constant_for_even(completion, example):
    """0.5 for every completion of an even-numbered example (a group without signal); otherwise a
    score of the example's number plus a length score (groups differ in mean, completions within a
    group vary; values stay near 1, where float32 keeps the within-group differences exact enough)."""
    number = example_number(example.id)
    return 0.5 if number % 2 == 0 else _varying(number, completion)


def _varying(number: int, completion: str) -> float:
    return number / 64 + 0.01 * len(completion)


def fail_some(completion, example):
    """Raises for even-length completions of odd-numbered examples; otherwise like constant_for_even's
    varying branch (every group that does not error has signal)."""
    number = example_number(example.id)
    if number % 2 == 1 and len(completion) % 2 == 0:
        raise ValueError(f"planted failure on example {number}")
    return _varying(number, completion)


def correct_only_for(completion, example, *, example_id: str):
    """1 for every completion of the example ``example_id``, 0 for any other example."""
    return 1.0 if example.id == example_id else 0.0


# ------------------------------------------------------------------ a judge endpoint
class ScriptedJudge:
    """A stand-in for the judge *model* behind ``rlvr.rewards.judge_server``: the real server and the
    real client speak the OpenAI protocol, and this answers every request with ``reply`` while keeping
    the prompts it was sent (so a test can read what the rubric became)."""

    name = "scripted-judge"

    def __init__(self, reply: str = "Score: 7") -> None:
        self.reply_text = reply
        self.prompts: list[str] = []

    def reply(self, messages, max_tokens):
        self.prompts.append(messages[-1]["content"])
        return self.reply_text, 1, 1


def start_scripted_judge(reply: str = "Score: 7"):
    """``(server, url, judge)``: a judge server on a free local port; ``server.shutdown()`` stops it."""
    from rlvr.rewards.judge_server import start_in_thread

    judge = ScriptedJudge(reply)
    server, url = start_in_thread(judge)
    return server, url, judge


# ------------------------------------------------------------------ a reward model
def tiny_classifier(path, token_level: bool = False) -> str:
    """Save a tiny random Llama sequence classifier (one score) with tiny-random's tokenizer to ``path``;
    ``token_level``: a token classifier with two classes instead."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification, LlamaForTokenClassification

    from rlvr.models import load_tokenizer

    tokenizer = load_tokenizer("tiny-random")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=2 if token_level else 1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    (LlamaForTokenClassification if token_level else LlamaForSequenceClassification)(config).save_pretrained(
        path
    )
    tokenizer.save_pretrained(path)
    return str(path)


def tiny_causal_lm(path) -> str:
    """Save a tiny random Llama causal LM with tiny-random's tokenizer (a generative PRM's shape)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.models import load_tokenizer

    tokenizer = load_tokenizer("tiny-random")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def tiny_token_classifier(path) -> str:
    """Save a tiny random Llama token classifier (two classes: a process reward model's shape)."""
    return tiny_classifier(path, token_level=True)


_calls = 0


def sigterm_rank(completion, example, *, rank: int = 1, calls: int = 1, flag: str = ""):
    """``scaled_len`` (scale 0.01) that, on torchrun's rank ``rank``, sends SIGTERM to that rank's
    process at this worker's ``calls``-th call, once per ``flag`` file (a resumed run is left alone).
    The worker is a child of the pool's forkserver, itself a child of the rank's process."""
    global _calls
    _calls += 1
    if os.environ.get("RANK") == str(rank) and _calls == calls and not os.path.exists(flag):
        open(flag, "w").close()

        def parent(pid: int) -> int:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])

        os.kill(parent(os.getppid()), signal.SIGTERM)
    return 0.01 * len(completion)


def step_lengths(completion, example, *, separator: str = "\n\n", scale: float = 0.01, extra: int = 0):
    """Per-step rewards: each step's character count times ``scale`` (``extra`` steps too many: wrong)."""
    steps = completion.split(separator)
    return {"score": 0.0, "steps": [scale * len(s) for s in steps] + [0.0] * extra}


def programs_seen(completion, example):
    """A test writer's reward in the role-game tests: what the game told it about the coder."""
    programs = example.metadata["programs"]
    flags = example.metadata["programs_correct"]
    return {
        "score": len(completion) * 0.01,
        "chars": float(sum(len(p) for p in programs)),
        "n": float(len(flags)),
    }
