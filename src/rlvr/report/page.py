"""``rlvr report``: one self-contained HTML file (inline CSS, JS and data; nothing fetched) showing
runs' curves, before/after tables and a browser over their sampled completions."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import os
import re
import tempfile
from collections import Counter
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.report.history import history_block
from rlvr.report.load import Run, load_runs
from rlvr.report.panels import discover, numeric_keys, panel_dicts, series, with_skipped
from rlvr.report.sources import source_panels, source_table
from rlvr.report.tables import eval_tables, train_table

MAX_SAMPLES = 4000  # rows per run and file embedded in the page; more are thinned by step
SAMPLE_FIELDS = (
    "step",
    "phase",
    "example_id",
    "id",
    "group",
    "role",
    "prompt",
    "question",
    "reference",
    "completion",
    "finish_reason",
    "tokens",
    "reward",
    "score",
    "correct",
    "rewards",
    "errors",
    "advantage",
    "token_text",
    "token_logprobs",
    "token_advantages",
    "conversation",
    "images",
)
# prompt images shown next to samples (rlvr.vision.image_log): PNG files the run wrote, embedded as
# data URIs so that the page stays one file; at most this many per run, each at most this large
MAX_REPORT_IMAGES = 300
MAX_REPORT_IMAGE_BYTES = 256 * 2**10
_IMAGE_PATH = re.compile(r"images/[0-9a-f]{16}\.png")


def thin(rows: list[dict[str, Any]], limit: int = MAX_SAMPLES) -> tuple[list[dict[str, Any]], str]:
    """At most ``limit`` rows, keeping whole steps spread evenly over the run; a note when thinned."""
    if len(rows) <= limit:
        return rows, ""
    steps = sorted({r.get("step") for r in rows}, key=lambda s: (s is None, s if s is not None else 0))
    per_step = Counter(r.get("step") for r in rows)
    keep_every = -(-len(rows) // limit)  # ceil: keep one step in keep_every, and the last one
    while True:
        kept_steps = set(steps[::keep_every]) | {steps[-1]}
        if sum(per_step[s] for s in kept_steps) <= limit or keep_every >= len(steps):
            break
        keep_every += 1
    kept = [r for r in rows if r.get("step") in kept_steps]
    return kept, f"{len(kept)} of {len(rows)} rows shown (one step in {keep_every}, and the last)"


def _compact(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in SAMPLE_FIELDS if k in row}


def _summary(run: Run) -> str:
    """One line of what the run trained, from its config.yaml where present."""
    parts = []
    c = run.config or {}
    model, data, algo = c.get("model") or {}, c.get("data") or {}, c.get("algo") or {}
    rollout, train = c.get("rollout") or {}, c.get("train") or {}
    if isinstance(model, dict) and model.get("name"):
        parts.append(f"model {model['name']}")
    if isinstance(data, dict) and (data.get("task") or data.get("path")):
        parts.append(f"data {data.get('task') or data.get('path')}")
    if isinstance(algo, dict) and algo.get("advantage"):
        parts.append(f"{algo['advantage']} advantages, {algo.get('loss', '?')} loss")
    if isinstance(rollout, dict) and rollout.get("prompts_per_step"):
        parts.append(f"{rollout['prompts_per_step']} prompts × {rollout.get('group_size', '?')} completions")
    steps = run.train_rows
    if run.stages:  # a pipeline: its stages on the one step axis the charts share
        parts.append("stages " + " → ".join(f"{name} from step {start}" for name, start in run.stages))
        parts.append(f"{len(steps)} steps logged")
        return " · ".join(parts)
    planned = train.get("steps") if isinstance(train, dict) else None
    parts.append(f"{len(steps)} steps logged" + (f" of {planned}" if planned is not None else ""))
    return " · ".join(parts)


def run_data(run: Run) -> dict[str, Any]:
    train_rows = with_skipped(run.train_rows)
    samples, sample_note = thin(run.samples)
    eval_samples, eval_note = thin(run.eval_samples)
    return {
        "name": run.name,
        "path": str(run.path),
        "summary": _summary(run),
        "train": series(train_rows, numeric_keys(train_rows)),
        "eval": series(run.eval_rows, numeric_keys(run.eval_rows)),
        "samples": [_compact(r) for r in samples],
        "evalSamples": [_compact(r) for r in eval_samples],
        "images": _images(run.path, [*samples, *eval_samples]),
        "notes": [
            n
            for n in (
                sample_note and f"samples.jsonl: {sample_note}",
                eval_note and f"eval_samples.jsonl: {eval_note}",
            )
            if n
        ],
    }


def _images(run_dir: Path, rows: list[dict[str, Any]]) -> dict[str, str]:
    """``{path: data URI}`` of the images the rows name: only the run's own ``images/*.png`` files
    (a path of another form is left out), the first :data:`MAX_REPORT_IMAGES`."""
    out: dict[str, str] = {}
    for row in rows:
        for path in row.get("images") or []:
            if len(out) >= MAX_REPORT_IMAGES or path in out or not isinstance(path, str):
                continue
            file = run_dir / path
            if not _IMAGE_PATH.fullmatch(path) or not file.is_file() or file.is_symlink():
                continue
            if file.stat().st_size <= MAX_REPORT_IMAGE_BYTES:
                out[path] = "data:image/png;base64," + base64.b64encode(file.read_bytes()).decode()
    return out


def _asset(name: str) -> str:
    return resources.files("rlvr.report").joinpath("assets", name).read_text(encoding="utf-8")


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN; a chart leaves a gap)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: no "</script>" or "<!--" can close it."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(runs: list[Run]) -> str:
    """The report page for ``runs``."""
    panels = source_panels(discover(runs))  # a mixture's per-source keys drawn together
    title = "rlvr report: " + ", ".join(r.name for r in runs)
    data = {
        "title": title,
        "runs": [run_data(r) for r in runs],
        "panels": panel_dicts(panels),
    }
    blocks = []
    for i, run in enumerate(runs):
        blocks.append(
            f'<section class="run-tables" data-run="{i}"><h3><span class="swatch run-{i}"></span>'
            f"{escape(run.name)}</h3>"
            f'<p class="muted">{escape(str(run.path))} · {escape(_summary(run))}</p>'
            f"<h4>Held-out evaluation: first vs last</h4>{eval_tables(run)}"
            f"<h4>Training: first steps vs last</h4>{train_table(run)}{source_table(run)}"
            f"{history_block(run.path)}</section>"
        )
    values = {
        "TITLE": escape(title),
        "GENERATED": escape(_dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        "CSS": _asset("report.css"),
        "TABLES": "\n".join(blocks),
        "DATA": _script_json(_finite(data)),
        "JS": _asset("report.js"),
    }
    # one pass over the template: text inserted (a completion saying "{{JS}}") is never substituted again
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: values[m.group(1)], _asset("page.html"))


def default_out(directories: list[str | Path]) -> Path:
    """``RUN/report.html`` for one run, ``report.html`` here for several."""
    return Path(directories[0]) / "report.html" if len(directories) == 1 else Path("report.html")


def write_report(directories: list[str | Path], out: str | Path | None = None) -> Path:
    """Read the runs, render the page and write it atomically; every input is checked before
    anything is written, so bad input leaves no file behind."""
    runs = load_runs(directories)
    page = render(runs)
    target = Path(out) if out is not None else default_out(directories)
    if target.is_dir():
        raise RlvrError(f"--out {target} is a directory; give a file name, e.g. {target / 'report.html'}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise RlvrError(f"--out {target}: directory {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as err:
        if "tmp" in locals() and os.path.exists(tmp):
            os.unlink(tmp)
        raise RlvrError(f"cannot write {target}: {err.strerror or err}") from err
    return target
