"""Score a file of completions offline (``rlvr reward``): check verifiers before a run, or audit one.

Each JSONL row is one completion with what its verifier needs::

    {"completion": "... <answer>42</answer>", "answer": "42", "question": "What is 6*7?"}

``answer`` or ``reference`` is the reference; ``question`` (or ``prompt``) the prompt; ``id``,
``verifier`` and ``group`` are optional; every other field goes to ``Example.metadata`` (``tests``,
``entry_point``, ``test_cases``, ``constraints``, ``rg_entry``, …). For a reasoning-gym task,
a row either holds the full entry in ``rg_entry`` or just ``question`` and ``answer`` (enough for
tasks whose scorer compares answers). Group rewards see consecutive rows with the same ``group``
(default: the same question) as one group.

With a run config (:func:`score_with_config`, ``rlvr reward --config``) the rows are scored exactly as
training scores its completions: the config's reward components with their weights, labels, gates
and params, in a pool with the config's workers and timeouts (the trainer's own
:func:`~rlvr.rewards.scoring.training_pool`), each row's ``tokens`` and ``finish_reason`` passed as
the sampled-token count and finish reason (a run's ``samples.jsonl`` has them), and the same
start-up check of the data. For a reasoning-gym config the rows' ``question`` and ``answer`` stand
for the task's entry when they have no ``rg_entry``.

A trajectories file (``rlvr collect --out``, a run's ``trajectories.jsonl``: docs/trajectories.md) is
recognised by its rows' ``text`` and ``example_id``. Its rows name their example but do not carry it,
so it is scored with the config it was collected with (``--config``): the examples are rebuilt from
that config's data (training and held-out) and found by id; each trajectory's ``text`` is scored
with its sampled-token count, sampling logprobs and finish reason, and the rows of one group
(``step``, ``group``) are one group.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.offline_rows import (
    group_sizes,
    is_trajectories,
    read_rows,
    row_example,
    row_field,
    trajectory_examples,
    trajectory_fields,
)
from rlvr.rewards.pool import RewardPool
from rlvr.rewards.registry import list_rewards
from rlvr.rewards.results import RewardResult
from rlvr.rewards.scoring import check_reward_examples
from rlvr.rewards.spec import RewardSpec

if TYPE_CHECKING:
    from rlvr.config import RunConfig


def score_file(
    completions: str | Path,
    task: str,
    rewards: list[str] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
    workers: int = 0,
    timeout_s: float = 10.0,
    show: int = 3,
    console: Any = None,
) -> dict[str, Any]:
    """Score every row of ``completions`` and summarise.

    ``task`` is a reward name (``math``, ``code``, ``ifeval``, …) or a reasoning-gym task name (then
    the reward is ``reasoning_gym``); ``rewards`` overrides the rewards used, ``params`` gives each
    its keyword arguments. Returns ``{"rows", "mean", "components", "errors", "error_rows",
    "examples", "seconds"}``: the mean total over rows without errors, the mean of each component,
    error counts per reward and error type, and the first ``show`` rows scored.
    """
    path = Path(completions)
    names = rewards or [_default_reward(task)]
    params = params or {}
    if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
        raise RlvrError(
            'params must map reward names to keyword arguments, e.g. {"math": {"extract": "boxed"}}'
        )
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise RlvrError(f"params given for {unknown}, which are not among the rewards {names}")
    specs = [RewardSpec(name=name, params=params.get(name, {})) for name in names]
    rows = read_rows(path)
    if is_trajectories(path, rows):
        raise RlvrError(
            f"{path} is a trajectories file (rlvr collect, train.log_trajectories): its rows name their "
            "example by id but do not carry its reference. Score it with the config it was collected "
            "with: rlvr reward --config CONFIG [key=value ...] --completions FILE"
        )
    examples = [row_example(path, line, row, task) for line, row in rows]
    check_reward_examples(specs, examples)
    texts = [row["completion"] for _, row in rows]
    sizes = group_sizes([row.get("group", row.get("question")) for _, row in rows])
    start = time.perf_counter()
    with RewardPool(specs, workers=workers, timeout_s=timeout_s) as pool:
        _starting(console, len(rows), path, pool)
        kwargs: dict[str, Any] = {"group_sizes": sizes} if any(s.group for s in specs) else {}
        results = pool.score(texts, examples, **kwargs)
    return summarize(results, texts, examples, time.perf_counter() - start, show)


def score_with_config(
    completions: str | Path, cfg: RunConfig, out: str | Path | None = None, show: int = 3, console: Any = None
) -> dict[str, Any]:
    """Score every row of ``completions`` as a training step of ``cfg`` scores its completions (see
    the module docstring); ``out`` gets one JSON line per row (total, components, errors). Returns
    :func:`summarize`'s summary with the components' ``weights`` and the config's ``rewards``."""
    from rlvr.rewards.scoring import training_pool

    if not cfg.rewards.functions:
        raise RlvrError(
            "the config has no rewards.functions: its episodes are scored by the environment "
            f"({cfg.env.name or cfg.data.task}), which rlvr reward cannot replay"
        )
    path = Path(completions)
    out_path = _check_out(out, path)
    rg_task = cfg.data.task if cfg.data.source == "reasoning_gym" else None
    source = cfg.data.task or cfg.data.path or cfg.data.source
    rows = read_rows(path)
    logprobs: list[list[float]] | None = None
    if is_trajectories(path, rows):
        examples = trajectory_examples(path, rows, cfg)
        texts, tokens, finish, logprobs = trajectory_fields(path, rows)
        sizes = group_sizes([[row.get("step"), row.get("group")] for _, row in rows])
    else:
        examples = [row_example(path, line, row, source, rg_task) for line, row in rows]
        texts = [row["completion"] for _, row in rows]
        tokens = [row_field(path, line, row, "tokens", int) for line, row in rows]
        finish = [row_field(path, line, row, "finish_reason", str) for line, row in rows]
        sizes = group_sizes([row.get("group", row.get("question", row.get("prompt"))) for _, row in rows])
    check_reward_examples(cfg.rewards, examples)
    start = time.perf_counter()
    with training_pool(cfg.rewards) as pool:
        _starting(console, len(rows), path, pool)
        results = pool.score(
            texts,
            examples,
            tokens if None not in tokens else None,
            finish if None not in finish else None,
            group_sizes=sizes,
            token_logprobs=logprobs,
        )
    if out_path is not None:
        with out_path.open("w", encoding="utf-8") as handle:
            for (line, _), example, result in zip(rows, examples, results):
                record = {"line": line, "id": example.id, "total": result.total}
                handle.write(json.dumps({**record, "components": result.components, "errors": result.errors}))
                handle.write("\n")
    summary = summarize(results, texts, examples, time.perf_counter() - start, show)
    summary["weights"] = {item.label or item.name: item.weight for item in cfg.rewards.functions}
    from rlvr.rewards.describe import describe_rewards

    summary["rewards"] = describe_rewards(cfg.rewards.functions, cfg)
    if out_path is not None:
        summary["out"] = str(out_path)
    return summary


def _starting(console: Any, rows: int, path: Path, pool: RewardPool) -> None:
    """Say that scoring starts, once the workers are up (a ``rich`` console, or None: silent)."""
    if console is not None:
        rewards = ", ".join(pool.labels)
        console.print(f"scoring {rows} completions of {path} with {rewards} ({pool.num_workers} workers)")


def _check_out(out: str | Path | None, source: Path) -> Path | None:
    if out is None:
        return None
    out_path = Path(out)
    if out_path.exists():
        raise RlvrError(f"--out {out_path} already exists; give a new file name")
    if out_path.resolve() == source.resolve():
        raise RlvrError("--out must not be the completions file itself")
    if not out_path.parent.is_dir():
        raise RlvrError(f"--out {out_path}: directory {out_path.parent} does not exist")
    return out_path


def summarize(
    results: list[RewardResult], texts: list[str], examples: list[Example], seconds: float, show: int = 3
) -> dict[str, Any]:
    """The summary :func:`score_file` returns, for any list of results."""
    totals = [r.total for r in results if r.total is not None]
    components: dict[str, list[float]] = {}
    errors: dict[str, Counter[str]] = {}
    for result in results:
        for key, value in result.components.items():
            components.setdefault(key, []).append(value)
        for label, message in result.errors.items():
            errors.setdefault(label, Counter())[error_type(message)] += 1
    return {
        "rows": len(results),
        "mean": sum(totals) / len(totals) if totals else None,
        "components": {k: sum(v) / len(v) for k, v in sorted(components.items())},
        "errors": {label: dict(counts) for label, counts in sorted(errors.items())},
        "error_rows": sum(not r.ok for r in results),
        "examples": [
            {
                "id": example.id,
                "completion": text if len(text) <= 300 else text[:300] + "…",
                "reference": example.reference,
                "total": result.total,
                "components": result.components,
                "errors": result.errors,
            }
            for text, example, result in list(zip(texts, examples, results))[:show]
        ],
        "seconds": round(seconds, 3),
    }


def print_summary(summary: dict[str, Any], console: Any) -> None:
    """Render a :func:`score_file` summary for people (a ``rich`` console)."""
    from rich.table import Table

    mean = summary["mean"]
    console.print(
        f"{summary['rows']} completions scored in {summary['seconds']:.2f}s; mean reward "
        f"{'n/a' if mean is None else f'{mean:.4f}'} over rows without errors "
        f"({summary['error_rows']} rows with errors)"
    )
    weights = summary.get("weights")
    if summary.get("rewards"):
        console.print(f"reward = {summary['rewards']}", highlight=False)
    table = Table(title="components")
    table.add_column("reward")
    if weights:
        table.add_column("weight", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("errors")
    labels = sorted(set(summary["components"]) | set(summary["errors"]))
    for label in labels:
        value = summary["components"].get(label)
        errors = ", ".join(f"{kind}: {n}" for kind, n in summary["errors"].get(label, {}).items())
        weight = [f"{weights[label]:g}" if label in weights else "-"] if weights else []
        table.add_row(label, *weight, "-" if value is None else f"{value:.4f}", errors or "-")
    console.print(table)
    if summary.get("out"):
        console.print(f"per-row scores (total, components, errors) → {summary['out']}", highlight=False)
    for row in summary["examples"]:
        console.print(
            f"[bold]{row['id']}[/bold] total={row['total']} {row['components']} {row['errors'] or ''}"
        )
        console.print(f"  reference: {row['reference']!r}", highlight=False)
        console.print(f"  completion: {row['completion']!r}", highlight=False)


def error_type(message: str) -> str:
    """A short kind for an error message: "timeout", "crash", "batch deadline" or the exception name."""
    if message.startswith("timeout"):
        return "timeout"
    if message.startswith("worker crashed") or message == "worker died":
        return "crash"
    if message.startswith("batch deadline"):
        return "batch deadline"
    head = message.split(":", 1)[0].strip()
    return head if head.isidentifier() else "error"


def _default_reward(task: str) -> str:
    if task in list_rewards():
        return task
    from rlvr.data import list_reasoning_gym_tasks

    if task in list_reasoning_gym_tasks():
        return "reasoning_gym"
    raise RlvrError(
        f"unknown task {task!r}: give a reward name ({', '.join(list_rewards())}) or a reasoning-gym "
        "task name (see `rlvr tasks`)"
    )
