"""The report's view of the prompt history (``prompt_history.jsonl``, :mod:`rlvr.data.history`): how
hard the prompts the run rolled out were for it, step window by step window (a stacked histogram of
their groups' pass rates, drawn as static SVG), and the prompts that went from unsolved to solved.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.report.load import read_rows

# pass-rate buckets of a group: (label, upper bound inclusive, colour)
BUCKETS = (
    ("0 (all wrong)", 0.0, "#b91c1c"),
    ("≤ 25%", 0.25, "#f97316"),
    ("≤ 50%", 0.5, "#eab308"),
    ("≤ 75%", 0.75, "#84cc16"),
    ("< 100%", 0.999999, "#22c55e"),
    ("100% (all right)", 1.0, "#15803d"),
)
WINDOWS = 20  # the histogram's step windows, at most
FLIPPED_SHOWN = 25


def read_history(path: Path) -> list[dict[str, Any]]:
    """``prompt_history.jsonl`` rows with an integer ``step`` and ``example`` and a ``pass`` that is a
    number in [0, 1] or null; anything else raises naming the file and line."""
    rows = []
    for number, row in read_rows(path):
        step, example, passed = row.get("step"), row.get("example"), row.get("pass")
        if not (isinstance(step, int) and isinstance(example, int)):
            raise RlvrError(f"{path}:{number}: 'step' and 'example' must be integers")
        if passed is not None and not (isinstance(passed, (int, float)) and 0.0 <= passed <= 1.0):
            got = f"{passed!r:.40}"
            raise RlvrError(f"{path}:{number}: 'pass' must be a number in [0, 1] or null (got {got})")
        rows.append(row)
    return rows


def bucket(passed: float) -> int:
    return next(i for i, (_, top, _) in enumerate(BUCKETS) if passed <= top)


def histogram(rows: list[dict[str, Any]], windows: int = WINDOWS) -> list[tuple[int, int, list[int]]]:
    """Per step window ``(first step, last step, groups per pass-rate bucket)``; unscored groups left out."""
    scored = [r for r in rows if r.get("pass") is not None]
    if not scored:
        return []
    first, last = min(r["step"] for r in scored), max(r["step"] for r in scored)
    width = max(1, -(-(last - first + 1) // windows))
    out: dict[int, list[int]] = {}
    for r in scored:
        counts = out.setdefault((r["step"] - first) // width, [0] * len(BUCKETS))
        counts[bucket(float(r["pass"]))] += 1
    return [(first + w * width, min(last, first + (w + 1) * width - 1), out[w]) for w in sorted(out)]


def flipped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prompts whose first scored group was all wrong and a later one was not: id, the step of that
    first group, the step first solved, its latest pass rate and groups rolled out."""
    by_example: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("pass") is not None:
            by_example.setdefault(r["example"], []).append(r)
    out = []
    for example, seen in by_example.items():
        seen.sort(key=lambda r: r["step"])
        if seen[0]["pass"] != 0:
            continue
        solved = next((r for r in seen if r["pass"] > 0), None)
        if solved is not None:
            out.append(
                {
                    "example": example,
                    "id": seen[0].get("id", str(example)),
                    "first_step": seen[0]["step"],
                    "solved_step": solved["step"],
                    "last_pass": seen[-1]["pass"],
                    "groups": len(seen),
                }
            )
    return sorted(out, key=lambda f: (f["solved_step"], f["example"]))


def _svg(hist: list[tuple[int, int, list[int]]]) -> str:
    w, h, left, bottom = 640, 200, 34, 22
    plot_w, plot_h = w - left - 8, h - bottom - 8
    bar = plot_w / len(hist)
    parts = [f'<svg viewBox="0 0 {w} {h}" role="img" aria-label="pass-rate histogram over steps">']
    for y in (0.0, 0.5, 1.0):
        py = 8 + plot_h * (1 - y)
        parts.append(f'<g class="grid"><line x1="{left}" x2="{w - 8}" y1="{py:.1f}" y2="{py:.1f}"/></g>')
        parts.append(f'<g class="axis"><text x="2" y="{py + 3:.1f}">{int(y * 100)}%</text></g>')
    for i, (lo, hi, counts) in enumerate(hist):
        total, y = sum(counts), 8.0 + plot_h
        for (label, _, colour), n in zip(BUCKETS, counts):
            if n:
                height = plot_h * n / total
                y -= height
                title = f"steps {lo}–{hi}: {n} of {total} groups {label}"
                parts.append(
                    f'<rect x="{left + i * bar + 1:.1f}" y="{y:.1f}" width="{max(bar - 2, 1):.1f}" '
                    f'height="{height:.1f}" fill="{colour}"><title>{escape(title)}</title></rect>'
                )
        if i in (0, len(hist) - 1) or len(hist) <= 8:
            parts.append(f'<g class="axis"><text x="{left + i * bar + 2:.1f}" y="{h - 6}">{lo}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def history_block(path: Path) -> str:
    """The HTML of a run directory's prompt history; empty when it has none."""
    file = path / "prompt_history.jsonl"
    if not file.is_file():
        return ""
    rows = read_history(file)
    hist = histogram(rows)
    if not hist:
        return ""
    legend = " ".join(
        f'<span class="swatch" style="background:{c}"></span>{escape(label)}' for label, _, c in BUCKETS
    )
    html = [
        "<h4>Prompt difficulty over training (pass rate of each rolled-out group)</h4>",
        f'<div class="panel">{_svg(hist)}</div><p class="muted">{legend}</p>',
    ]
    flips = flipped(rows)
    prompts = len({r["example"] for r in rows})
    html.append(
        f"<h4>Unsolved → solved: {len(flips)} of {prompts} prompts rolled out</h4>"
        '<p class="muted">First group all wrong, a later group with a correct answer.</p>'
    )
    if flips:
        cells = ("prompt", "first seen", "solved at", "latest pass", "groups")
        head = "<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>"
        body = "".join(
            f"<tr><th>{escape(str(f['id']))}</th><td>step {f['first_step']}</td>"
            f"<td>step {f['solved_step']}</td><td>{100 * f['last_pass']:.0f}%</td><td>{f['groups']}</td></tr>"
            for f in flips[:FLIPPED_SHOWN]
        )
        extra = len(flips) - FLIPPED_SHOWN
        more = f'<p class="muted">… and {extra} more</p>' if extra > 0 else ""
        html.append(f'<table class="ba"><thead>{head}</thead><tbody>{body}</tbody></table>{more}')
    return "".join(html)
