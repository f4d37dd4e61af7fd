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
from rlvr.rewards.pool import RewardPool
from rlvr.rewards.registry import list_rewards, reward_example_check
from rlvr.rewards.results import RewardResult
from rlvr.rewards.spec import RewardSpec
from rlvr.safe_parse import loads_json

if TYPE_CHECKING:
    from rlvr.config import RunConfig

_RESERVED = {"completion", "answer", "reference", "question", "prompt", "id", "verifier", "group"}
# What marks a row of a trajectories file (rlvr.trajectory.trajectory_record) rather than a completion
TRAJECTORY_FIELDS = ("text", "example_id")


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
    rows = _read_rows(path)
    if _is_trajectories(path, rows):
        raise RlvrError(
            f"{path} is a trajectories file (rlvr collect, train.log_trajectories): its rows name their "
            "example by id but do not carry its reference. Score it with the config it was collected "
            "with: rlvr reward --config CONFIG [key=value ...] --completions FILE"
        )
    examples = [_example(path, line, row, task) for line, row in rows]
    _check_examples(specs, examples)
    texts = [row["completion"] for _, row in rows]
    sizes = _group_sizes([row.get("group", row.get("question")) for _, row in rows])
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
    from rlvr.rewards.scoring import check_reward_examples, training_pool

    if not cfg.rewards.functions:
        raise RlvrError(
            "the config has no rewards.functions: its episodes are scored by the environment "
            f"({cfg.env.name or cfg.data.task}), which rlvr reward cannot replay"
        )
    path = Path(completions)
    out_path = _check_out(out, path)
    rg_task = cfg.data.task if cfg.data.source == "reasoning_gym" else None
    source = cfg.data.task or cfg.data.path or cfg.data.source
    rows = _read_rows(path)
    logprobs: list[list[float]] | None = None
    if _is_trajectories(path, rows):
        examples = _trajectory_examples(path, rows, cfg)
        texts, tokens, finish, logprobs = _trajectory_fields(path, rows)
        sizes = _group_sizes([[row.get("step"), row.get("group")] for _, row in rows])
    else:
        examples = [_example(path, line, row, source, rg_task) for line, row in rows]
        texts = [row["completion"] for _, row in rows]
        tokens = [_extra(path, line, row, "tokens", int) for line, row in rows]
        finish = [_extra(path, line, row, "finish_reason", str) for line, row in rows]
        sizes = _group_sizes([row.get("group", row.get("question", row.get("prompt"))) for _, row in rows])
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
    from rlvr.train.header import describe_rewards

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


def _extra(path: Path, line: int, row: dict[str, Any], key: str, kind: type) -> Any:
    """A row's optional ``tokens`` / ``finish_reason``, checked."""
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RlvrError(f"{path.name} line {line}: '{key}' must be {kind.__name__}, got {value!r}")
    return value


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


def _read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RlvrError(f"{path}: cannot read the completions file: {exc.strerror or exc}") from exc
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {line_number}"
        try:
            row = loads_json(line, where)
        except json.JSONDecodeError as exc:
            raise RlvrError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(row, dict):
            raise RlvrError(f"{where}: expected an object, got {type(row).__name__}")
        rows.append((line_number, row))
    if not rows:
        raise RlvrError(f"{path}: no rows")
    return rows


def _is_trajectories(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> bool:
    """Whether the file holds trajectories (decided by its first row); every row must then be one,
    and in a completions file every row must have its text field ``completion``."""
    trajectories = "completion" not in rows[0][1] and all(k in rows[0][1] for k in TRAJECTORY_FIELDS)
    for line, row in rows:
        where = f"{path.name} line {line}"
        if trajectories and not (isinstance(row.get("text"), str) and "example_id" in row):
            raise RlvrError(
                f"{where}: a trajectory row needs 'text' and 'example_id', like the file's first row; "
                f"fields found: {', '.join(row) or '(none)'}"
            )
        if not trajectories and not isinstance(row.get("completion"), str):
            found = ", ".join(row) or "(none)"
            raise RlvrError(
                f"{where}: no text field 'completion'; fields found: {found} (a trajectories file of "
                "rlvr collect has 'text' and 'example_id' in every row)"
            )
    return trajectories


def _trajectory_examples(path: Path, rows: list[tuple[int, dict[str, Any]]], cfg: RunConfig) -> list[Example]:
    """Each trajectory's example, rebuilt from ``cfg``'s data and found by ``example_id``."""
    from rlvr.data.from_config import build_datasets

    train, held_out = build_datasets(cfg.data)
    by_id: dict[str, Example] = {}
    clashes: set[str] = set()
    for example in (*train, *held_out):
        if example.id in by_id and by_id[example.id] != example:
            clashes.add(example.id)
        by_id.setdefault(example.id, example)
    source = cfg.data.path or cfg.data.task
    examples = []
    for line, row in rows:
        example_id = str(row["example_id"])
        where = f"{path.name} line {line}"
        if example_id in clashes:
            raise RlvrError(
                f"{where}: example id {example_id!r} names both a training and a held-out example of "
                f"{source}; give the training and held-out data distinct ids (data.id_key)"
            )
        if example_id not in by_id:
            raise RlvrError(
                f"{where}: example {example_id!r} is not in this config's data ({source}: {len(train)} "
                f"training, {len(held_out)} held-out examples); score a trajectories file with the "
                "config and overrides it was collected with"
            )
        examples.append(by_id[example_id])
    return examples


def _trajectory_fields(
    path: Path, rows: list[tuple[int, dict[str, Any]]]
) -> tuple[list[str], list[int | None], list[str | None], list[list[float]] | None]:
    """Texts, sampled-token counts, finish reasons and sampling logprobs (None unless every row has
    them) of trajectory rows, as the trainer passes them to its reward pool."""
    texts: list[str] = []
    tokens: list[int | None] = []
    finish: list[str | None] = []
    logprobs: list[list[float] | None] = []
    for line, row in rows:
        segments = row.get("segments") or []
        if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
            raise RlvrError(f"{path.name} line {line}: 'segments' must be a list of objects")
        sampled = [s for s in segments if s.get("kind") == "sampled"]
        texts.append(row["text"])
        tokens.append(sum(len(s.get("token_ids") or []) for s in sampled) if sampled else None)
        finish.append(_extra(path, line, row, "finish_reason", str))
        chosen = [lp for s in sampled for lp in (s.get("logprobs") or [])]
        logprobs.append(chosen if sampled and len(chosen) == tokens[-1] else None)
    known = [lps for lps in logprobs if lps is not None and all(isinstance(x, (int, float)) for x in lps)]
    return texts, tokens, finish, known if len(known) == len(rows) else None


def _example(path: Path, line: int, row: dict[str, Any], task: str, rg_task: str | None = "") -> Example:
    """The example a row is scored against; ``rg_task`` (default: ``task`` unless it is a reward
    name) is the reasoning-gym task whose entry ``question`` and ``answer`` stand for."""
    where = f"{path.name} line {line}"
    reference = row.get("answer", row.get("reference"))
    if reference is not None and not isinstance(reference, str):
        reference = json.dumps(reference) if isinstance(reference, (list, dict)) else str(reference)
    question = row.get("question", row.get("prompt", ""))
    if not isinstance(question, str):
        raise RlvrError(f"{where}: 'question' must be text, got {type(question).__name__}")
    metadata = {k: v for k, v in row.items() if k not in _RESERVED}
    if "rg_entry" in metadata and not isinstance(metadata["rg_entry"], dict):
        raise RlvrError(f"{where}: 'rg_entry' must be a reasoning-gym entry object")
    if rg_task == "":
        rg_task = None if task in list_rewards() else task
    if "rg_entry" not in metadata and rg_task and reference is not None:
        metadata["rg_entry"] = {
            "question": question,
            "answer": reference,
            "metadata": {"source_dataset": rg_task},
        }
    verifier = row.get("verifier")
    if verifier is not None and not isinstance(verifier, str):
        raise RlvrError(f"{where}: column 'verifier' must be a reward name, got {type(verifier).__name__}")
    return Example(
        id=str(row.get("id", f"{path.stem}-{line}")),
        prompt=[{"role": "user", "content": question}],
        reference=reference,
        data_source=task,
        verifier=verifier if isinstance(verifier, str) else None,
        metadata=metadata,
        origin=where,
    )


def _check_examples(specs: list[RewardSpec], examples: list[Example]) -> None:
    """Each reward's data check (the routing reward's refuses a row's import path) before any worker."""
    for spec in specs:
        check = None if ":" in spec.name else reward_example_check(spec.name)
        if check is not None:
            try:
                check(spec.params, examples)
            except ValueError as err:
                raise RlvrError(f"reward {spec.name}: {err}") from err


def _group_sizes(keys: list[Any]) -> list[int]:
    sizes: list[int] = []
    previous = object()
    for key in keys:
        marker = json.dumps(key, sort_keys=True, default=str)
        if sizes and marker == previous:
            sizes[-1] += 1
        else:
            sizes.append(1)
        previous = marker
    return sizes
