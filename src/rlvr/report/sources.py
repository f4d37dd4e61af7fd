"""The report's view of a mixture of data sources (``data.sources``): per-source charts over the
steps (accuracy, reward, admitted share, drawn share, groups) and a table per run of each source's
drawn share, training accuracy first steps vs last, admitted share and held-out accuracy.

The keys are those :func:`rlvr.data.mixture.source_metrics` and ``MixtureOrder.metrics`` write to
metrics.jsonl: ``source/<name>/{accuracy,reward,admitted,groups}`` and ``data/<name>/drawn``.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from rlvr.report.load import Run
from rlvr.report.panels import Panel
from rlvr.report.tables import _fmt, _is_number

_KEY = re.compile(
    r"^(?:source/(?P<name>[A-Za-z0-9_-]+)/(?P<kind>accuracy|reward|admitted|groups)"
    r"|data/(?P<drawn>[A-Za-z0-9_-]+)/drawn)$"
)
# kind -> (panel id, title, percent), in the order the panels are drawn
_PANELS = {
    "accuracy": ("source-accuracy", "Accuracy of the sampled completions per source", True),
    "reward": ("source-reward", "Reward per source", False),
    "admitted": ("source-admitted", "Groups admitted to the update per source", True),
    "drawn": ("source-drawn", "Share of the prompts drawn per source", True),
    "groups": ("source-groups", "Groups sampled per source", False),
}


def _kind(key: str) -> tuple[str, str] | None:
    """``(source name, kind)`` of a per-source key, None for any other key."""
    match = _KEY.match(key)
    if match is None:
        return None
    if match["drawn"]:
        return match["drawn"], "drawn"
    return match["name"], match["kind"]


def source_panels(panels: list[Panel]) -> list[Panel]:
    """``panels`` with the per-source keys (each on its own "other" panel as found) drawn together,
    one panel per kind, after the training accuracy; unchanged when no run mixes sources."""
    keys: dict[str, list[str]] = {kind: [] for kind in _PANELS}
    rest = []
    for panel in panels:
        kind = _kind(panel.keys[0]) if panel.source == "train" and len(panel.keys) == 1 else None
        if kind is not None and panel.section == "other":
            keys[kind[1]].append(panel.keys[0])
        else:
            rest.append(panel)
    grouped = [
        Panel(pid, title, "train", sorted(keys[kind]), percent)
        for kind, (pid, title, percent) in _PANELS.items()
        if keys[kind]
    ]
    if not grouped:
        return panels
    at = next((i + 1 for i, p in enumerate(rest) if p.id == "train-accuracy"), 0)
    return [*rest[:at], *grouped, *rest[at:]]


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if _is_number(r.get(key))]
    return sum(values) / len(values) if values else None


def source_table(run: Run) -> str:
    """Each source of ``run``: drawn share and admitted share over the run, training accuracy over the
    first tenth of the steps vs the last tenth, held-out accuracy at the first evaluation vs the last
    (its eval group, eval.group_by=data_source). "" for a run of one source."""
    rows = run.train_rows
    names = sorted({k[0] for r in rows for key in r if (k := _kind(key)) is not None})
    if not names:
        return ""
    n = max(1, len(rows) // 10)
    first, last = rows[:n], rows[-n:]
    evals = run.eval_rows
    head = (
        "<tr><th>source</th><th>drawn</th><th>admitted</th>"
        f"<th>accuracy, first {n} steps</th><th>last {n}</th>"
        "<th>held-out, first eval</th><th>last eval</th></tr>"
    )
    body = []
    for name in names:
        held = f"eval/accuracy/{name}"
        cells = [
            _mean(rows, f"data/{name}/drawn"),
            _mean(rows, f"source/{name}/admitted"),
            _mean(first, f"source/{name}/accuracy"),
            _mean(last, f"source/{name}/accuracy"),
            evals[0].get(held) if evals else None,
            evals[-1].get(held) if evals else None,
        ]
        body.append(
            f"<tr><th>{escape(name)}</th>" + "".join(f"<td>{_fmt(v, True)}</td>" for v in cells) + "</tr>"
        )
    return (
        "<h4>Sources (data.sources)</h4>"
        f'<table class="ba sources"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
    )
