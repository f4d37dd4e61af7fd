"""Tree rollouts (TreeRL, seeds 002:1): responses branch at their uncertain tokens, the branches branch
again, and every leaf is trained on with the value of each node on its path.

``algo.advantage: vine`` with ``advantage_params.tree: true``. A group's sampled responses are the
tree's first level. At each of ``depth`` levels, every response made at the level before is
continued ``samples`` times from each of its branch points: up to ``max_steps - 1`` of them, placed
as :mod:`rlvr.collect.vine` places them (``split: uncertain``, before the least likely sampled tokens,
or ``separator``), and only after the point where the response itself branched off its parent, so a
prefix is never expanded twice. The continuations join the group as responses of their own: they
are sampled by the same policy, and their logprobs are the sampling ones (the prefix's from its
parent). With ``b`` branch points and ``s`` samples, a group of ``G`` grows to
``G · (1 + b·s + (b·s)² + …)`` over ``depth`` levels; that is the branching budget.

The value of a node, the prefix a set of leaves shares, is the mean reward of those leaves (its
subtree's return). Each leaf's ``mc_ends`` are the branch points on its path, the places where some
response of the tree left it, and its ``mc_values`` those nodes' values. The ``vine`` estimator then
credits each stretch between two nodes with the change in value across it, and the first with the
change from the group's mean: TreeRL's local advantages, from one estimator shared with VinePPO.

The engine prefills each branch prefix once for its ``samples`` continuations (the KV cache is
repeated for them, :class:`rlvr.rollout.hf_engine.HFEngine`; vLLM's prefix cache does the same
across prefixes). The parent's own cache is not reused: on a CPU the prefill of a short prefix is
small next to the decoding.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlvr.collect.vine import branch_points, joined, single_turn
from rlvr.errors import RlvrError
from rlvr.rewards.scoring import score_completions
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup
from rlvr.vision.prompt import copy_prompt


def node_values(
    leaves: list[list[int]], rewards: list[float | None], prefixes: set[tuple[int, ...]]
) -> dict[tuple[int, ...], float]:
    """The value of each prefix: the mean reward of the leaves that start with it (NaN when none of
    them has a reward)."""
    values = {}
    for prefix in prefixes:
        n = len(prefix)
        scored = [
            r for ids, r in zip(leaves, rewards, strict=True) if r is not None and tuple(ids[:n]) == prefix
        ]
        values[prefix] = sum(scored) / len(scored) if scored else math.nan
    return values


def path_nodes(ids: list[int], prefixes: set[tuple[int, ...]]) -> list[int]:
    """The positions ``j`` (in order) where ``ids[: j + 1]`` is a branch prefix: the nodes on a leaf's
    path. A prefix as long as the whole response is not a node inside it."""
    lengths = sorted({len(p) for p in prefixes if 0 < len(p) < len(ids)})
    return [n - 1 for n in lengths if tuple(ids[:n]) in prefixes]


def grow_tree(
    collector: Any,
    group: TrajectoryGroup,
    params: SamplingParams,
    samples: int,
    max_steps: int,
    depth: int,
    split: str,
) -> tuple[list[Trajectory], dict[str, float]]:
    """``group``'s leaves after ``depth`` levels of branching (its own responses first), each with
    ``mc_ends``/``mc_values`` set; and ``tree/*`` counts."""
    if collector.pool is None:
        raise RlvrError("algo.advantage: 'vine' scores continuations with rewards.functions; none are set")
    example = collector.train_examples[group.example_index]
    tokenizer, separator = collector.tokenizer, collector.cfg.rewards.step_separator
    leaves = list(group.trajectories)
    origin = {id(t): -1 for t in leaves}  # where each response left its parent (-1: the prompt)
    prefixes: set[tuple[int, ...]] = set()
    frontier, made = leaves, 0
    for _ in range(depth):
        prompts, owners, rooms = [], [], []
        for t in frontier:
            ids, logprobs = single_turn(t, " with tree: true")
            start = origin[id(t)] + 1  # its own tokens: a prefix it shares is expanded already
            for end in branch_points(t, logprobs, tokenizer, separator, max_steps, split, start):
                room = params.max_new_tokens - (end + 1)
                if room <= 0:
                    continue
                prompts.append(list(t.prompt_ids) + ids[: end + 1])
                owners.append((t, end, ids[: end + 1], logprobs[: end + 1]))
                rooms.append(room)
        if not prompts:
            break
        outs = collector.engine.generate(prompts, replace(params, n=samples, max_new_tokens=max(rooms)))
        children: list[Trajectory] = []
        for (parent, end, prefix, prefix_lps), continuations, limit in zip(owners, outs, rooms, strict=True):
            prefixes.add(tuple(prefix))
            head = tokenizer.decode(prefix, skip_special_tokens=True)
            for c in continuations:
                ids, lps, finish, text = joined(c, prefix, prefix_lps, head, limit, tokenizer)
                child = Trajectory(
                    prompt_ids=copy_prompt(parent.prompt_ids),
                    segments=[Segment(SAMPLED, ids, lps)],
                    finish_reason=finish,
                    text=text,
                    example_index=parent.example_index,
                    example_id=parent.example_id,
                    policy_version=parent.policy_version,
                )
                origin[id(child)] = end
                children.append(child)
        completions = [
            Completion(0, t.prompt_ids, seg.token_ids, seg.logprobs, t.finish_reason, t.text)
            for t in children
            for seg in t.segments
        ]
        results = score_completions(collector.pool, completions, [example] * len(children))
        for child, result in zip(children, results, strict=True):
            collector._set_reward(child, result)
        leaves.extend(children)
        frontier, made = children, made + len(children)
    token_ids = [single_turn(t, " with tree: true")[0] for t in leaves]
    values = node_values(token_ids, [t.reward for t in leaves], prefixes)
    for t, ids in zip(leaves, token_ids, strict=True):
        t.mc_ends = path_nodes(ids, prefixes)
        t.mc_values = [values[tuple(ids[: end + 1])] for end in t.mc_ends]
    unvalued = sum(1 for v in values.values() if math.isnan(v))
    counts = {"tree/leaves": len(leaves), "tree/branches": made, "tree/unvalued_nodes": unvalued}
    return leaves, {key: float(value) for key, value in counts.items()}


def grow_trees(
    collector: Any, groups: list[TrajectoryGroup]
) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """The collector's pass: every group grown into its tree (spread over the ranks like the
    sampling); returns new groups holding the trees' leaves, and the summed counts. The sampled
    groups are left as they were, so the step's reward metrics and the prompt history read the
    sampled responses, and ``trajectories.jsonl`` adds the continuations as trained rows."""
    grown = collector.spread(groups, lambda part: [_grow(collector, g) for g in part])
    metrics = {"tree/leaves": 0.0, "tree/branches": 0.0, "tree/unvalued_nodes": 0.0}
    trees = []
    for group, (leaves, counts) in zip(groups, grown, strict=True):
        trees.append(replace(group, trajectories=leaves))
        for key, value in counts.items():
            metrics[key] += value
    return trees, metrics


def _grow(collector: Any, group: TrajectoryGroup) -> tuple[list[Trajectory], dict[str, float]]:
    p = collector.cfg.algo.advantage_params
    return grow_tree(
        collector, group, replace(collector._params(), n=1), int(p.get("samples", 4)),
        int(p.get("max_steps", 8)), int(p.get("depth", 1)), str(p.get("split", "separator")),
    )  # fmt: skip
