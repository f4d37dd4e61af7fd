"""The algorithm zoo's second wave, token-level pieces: HICRA (planning tokens) and ShiQ (Bellman
consistency of the logits), and the two loss contexts they read (``completion_ids``, ``logsumexp``).

Each against values worked out by hand on a small batch (the arithmetic is in the comments), with
gradients w.r.t. the log-probs (and the log-sum-exp) from autograd; the contexts through
``policy_update`` and a real tiny run.
"""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import POLICY_LOSSES, hicra_loss, ppo_clip_loss, shiq_loss
from rlvr.algo.aggregate import token_weights
from rlvr.algo.hicra import PlanningClassifier, hicra_advantages, hicra_with_mask
from rlvr.algo.shiq import next_values, token_rewards
from rlvr.config import load_config
from rlvr.config.schema import AlgoConfig
from rlvr.log import read_jsonl
from rlvr.models import load_model
from rlvr.models.loading import load_tokenizer
from rlvr.rollout import Completion
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.update import policy_update


def _close(a: torch.Tensor, b: list, tol: float = 1e-5) -> None:
    assert torch.allclose(a.detach().float(), torch.tensor(b, dtype=torch.float32), atol=tol), (a.tolist(), b)


# ------------------------------------------------------------------------------------------ HICRA
# a hand vocabulary: id → text
PIECES = [
    "Let",
    "'s",
    " try",
    " first",
    " awaited",
    " wait",
    "!",
    " we",
    " need",
    " to",
    "",
    " 2",
    "Wait",
    " await",
]


def test_classifier_marks_the_tokens_of_whole_phrases_case_insensitively() -> None:
    c = PlanningClassifier(PIECES, ["let's", "we need to", "wait", "first"])
    # "Let's try first" → "Let" "'s" are "let's"; " first" is "first"; " try" is not a phrase
    assert c.row([0, 1, 2, 3]) == [True, True, False, True]
    # " awaited" contains "wait" inside a word: not a match; " wait" and "Wait" (capital) are
    assert c.row([4, 5, 6, 12]) == [False, True, False, True]
    assert c.row([13, 6]) == [False, False]  # " await": "wait" at a word's end is no match either
    # " we need to" spans three tokens; the empty piece (10) inside adds no character and is not
    # marked; " we need" alone is not the phrase; an id outside the table (99) adds nothing
    assert c.row([7, 10, 8, 9, 11]) == [True, False, True, True, False]
    assert c.row([7, 8, 11, 99]) == [False, False, False, False]
    assert c.row([]) == []
    mask = c.mask(torch.tensor([[0, 1, 2], [11, 11, 5]]))
    assert mask.dtype == torch.bool and mask.tolist() == [[True, True, False], [False, False, True]]


def test_classifier_matches_a_phrase_split_across_tokens_and_the_typographic_apostrophe() -> None:
    c = PlanningClassifier(["Le", "t’", "s", " go", "Lets"], ["let's"])
    assert c.row([0, 1, 2, 3]) == [True, True, True, False]  # "Let’s go"
    assert c.row([4]) == [False]  # "Lets": no apostrophe, not the phrase


def test_classifier_rejects_bad_phrases() -> None:
    for bad in ([], "wait", ["wait", ""], ["  "], [3]):
        with pytest.raises(ValueError, match="phrases"):
            PlanningClassifier(PIECES, bad)


def test_hicra_advantages_scale_or_shift_the_planning_tokens() -> None:
    adv = torch.tensor([1.0, -2.0])
    planning = torch.tensor([[True, False, True], [False, True, False]])
    # scale: planning tokens (1 + 0.5)·A: 1.5 and −3; others A
    _close(hicra_advantages(adv, planning, 0.5), [[1.5, 1.0, 1.5], [-2.0, -3.0, -2.0]])
    # sign-aware: A + 0.5·|A|: 1 + 0.5 = 1.5; −2 + 1 = −1 (a failed plan penalised less)
    _close(hicra_advantages(adv, planning, 0.5, sign_aware=True), [[1.5, 1.0, 1.5], [-2.0, -1.0, -2.0]])
    # per-token advantages are scaled where they are: [[2, 4]] with planning at 1 → [[2, 4·1.25]]
    _close(hicra_advantages(torch.tensor([[2.0, 4.0]]), torch.tensor([[False, True]]), 0.25), [[2.0, 5.0]])
    # α = 0 and no planning token leave A unchanged
    _close(hicra_advantages(adv, planning, 0.0), [[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    _close(hicra_advantages(adv, torch.zeros(2, 3, dtype=torch.bool), 3.0), [[1.0] * 3, [-2.0] * 3])
    with pytest.raises(ValueError, match="alpha"):
        hicra_advantages(adv, planning, -0.1)


def test_hicra_loss_and_its_gradient_on_policy() -> None:
    # on-policy PPO: ratio 1, per-token loss −A', ∂/∂log π = −A' (ratio · A' through the ratio)
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    planning = torch.tensor([[True, False, True], [False, True, True]])  # row 1's 3rd is padding
    adv = torch.tensor([1.0, -2.0])
    loss, stats = hicra_with_mask(lp, lp.detach(), adv, mask, planning, 0.5)
    (loss * mask).sum().backward()
    # A' = [[1.5, 1, 1.5], [−2, −3, (−3)]]
    _close(loss * mask, [[-1.5, -1.0, -1.5], [2.0, 3.0, 0.0]])
    _close(lp.grad, [[-1.5, -1.0, -1.5], [2.0, 3.0, 0.0]])
    assert stats["hicra_planning_frac"] == pytest.approx(3 / 5)  # 2 + 1 of the 5 valid tokens
    assert stats["ratio_mean"] == pytest.approx(1.0)  # the inner loss's stats come through
    # no planning token: exactly the inner loss; an empty mask: a share of 0
    plain, _ = ppo_clip_loss(lp.detach(), lp.detach(), adv, mask)
    none, none_stats = hicra_with_mask(lp.detach(), lp.detach(), adv, mask, torch.zeros_like(planning), 0.5)
    assert torch.equal(none, plain) and none_stats["hicra_planning_frac"] == 0.0
    _, empty = hicra_with_mask(lp.detach(), lp.detach(), adv, torch.zeros_like(mask), planning, 0.5)
    assert empty["hicra_planning_frac"] == 0.0


def test_hicra_registered_loss_classifies_the_real_tokenizers_text() -> None:
    tok = load_tokenizer("tiny-random")
    text = "Let's add 3 and 4. Wait, 7."
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [tok.decode([i]) for i in ids]
    # the tokens of "Let's" and " Wait" are the planning ones; nothing else in this text is
    expected = [p.strip().lower() in {"let", "'s", "wait"} for p in pieces]
    assert sum(expected) >= 2, pieces
    completion_ids = torch.tensor([ids])
    lp = torch.full((1, len(ids)), -1.0, requires_grad=True)
    mask = torch.ones(1, len(ids))
    fn = POLICY_LOSSES.get("hicra")
    assert fn is hicra_loss
    loss, stats = fn(
        lp, lp.detach(), torch.tensor([2.0]), mask, completion_ids, tokenizer="tiny-random", alpha=1.0
    )
    loss.sum().backward()
    # ∂/∂log π = −A' = −(1 + 1)·2 = −4 on planning tokens, −2 elsewhere
    assert lp.grad[0].tolist() == [-4.0 if e else -2.0 for e in expected]
    assert stats["hicra_planning_frac"] == pytest.approx(sum(expected) / len(ids))
    with pytest.raises(ValueError, match="tokenizer"):
        fn(lp, lp.detach(), torch.tensor([2.0]), mask, completion_ids)
    with pytest.raises(ValueError, match="alpha"):
        fn(lp, lp.detach(), torch.tensor([2.0]), mask, completion_ids, tokenizer="tiny-random", alpha=-1.0)
    with pytest.raises(ValueError, match="phrases"):
        fn(lp, lp.detach(), torch.tensor([2.0]), mask, completion_ids, tokenizer="tiny-random", phrases=[""])


# ------------------------------------------------------------------------------------------- ShiQ
# row: valid tokens 0, 1 (2 is padding, its values must not count); A = 1 on the last valid token
SHIQ_LP = [[-1.0, -2.0, -7.0]]
SHIQ_OLD = [[-1.5, -1.5, -3.0]]
SHIQ_LSE = [[3.0, 4.0, 50.0]]
SHIQ_MASK = torch.tensor([[1.0, 1.0, 0.0]])


def _shiq(lp: list, old: list, lse: list, adv: torch.Tensor, mask: torch.Tensor, **kw):
    lp_t = torch.tensor(lp, requires_grad=True)
    lse_t = torch.tensor(lse, requires_grad=True)
    loss, stats = shiq_loss(lp_t, torch.tensor(old), adv, mask, lse_t, **kw)
    (loss * mask).sum().backward()
    return loss, lp_t.grad, lse_t.grad, stats


def test_shiq_multi_step_residuals_and_gradients() -> None:
    # β = 0.5, r = [0, 1, 0] → Σ_{k≥t} r/β = [2, 2]; log-ratios [0.5, −0.5] → Σ_{k≥t} = [0, −0.5]
    # δ_0 = 3 + 0 − 2 = 1; δ_1 = 4 − 0.5 − 2 = 1.5; loss ½δ² = [0.5, 1.125]
    # ∂/∂log π_k = Σ_{t≤k} δ_t = [1, 2.5]; ∂/∂lse_t = δ_t = [1, 1.5]
    loss, g_lp, g_lse, stats = _shiq(SHIQ_LP, SHIQ_OLD, SHIQ_LSE, torch.tensor([1.0]), SHIQ_MASK, beta=0.5)
    _close(loss, [[0.5, 1.125, 0.0]])
    _close(g_lp, [[1.0, 2.5, 0.0]])
    _close(g_lse, [[1.0, 1.5, 0.0]])
    assert stats["shiq_residual"] == pytest.approx(1.25)  # (1 + 1.5) / 2
    assert stats["shiq_value"] == pytest.approx(3.5)  # (3 + 4) / 2, the padding's 50 left out


def test_shiq_one_step_residuals_and_gradients() -> None:
    # δ_0 = 0.5 + 3 − lse_1 (4) − 0 = −0.5; δ_1 = −0.5 + 4 − 0 (terminal) − 1/0.5 = 1.5
    # loss [0.125, 1.125]; ∂/∂log π_t = δ_t; ∂/∂lse_0 = δ_0 = −0.5, ∂/∂lse_1 = δ_1 − δ_0 = 2
    loss, g_lp, g_lse, _ = _shiq(
        SHIQ_LP, SHIQ_OLD, SHIQ_LSE, torch.tensor([1.0]), SHIQ_MASK, beta=0.5, multi_step=False
    )
    _close(loss, [[0.125, 1.125, 0.0]])
    _close(g_lp, [[-0.5, 1.5, 0.0]])
    _close(g_lse, [[-0.5, 2.0, 0.0]])


def test_shiq_skips_untrained_tokens_and_takes_per_token_rewards_without_a_prior() -> None:
    # valid 0 and 2; prior none: log-ratios = log π = [−1, ·, −1]; lse [2, ·, 1]; r [0.5, ·, 1]; β 1
    lp, lse, mask = [[-1.0, 7.0, -1.0]], [[2.0, 100.0, 1.0]], torch.tensor([[1.0, 0.0, 1.0]])
    rewards = torch.tensor([[0.5, 9.0, 1.0]])
    # one-step: next(0) = 2: δ_0 = −1 + 2 − 1 − 0.5 = −0.5; δ_2 = −1 + 1 − 0 − 1 = −1
    loss, g_lp, g_lse, _ = _shiq(lp, [[0.0] * 3], lse, rewards, mask, prior="none", multi_step=False)
    _close(loss, [[0.125, 0.0, 0.5]])
    _close(g_lp, [[-0.5, 0.0, -1.0]])
    _close(g_lse, [[-0.5, 0.0, -1.0 + 0.5]])  # lse_2 is in δ_2 (+) and δ_0 (−)
    # multi-step: Σ log-ratio [−2, ·, −1], Σ r [1.5, ·, 1]: δ_0 = 2 − 2 − 1.5 = −1.5; δ_2 = 1 − 1 − 1 = −1
    loss, g_lp, g_lse, _ = _shiq(lp, [[0.0] * 3], lse, rewards, mask, prior="none")
    _close(loss, [[1.125, 0.0, 0.5]])
    _close(g_lp, [[-1.5, 0.0, -2.5]])
    _close(g_lse, [[-1.5, 0.0, -1.0]])


def test_shiq_helpers_and_edge_cases() -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    # the sequence reward sits on each row's last valid token; a row with none gets nothing
    _close(token_rewards(torch.tensor([2.0, 5.0, -1.0]), mask), [[0, 2, 0], [0, 0, 0], [0, 0, -1]])
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    _close(next_values(values, mask), [[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [9.0, 9.0, 0.0]])
    # an empty mask: zero loss and stats, zero gradient
    empty = torch.zeros(1, 3)
    loss, g_lp, g_lse, stats = _shiq(SHIQ_LP, SHIQ_OLD, SHIQ_LSE, torch.tensor([1.0]), empty)
    assert loss.abs().sum() == 0 and g_lp.abs().sum() == 0 and g_lse.abs().sum() == 0
    assert stats == {"shiq_residual": 0.0, "shiq_value": 0.0}
    # a group of equal rewards (all 0) whose values already satisfy the equations: no loss
    # lse_t = Σ_{k≥t} log-ratio with the prior: log-ratios [0.5, −0.5] → lse = [0, −0.5]
    loss, *_ = _shiq(SHIQ_LP, SHIQ_OLD, [[0.0, 0.5, 0.0]], torch.tensor([0.0]), SHIQ_MASK)
    _close(loss, [[0.0, 0.0, 0.0]])
    args = (torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="beta"):
        shiq_loss(*args, beta=0.0)
    with pytest.raises(ValueError, match="prior"):
        shiq_loss(*args, prior="reference")
    with pytest.raises(ValueError, match="advantages"):
        shiq_loss(args[0], args[1], torch.zeros(1, 2, 1), args[3], args[4])


# ---------------------------------------------------------------------- the contexts in the trainer
_SEEN: dict[str, list] = {"ids": [], "lse": [], "lp": []}


@POLICY_LOSSES.register("_probe_lse")
def _probe_lse(logprobs, old_logprobs, advantages, mask, logsumexp, completion_ids):  # noqa: ANN001, ANN202
    """A loss of Σ lse (its gradient is the log-normaliser's), recording what it was offered."""
    _SEEN["lse"].append(logsumexp)
    _SEEN["ids"].append(completion_ids)
    _SEEN["lp"].append(logprobs.detach())
    return logsumexp + 0.0 * logprobs, {}


@POLICY_LOSSES.register("_probe_ids")
def _probe_ids(logprobs, old_logprobs, advantages, mask, completion_ids):  # noqa: ANN001, ANN202
    """Records the token ids it is offered; a plain REINFORCE loss."""
    _SEEN["ids"].append(completion_ids)
    return -logprobs * advantages[:, None], {}


class _Recorder(torch.optim.SGD):
    """SGD at lr 0 that keeps a copy of every step's gradient."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)
        self.grads: list[torch.Tensor] = []

    def step(self, closure=None):  # noqa: ANN001, ANN201
        self.grads.append(torch.cat([p.grad.flatten() for g in self.param_groups for p in g["params"]]))
        return super().step(closure)


def _batch(lengths_per_group=((5, 3), (4, 6))):
    gen = torch.Generator().manual_seed(5)
    groups = []
    for g, lengths in enumerate(lengths_per_group):
        prompt = torch.randint(10, 4000, (3 + 2 * g,), generator=gen).tolist()
        groups.append(
            [
                Completion(
                    g, prompt, torch.randint(10, 4000, (n,), generator=gen).tolist(), [0.0] * n, "stop"
                )
                for n in lengths
            ]
        )
    return build_batch(groups, [1.0, -1.0, 0.5, -0.5], pad_id=2)


def _direct_logsumexp(model: torch.nn.Module, batch, temperature: float) -> torch.Tensor:
    """lse [B, T] of each completion position from one full-sequence forward and a full softmax."""
    prompt_ids, prompt_mask = batch.prompt_ids[batch.group_index], batch.prompt_mask[batch.group_index]
    ids = torch.cat([prompt_ids, batch.completion_ids], dim=1)
    attention = torch.cat([prompt_mask, batch.completion_attention], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    width = batch.completion_width
    return torch.logsumexp(logits[:, -width - 1 : -1].float() / temperature, dim=-1)


# the second batch's completions would share packed rows (2 + 3 ≤ 6): the loss must still get [B, T]
@pytest.mark.parametrize("lengths", [((5, 3), (4, 6)), ((2, 3), (4, 6))])
def test_logsumexp_context_matches_a_full_softmax_and_carries_its_gradient(lengths) -> None:
    torch.manual_seed(0)
    model, batch, temperature = load_model("tiny-random"), _batch(lengths), 0.7
    cfg = AlgoConfig(loss="_probe_lse", micro_batch_size=4, loss_agg="token-mean")
    _SEEN["lse"].clear()
    _SEEN["ids"].clear()
    optimizer = _Recorder(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    policy_update(model, optimizer, scheduler, batch, cfg, 1e9, temperature, 16)
    (lse,) = _SEEN["lse"]
    assert lse.requires_grad and lse.shape == batch.completion_ids.shape
    assert torch.equal(_SEEN["ids"][0], batch.completion_ids)
    mask = batch.completion_mask.bool()
    direct = _direct_logsumexp(model, batch, temperature)
    assert torch.allclose(lse[mask], direct[mask], atol=1e-4)
    # logprob = logit/T − lse for the sampled token: the same normaliser as the logprobs'
    assert (_SEEN["lp"][0][mask] < 0).all()
    # the gradient reaching the weights is that of Σ_t w_t·lse_t computed directly
    model.zero_grad()
    weights = token_weights(batch.completion_mask, "token-mean", 16)
    (direct * weights).sum().backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()])
    (got,) = optimizer.grads
    assert got.abs().max() > 0
    assert torch.allclose(got, expected, rtol=1e-4, atol=2e-5 * float(expected.abs().max()))


def test_a_loss_that_does_not_name_logsumexp_gets_no_hook(monkeypatch) -> None:
    from rlvr.train.learn import update

    entered = []
    real = update.captured_logits
    monkeypatch.setattr(update, "captured_logits", lambda *a: entered.append(1) or real(*a))
    model, batch = load_model("tiny-random"), _batch()
    _SEEN["ids"].clear()
    optimizer = _Recorder(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    policy_update(
        model, optimizer, scheduler, batch, AlgoConfig(loss="_probe_ids", micro_batch_size=2), 1e9, 1.0, 16
    )
    assert entered == []  # two micro-batches, no logits captured in either
    assert torch.equal(_SEEN["ids"][0], batch.completion_ids[:2, :5])  # group 0, widths 5 and 3
    assert torch.equal(_SEEN["ids"][1], batch.completion_ids[2:])  # group 1, widths 4 and 6


def test_completion_ids_reach_the_loss_in_a_run(tmp_path) -> None:
    """A real step: the ids each micro-batch's loss sees are the logged completions' tokens."""
    _SEEN["ids"].clear()
    overrides = [
        *TINY_RUN,
        "algo.loss=_probe_ids",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    logged = [
        tuple(i for seg in r["segments"] for i in seg["token_ids"])
        for r in read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    ]
    seen = [row for ids in _SEEN["ids"] for row in ids.tolist()]
    assert len(seen) == len(logged) == 8
    # each seen row is a logged completion, right-padded to its micro-batch's width: match each
    # logged completion (longest first) to a distinct seen row that starts with it
    for completion in sorted(logged, key=len, reverse=True):
        starts = [i for i, row in enumerate(seen) if tuple(row[: len(completion)]) == completion]
        assert starts, completion
        seen.pop(starts[0])


def test_hicra_and_shiq_train_in_a_run(tmp_path) -> None:
    """Both losses run a real step with their contexts (hicra's classifier on the run's tokenizer)."""
    for name, params in [
        ("hicra", "{tokenizer: tiny-random, alpha: 0.5}"),
        ("shiq", "{beta: 1.0}"),
    ]:
        overrides = [
            *TINY_RUN,
            f"algo.loss={name}",
            f"algo.loss_params={params}",
            "algo.dynamic_sampling=false",
            "train.steps=1",
            "eval.before=false",
            f"output_dir={tmp_path}",
            f"name={name}",
        ]
        api.train(load_config(None, overrides), quiet=True)
        rows = read_jsonl(tmp_path / name / "metrics.jsonl")
        key = "update/hicra_planning_frac" if name == "hicra" else "update/shiq_residual"
        assert any(key in r for r in rows), rows[-1].keys()
