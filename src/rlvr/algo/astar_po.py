"""A*-PO: regress the policy's log-ratio onto an optimal advantage measured against an offline V*.

A*-PO (seeds 003:278) has two stages. Stage 1 samples the *reference* policy offline and estimates
the optimal value of the KL-regularised objective for every training prompt,
``V*(x) = β log E_{y~π_ref}[exp(r(x, y)/β)]``, here by its plug-in estimate over N samples,
``β · log mean_j exp(r_j/β)`` (:func:`soft_value`). Stage 2 trains on-policy with one completion per
prompt and a least-squares loss

    L(π) = ( β · log π(y|x)/π_ref(y|x) − (r(x, y) − V*(x)) )²

whose minimiser is the optimal policy ``π* ∝ π_ref · exp(r/β)`` (for it, ``β log π*/π_ref = r − V*``).

How it is built from rlvr's pieces:

- **Stage 1** is a step of its own, before training: :func:`collect_values` loads the reference
  policy (``model.reference``, else ``model.name``), samples ``samples`` completions of every
  training prompt with the rollout settings (temperature, top_p, max_new_tokens), scores them
  with the run's rewards and writes ``{"example_id", "value", "beta", "samples"}`` per prompt to a
  JSONL file (:func:`write_values`). :func:`offline_values` is the same pass given a collector
  (the trainer's engine, prompts and reward pool). A sample whose reward failed is left out of its
  prompt's mean; a prompt with no scored sample gets no value (and is an error if it is trained on).
- **The estimator** ``astar_po`` names ``example_ids`` and reads ``values_path``; its advantage is
  ``r − V*(x)``. An id the file lacks is an error naming the file and the id, never a default.
- **The loss** ``astar_po`` is the squared residual. A loss is offered no reference log-probs, so
  the residual is assembled from what the trainer does offer: with ``algo.kl_in_reward: true`` and
  ``algo.kl_coef = β`` the trainer subtracts the sampled KL, ``β Σ_t (log π_sampling − log π_ref)``,
  from each reward before the estimator sees it (an estimator that does not name
  ``token_rewards``), so the advantage is ``r − β log π_sampling/π_ref − V*``; the loss takes the
  log-ratio to the *sampling* policy, ``ψ = β Σ_t (log π − log π_sampling)`` (its
  ``sampling_logprobs``), and ``ψ − A = β log π/π_ref − (r − V*)``: the paper's residual exactly.
  Without the in-reward KL (``kl_coef: 0``) the loss regresses ``β log π/π_sampling`` onto
  ``r − V*``: the same fixed point per step, but anchored to the policy that sampled, a proximal
  (trust-region) version instead of the reference-anchored one. Nothing checks that
  ``loss_params.beta`` equals ``algo.kl_coef``; the preset sets both.

Choices where the abstract is silent: the plug-in (biased, by Jensen) log-mean-exp estimate of V*;
one β for both stages (the paper's theory has one; its experiments may use another for stage 1,
which ``beta`` of :func:`collect_values` allows); the per-token form of the sequence loss (every
valid token carries the row's squared residual and gradient ``2β · residual``, detached, so with
``loss_agg: seq-mean-token-sum`` the update is exactly the gradient of the batch's mean squared
residual). ``algo.clip_low``/``clip_high`` do not apply.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS
from rlvr.algo.losses import POLICY_LOSSES
from rlvr.algo.supervised import sequence_advantage, with_token_gradient

if TYPE_CHECKING:
    from rlvr.collect.collector import Collector
    from rlvr.config import RunConfig


def soft_value(rewards: Sequence[float], beta: float) -> float:
    """``β · log mean_j exp(r_j / β)``: the plug-in estimate of V* from rewards of reference samples.

    It lies between the mean reward (β → ∞) and the max (β → 0)."""
    if not beta > 0:
        raise ValueError(f"astar_po: beta must be > 0, got {beta}")
    if len(rewards) == 0:
        raise ValueError("astar_po: soft_value needs at least one reward")
    r = torch.tensor([float(x) for x in rewards], dtype=torch.float64)
    return float(beta * (torch.logsumexp(r / beta, dim=0) - math.log(len(rewards))))


def example_key(example_id: str, index: int) -> str:
    """The id under which a prompt's value is stored: the learner's ``example_ids`` spelling."""
    return example_id or f"index:{index}"


def offline_values(
    collector: Collector,
    samples: int,
    beta: float,
    indices: Sequence[int] | None = None,
    prompts_per_call: int | None = None,
) -> tuple[dict[str, float], list[str]]:
    """Stage 1 with the collector's engine, prompts and reward pool: ``samples`` completions of each
    training example in ``indices`` (default: all) at the rollout's sampling settings, scored, and
    :func:`soft_value` of each prompt's scored rewards.

    Returns ``({example id: V*}, ids with no scored sample)``. The engine samples whatever weights
    it holds: give it the reference policy's (:func:`collect_values` does).
    """
    from rlvr.rewards.scoring import score_completions
    from rlvr.rollout import SamplingParams

    if samples < 1:
        raise ValueError(f"astar_po: samples must be >= 1, got {samples}")
    soft_value([0.0], beta)  # checks beta before any sampling
    if collector.pool is None:
        raise ValueError("astar_po: the offline pass needs rewards.functions to score its samples")
    r = collector.cfg.rollout
    params = SamplingParams(
        n=samples,
        temperature=r.temperature,
        top_p=r.top_p,
        max_new_tokens=r.max_new_tokens,
        self_certainty=collector.self_certainty,
    )
    chosen = list(range(len(collector.train_examples))) if indices is None else list(indices)
    step = prompts_per_call or r.prompts_per_step
    if step < 1:
        raise ValueError(f"astar_po: prompts_per_call must be >= 1, got {step}")
    rewards: dict[str, list[float]] = {}
    order: list[str] = []
    for start in range(0, len(chosen), step):
        part = chosen[start : start + step]
        completions = collector.engine.generate([collector.train_prompts[i] for i in part], params)
        flat = [c for group in completions for c in group]
        examples = [collector.train_examples[i] for i, group in zip(part, completions) for _ in group]
        results = score_completions(collector.pool, flat, examples, [len(g) for g in completions])
        at = 0
        for i, group in zip(part, completions):
            key = example_key(collector.train_examples[i].id, i)
            if key not in rewards:
                rewards[key], order = [], [*order, key]
            for _ in group:
                total = results[at].total
                at += 1
                if total is not None and math.isfinite(total):
                    rewards[key].append(float(total))
    values = {key: soft_value(rewards[key], beta) for key in order if rewards[key]}
    return values, [key for key in order if not rewards[key]]


def write_values(path: str | Path, values: dict[str, float], beta: float, samples: int) -> None:
    """Write one JSONL row ``{"example_id", "value", "beta", "samples"}`` per prompt (atomically)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as f:
        for key, value in values.items():
            row = {"example_id": key, "value": value, "beta": beta, "samples": samples}
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def read_values(path: str | Path) -> dict[str, float]:
    """``{example id: V*}`` from a values file; a missing file, a malformed row, a repeated id or a
    non-finite value is a :class:`ValueError` naming the file (and line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(
            f"astar_po: cannot read the V* values file {path} ({err.strerror or err}); "
            "write it first with rlvr.algo.astar_po.collect_values"
        ) from err
    values: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key, value = row["example_id"], float(row["value"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"astar_po: {path}:{number}: not a values row ({err})") from err
        if not isinstance(key, str) or not math.isfinite(value):
            raise ValueError(f"astar_po: {path}:{number}: example_id must be a string, value finite")
        if key in values:
            raise ValueError(f"astar_po: {path}:{number}: example id {key!r} appears twice")
        values[key] = value
    return values


_CACHE: dict[str, tuple[tuple[int, int], dict[str, float]]] = {}


def load_values(path: str | Path) -> dict[str, float]:
    """:func:`read_values`, read again only when the file changed (the estimator runs every step)."""
    key = str(Path(path).resolve())
    try:
        stat = os.stat(key)
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None
    cached = _CACHE.get(key)
    if stamp is not None and cached is not None and cached[0] == stamp:
        return cached[1]
    values = read_values(path)
    if stamp is not None:
        _CACHE[key] = (stamp, values)
    return values


def collect_values(
    cfg: RunConfig,
    out: str | Path,
    samples: int = 8,
    beta: float = 0.1,
    prompts_per_call: int | None = None,
) -> dict[str, Any]:
    """Stage 1 as a step of its own: sample the reference policy on every training example of
    ``cfg`` and write their V* to ``out`` (:func:`write_values`). Returns a summary:
    ``prompts``, ``valued``, ``unscored`` (ids without a scored sample, left out of the file)."""
    from rlvr.collect.collector import Collector
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.precision import precision_of
    from rlvr.rewards.scoring import check_reward_examples
    from rlvr.rollout.from_config import build_engine

    out = Path(out)
    if out.exists():
        raise ValueError(f"astar_po: {out} already exists; choose another path or remove it")
    if not out.parent.is_dir():
        raise ValueError(f"astar_po: cannot write {out}: directory {out.parent} does not exist")
    torch.manual_seed(cfg.seed)
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    train_examples, _ = build_datasets(cfg.data)
    check_reward_examples(cfg.rewards, train_examples)
    reference = cfg.model.reference or cfg.model.name
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(reference, cfg.model.dtype, cfg.model.device).eval()
    rollout_dtype = precision_of(cfg).rollout_dtype
    if rollout_dtype is not None:
        model = model.to(rollout_dtype)
    collector = Collector(cfg, build_engine(cfg, model, tokenizer), tokenizer, train_examples)
    try:
        with torch.no_grad():
            values, unscored = offline_values(collector, samples, beta, prompts_per_call=prompts_per_call)
    finally:
        collector.close()
    write_values(out, values, beta, samples)
    return {"out": str(out), "prompts": len(train_examples), "valued": len(values), "unscored": unscored}


@ADVANTAGE_ESTIMATORS.register("astar_po")
def astar_po_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    example_ids: list[str],
    values_path: str | None = None,
) -> torch.Tensor:
    """A*-PO (seeds 003:278): the optimal advantage ``r − V*(x)``, V* read from ``values_path``
    (written by :func:`collect_values`) by each row's ``example_ids`` entry. Groups play no part:
    the method samples one completion per prompt."""
    if not values_path:
        raise ValueError("astar_po: values_path is required (the V* file of collect_values)")
    if len(example_ids) != rewards.shape[0]:
        raise ValueError(f"astar_po: {len(example_ids)} example_ids for {rewards.shape[0]} rewards")
    values = load_values(values_path)
    missing = [key for key in example_ids if key not in values]
    if missing:
        raise ValueError(
            f"astar_po: the values file {values_path} has no V* for example id {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    baseline = torch.tensor([values[key] for key in example_ids], dtype=rewards.dtype, device=rewards.device)
    return rewards - baseline


@POLICY_LOSSES.register("astar_po")
def astar_po_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logprobs: torch.Tensor | None = None,
    beta: float = 0.1,
    anchor: str = "sampling",
) -> tuple[torch.Tensor, dict[str, float]]:
    """A*-PO's least-squares loss ``(ψ − A)²``, ``ψ = β Σ_t (log π − log π_anchor)`` over each row's
    valid tokens; see the module docstring for why the anchor is the sampling policy and how the
    reference enters (``algo.kl_in_reward`` with ``algo.kl_coef = beta``).

    ``anchor``: ``sampling`` (the rollout engine's log-probs, what the in-reward KL used) or ``old``
    (the trainer's old log-probs).
    """
    if not beta > 0:
        raise ValueError(f"astar_po: beta must be > 0, got {beta}")
    if anchor not in ("sampling", "old"):
        raise ValueError(f"astar_po: anchor must be 'sampling' or 'old', got {anchor!r}")
    if anchor == "sampling" and sampling_logprobs is None:
        raise ValueError("astar_po: anchor 'sampling' needs sampling_logprobs")
    base = sampling_logprobs if anchor == "sampling" else old_logprobs
    valid = mask > 0
    diff = torch.where(valid, logprobs - base.to(logprobs.dtype), torch.zeros_like(logprobs))
    with torch.no_grad():
        psi = beta * diff.sum(dim=1)
        residual = psi - sequence_advantage(advantages, mask).to(psi.dtype)
        square = residual**2
    loss = with_token_gradient(square, 2.0 * beta * residual, logprobs, mask)
    with torch.no_grad():
        rows = valid.any(dim=1)
        n = rows.sum().clamp(min=1)
        stats = {
            "astar_po_sq_residual": float(square[rows].sum() / n),
            "astar_po_log_ratio": float((psi / beta)[rows].sum() / n),
        }
    return loss, stats
