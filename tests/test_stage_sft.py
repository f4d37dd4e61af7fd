"""The SFT stage: demonstrations from a chat file, cross-entropy on their assistant tokens only, a token
mean over the whole step (micro-batching and packing change nothing), exact resume, ``rlvr sft``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_cli_resume import flat, rlvr
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import TINY_RANDOM, load_model, load_tokenizer
from rlvr.train.learn.learner import Learner
from rlvr.train.stages.sft import CrossEntropy, DemonstrationSource, load_demonstrations, read_chat
from rlvr.trajectory import TrajectoryGroup

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 2}}</tool_call>'
ROWS = [
    {
        "messages": [
            {"role": "user", "content": "What is 2+2? Use the tool."},
            {"role": "assistant", "content": CALL},
            {"role": "tool", "content": "4"},
            {"role": "assistant", "content": "2 + 2 = 4."},
        ]
    },
    {"prompt": "3 + 4 =", "completion": "3 + 4 = 7\n<answer>7</answer>"},
    {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}],
        "completion": [{"role": "assistant", "content": "Hi!"}],
    },
    {
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
            {"role": "assistant", "content": "Green, then red."},
        ]
    },
]


def assistant_texts(row: dict) -> list[str]:
    messages = row.get("messages") or [
        *(row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]),
        *(
            row["completion"]
            if isinstance(row["completion"], list)
            else [{"role": "assistant", "content": row["completion"]}]
        ),
    ]
    return [m["content"] for m in messages if m["role"] == "assistant"]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "chats.jsonl", ROWS)


def sft_cfg(tmp_path: Path, chats: Path, *extra: str):
    return load_config(None, [*TINY_RUN, "stage=sft", f"sft.path={chats}", f"output_dir={tmp_path}", *extra])


# ---------------------------------------------------------------------------------- end to end
def test_sft_run_trains_on_a_repeated_example(tmp_path: Path) -> None:
    one = write_rows(tmp_path / "one.jsonl", ROWS[:1])
    cfg = sft_cfg(
        tmp_path,
        one,
        f"sft.eval_path={one}",
        "sft.batch_size=2",
        "sft.eval_every=2",
        "train.steps=4",
        "name=run",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "data.eval_size=2",
    )
    results = api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    train = [r for r in rows if r["phase"] == "train"]
    losses = [r["sft/loss"] for r in train]
    assert len(losses) == 4 and all(b < a for a, b in zip(losses, losses[1:])), losses
    trained = 2 * sum(
        len(load_tokenizer(TINY_RANDOM)(t + "<|im_end|>")["input_ids"]) for t in assistant_texts(ROWS[0])
    )
    assert all(r["sft/tokens"] == r["completion/tokens"] == trained for r in train)
    assert [r["sft/epoch"] for r in train] == [2.0, 4.0, 6.0, 8.0]
    assert all("update/grad_norm" in r and r["update/lr"] == 1e-3 for r in train)
    # sft.eval_every=2: the held-out loss on steps 2 and 4, and before / after training
    assert ["sft/eval_loss" in r for r in train] == [False, True, False, True]
    assert results["after"]["sft/eval_loss"] < results["before"]["sft/eval_loss"]
    assert results["run"]["updates"] == 4
    sample = read_jsonl(tmp_path / "run" / "samples.jsonl")[0]
    assert sample["example_id"] == "one.jsonl line 1" and CALL in sample["completion"]


def test_sft_needs_its_file_and_names_a_bad_row(tmp_path: Path, chats: Path) -> None:
    with pytest.raises(RlvrError, match="stage=sft needs sft.path"):
        read_chat(load_config(None, ["stage=sft"]).sft, "sft")
    bad = write_rows(tmp_path / "bad.jsonl", [ROWS[1], {"prompt": "x", "completion": "<|im_end|> y"}])
    with pytest.raises(
        RlvrError, match=r"1 of 2 demonstrations are refused:\n- bad.jsonl line 2: .*end-of-turn"
    ):
        load_demonstrations(sft_cfg(tmp_path, bad), load_tokenizer(TINY_RANDOM))
    with pytest.raises(RlvrError, match="bad.jsonl line 2.*more than sft.max_length=8"):
        load_demonstrations(
            sft_cfg(tmp_path, write_rows(bad, ROWS[1:3]), "sft.max_length=8"), load_tokenizer(TINY_RANDOM)
        )


# ---------------------------------------------------------------------------------- the source
def test_source_shuffles_each_epoch_and_resumes_in_place(tmp_path: Path, chats: Path) -> None:
    cfg = sft_cfg(tmp_path, chats, "sft.batch_size=3")
    tokenizer = load_tokenizer(TINY_RANDOM)
    source = DemonstrationSource(cfg, tokenizer)
    taken = [[g.example_index for g in source.collect().kept] for _ in range(4)]
    flat_order = [i for step in taken for i in step]
    assert sorted(flat_order[:4]) == sorted(flat_order[4:8]) == sorted(flat_order[8:12]) == [0, 1, 2, 3]
    assert flat_order[:4] != flat_order[4:8] or flat_order[4:8] != flat_order[8:12]  # reshuffled
    again = DemonstrationSource(cfg, tokenizer)
    again.collect()
    state = again.state()
    resumed = DemonstrationSource(cfg, tokenizer)
    resumed.load_state(json.loads(json.dumps(state)))  # as a checkpoint stores it
    assert [[g.example_index for g in resumed.collect().kept] for _ in range(3)] == taken[1:]
    with pytest.raises(RlvrError, match="now has 3 demonstrations, the checkpoint was taken with 4"):
        DemonstrationSource(sft_cfg(tmp_path, chats, "sft.limit=3"), tokenizer).load_state(state)


# ---------------------------------------------------------------------------------- the objective
def learner(cfg) -> Learner:
    return Learner(cfg, load_model(TINY_RANDOM), load_tokenizer(TINY_RANDOM).pad_token_id)


# Adam's first step is lr·g/(|g|+eps): with eps=1 and lr=1 it moves each weight by ≈ g, so equal
# parameters after one step mean equal gradients (with the default eps it would be ≈ lr·sign(g)).
LINEAR_STEP = ["optim.lr=1.0", "optim.eps=1.0", "optim.warmup_steps=0", "optim.grad_clip=1e6"]


def one_update(cfg, capture: list | None = None) -> tuple[dict, list[torch.Tensor]]:
    ln = learner(cfg)
    assert isinstance(ln.objective, CrossEntropy)
    demos = load_demonstrations(cfg, load_tokenizer(TINY_RANDOM))
    if capture is not None:  # the micro-batches the objective really scores, and their logprobs and mask
        inner = ln.objective._logprobs

        def spy(model, micro):
            logprobs, mask = inner(model, micro)
            capture.append((micro, logprobs.detach(), mask))
            return logprobs, mask

        ln.objective._logprobs = spy
    metrics = ln.update([TrajectoryGroup(t.example_index, [t]) for t in demos])
    return metrics, [p.detach().clone() for p in ln.model.parameters()]


@pytest.mark.parametrize("packing", [True, False])
def test_the_loss_covers_assistant_tokens_only(tmp_path: Path, chats: Path, packing: bool) -> None:
    tokenizer = load_tokenizer(TINY_RANDOM)
    seen: list = []
    cfg = sft_cfg(tmp_path, chats, f"sft.packing={packing}", "sft.max_length=96", "algo.micro_batch_size=1")
    metrics, _ = one_update(cfg, seen)
    assert len(seen) >= 2  # several micro-batches
    if packing:  # each example of each packed row, with the mask the loss used
        pairs = [
            (row.input_ids[s:e], mask[k, s:e].tolist())
            for micro, _, mask in seen
            for k, row in enumerate(micro)
            for s, e in row.spans
        ]
    else:
        pairs = [
            (ids, row_mask)
            for micro, _, mask in seen
            for ids, row_mask in zip(micro.completion_ids.tolist(), mask.tolist())
        ]
    trained_ids = [[t for t, w in zip(ids, mask) if w] for ids, mask in pairs]
    # what the loss covers, decoded: each assistant message's text and its end-of-turn token, nothing else
    covered = sorted(tokenizer.decode(ids) for ids in trained_ids)
    assert covered == sorted("".join(t + "<|im_end|>" for t in assistant_texts(row)) for row in ROWS)
    count = sum(len(tokenizer(t + "<|im_end|>")["input_ids"]) for row in ROWS for t in assistant_texts(row))
    assert sum(len(ids) for ids in trained_ids) == count == metrics["sft/tokens"]
    summed = sum(float((logprobs * mask).sum()) for _, logprobs, mask in seen)
    assert metrics["sft/loss"] == pytest.approx(-summed / count, rel=1e-6)  # the token mean of those


@pytest.mark.parametrize("packing", [True, False])
def test_micro_batches_do_not_change_the_update(tmp_path: Path, chats: Path, packing: bool) -> None:
    """Token mean over the whole step: the sum over micro-batches, divided by the step's trained tokens."""
    base = [*LINEAR_STEP, f"sft.packing={packing}", "sft.max_length=96"]
    one_row, one_params = one_update(sft_cfg(tmp_path, chats, *base, "algo.micro_batch_size=1"))
    all_rows, all_params = one_update(sft_cfg(tmp_path, chats, *base, "algo.micro_batch_size=8"))
    assert one_row["sft/loss"] == pytest.approx(all_rows["sft/loss"], rel=1e-6)
    moved = max(
        float((a - b.detach()).abs().max()) for a, b in zip(all_params, load_model(TINY_RANDOM).parameters())
    )
    assert moved > 1e-3  # the step moved the weights, so the comparison means something
    for a, b in zip(one_params, all_params):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_packed_and_padded_give_the_same_loss_and_update(tmp_path: Path, chats: Path) -> None:
    packed, packed_params = one_update(sft_cfg(tmp_path, chats, *LINEAR_STEP, "sft.packing=true"))
    padded, padded_params = one_update(sft_cfg(tmp_path, chats, *LINEAR_STEP, "sft.packing=false"))
    assert packed["sft/loss"] == pytest.approx(padded["sft/loss"], rel=1e-5)
    assert packed["update/grad_norm"] == pytest.approx(padded["update/grad_norm"], rel=1e-4)
    for a, b in zip(packed_params, padded_params):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_held_out_loss_matches_the_training_loss_before_a_step(tmp_path: Path, chats: Path) -> None:
    ln = learner(sft_cfg(tmp_path, chats, f"sft.eval_path={chats}"))
    held_out = ln.objective.evaluate(ln)["sft/eval_loss"]
    demos = load_demonstrations(ln.cfg, load_tokenizer(TINY_RANDOM))
    metrics = ln.update([TrajectoryGroup(t.example_index, [t]) for t in demos])
    assert metrics["sft/loss"] == pytest.approx(held_out, rel=1e-5)
    assert learner(sft_cfg(tmp_path, chats)).objective.evaluate(ln) == {}  # no eval_path: none


# ---------------------------------------------------------------------------------- resume, CLI
def test_resume_continues_exactly(tmp_path: Path, chats: Path) -> None:
    steps = [
        "sft.batch_size=3",
        "train.save_every=2",
        "optim.lr=1e-3",
        "eval.before=false",
        "data.eval_size=2",
    ]
    api.train(sft_cfg(tmp_path, chats, "name=full", "train.steps=4", *steps), quiet=True)
    api.train(sft_cfg(tmp_path, chats, "name=cut", "train.steps=2", *steps), quiet=True)
    api.train(sft_cfg(tmp_path, chats, "name=cut", "train.steps=4", *steps), resume=True, quiet=True)

    def rows(name: str) -> list[dict]:
        return [
            {k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
            for r in read_jsonl(tmp_path / name / "metrics.jsonl")
            if r["phase"] == "train"
        ]

    full, resumed = rows("full"), rows("cut")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed):
        assert a.keys() == b.keys() and "sft/loss" in a
        assert b == {
            k: pytest.approx(v, rel=1e-6, abs=1e-9) if isinstance(v, float) else v for k, v in a.items()
        }


def test_rlvr_sft_trains_and_a_bad_row_exits_2(tmp_path: Path, chats: Path) -> None:
    common = [f"sft.path={chats}", f"output_dir={tmp_path}", "train.steps=1", "eval.before=false"]
    ran = rlvr("sft", *TINY_RUN, *common, "data.eval_size=2", "name=ok", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert [r["phase"] for r in read_jsonl(tmp_path / "ok" / "metrics.jsonl")] == ["train", "after"]
    assert "stage: sft" in (tmp_path / "ok" / "config.yaml").read_text()
    write_rows(chats, [ROWS[0], {"messages": [{"role": "user", "content": "hi"}]}])
    bad = rlvr("sft", *TINY_RUN, *common, "name=bad", cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr
    assert "chats.jsonl line 2: the conversation has no 'assistant' message" in flat(bad.stderr)
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()
    other = rlvr("sft", *common, "stage=dpo", cwd=tmp_path)
    assert other.returncode == 2 and "rlvr sft trains stage=sft" in flat(other.stderr)
