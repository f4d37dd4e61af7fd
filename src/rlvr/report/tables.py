"""The report's before/after tables (static HTML): first vs last evaluation, overall and per group,
and the training metrics of the first steps vs the last."""

from __future__ import annotations

import re
from html import escape
from typing import Any

from rlvr.report.load import Run

_PERCENT = re.compile(r"accuracy|rate|pass@|maj@|mean@|solved")
TRAIN_KEYS = ("reward/mean", "train/accuracy", "completion/mean_length", "update/entropy", "reward/errors")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(value: Any, percent: bool) -> str:
    if not _is_number(value):
        return "–"
    if percent:
        return f"{100 * value:.1f}%"
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def _delta(first: Any, last: Any, percent: bool) -> str:
    if not (_is_number(first) and _is_number(last)):
        return "<td></td>"
    change = last - first
    cls = "up" if change > 0 else "down" if change < 0 else "same"
    text = f"{100 * change:+.1f} pts" if percent else f"{change:+.4g}"
    return f'<td class="delta {cls}">{escape(text)}</td>'


def _row(label: str, first: Any, last: Any, percent: bool, extra: str = "") -> str:
    return (
        f"<tr><th>{escape(label)}</th>{extra}<td>{_fmt(first, percent)}</td>"
        f"<td>{_fmt(last, percent)}</td>{_delta(first, last, percent)}</tr>"
    )


def _label(row: dict[str, Any]) -> str:
    stage = f"{row['stage']}: " if row.get("stage") else ""  # a pipeline's stage
    return f"{stage}{row.get('phase', '?')}, step {row['step']}"


def eval_tables(run: Run) -> str:
    """First vs last evaluation of ``run``: overall metrics, then accuracy per eval group."""
    evals = run.eval_rows
    if not evals:
        return '<p class="muted">No evaluation rows in metrics.jsonl.</p>'
    first, last = evals[0], evals[-1]
    head = f"<tr><th></th><th>{escape(_label(first))}</th><th>{escape(_label(last))}</th><th>change</th></tr>"
    keys = [
        k
        for k in dict.fromkeys([*first, *last])
        if k.startswith("eval/") and not k.startswith(("eval/accuracy/", "eval/size/"))
    ]
    rows = [_row(k.removeprefix("eval/"), first.get(k), last.get(k), bool(_PERCENT.search(k))) for k in keys]
    html = [f'<table class="ba overall"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>']
    groups = [
        k.removeprefix("eval/accuracy/")
        for k in dict.fromkeys([*first, *last])
        if k.startswith("eval/accuracy/")
    ]
    if groups:
        group_head = head.replace("<th></th>", "<th>group</th><th>n</th>", 1)
        group_rows = []
        for g in groups:
            n = last.get(f"eval/size/{g}", first.get(f"eval/size/{g}"))
            size = f"<td>{int(n)}</td>" if _is_number(n) else "<td>–</td>"
            group_rows.append(
                _row(g, first.get(f"eval/accuracy/{g}"), last.get(f"eval/accuracy/{g}"), True, size)
            )
        body = "".join(group_rows)
        html.append(f'<table class="ba groups"><thead>{group_head}</thead><tbody>{body}</tbody></table>')
    if len(evals) == 1:
        html.insert(0, '<p class="muted">Only one evaluation so far: both columns show it.</p>')
    return "\n".join(html)


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if _is_number(r.get(key))]
    return sum(values) / len(values) if values else None


def train_table(run: Run) -> str:
    """Training metrics averaged over the first tenth of the steps vs the last tenth."""
    rows = run.train_rows
    if not rows:
        return '<p class="muted">No training steps in metrics.jsonl yet.</p>'
    n = max(1, len(rows) // 10)
    first, last = rows[:n], rows[-n:]
    span = "step" if n == 1 else "steps"
    head = (
        f"<tr><th></th><th>first {n} {span} ({first[0]['step']}–{first[-1]['step']})</th>"
        f"<th>last {n} {span} ({last[0]['step']}–{last[-1]['step']})</th><th>change</th></tr>"
    )
    body = [
        _row(k, _mean(first, k), _mean(last, k), bool(_PERCENT.search(k)))
        for k in TRAIN_KEYS
        if _mean(rows, k) is not None
    ]
    return f'<table class="ba train"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
