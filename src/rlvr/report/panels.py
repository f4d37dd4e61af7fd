"""Which charts a report draws: found from the keys the runs' metrics.jsonl actually hold.

Known families get their own panel (reward and its components, accuracy overall and per eval
group, entropy, KL, clip fraction, response length, groups kept and skipped, reward errors); every
other numeric key gets a small panel of its own under "Other metrics", so nothing logged is hidden
and nothing absent is drawn empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from rlvr.report.load import Run

SKIPPED = "groups/skipped"  # derived: groups/sampled - groups/kept (errored or filtered out)
_ROLE_COUNTS = ("/samples", "/unscored", "/mean_length")  # per-role counts: their own panels, under "other"
_NOT_COMPONENTS = {"reward/mean", "reward/errors", "reward/kl", "reward/kl_penalty", "reward/shaped_mean"}
_KL = re.compile(r"(^|/)kl($|[/_])")
_CLIP = re.compile(r"clip.*frac|frac.*clip")


@dataclass
class Panel:
    """One chart: ``keys`` drawn for every run that has them, from train rows or eval rows."""

    id: str
    title: str
    source: str  # "train" (one point per step) or "eval" (before / periodic / after)
    keys: list[str]
    percent: bool = False
    section: str = "main"


def numeric_keys(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Keys with at least one finite number, in first-seen order (``step`` left out)."""
    keys: dict[str, None] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                keys.setdefault(key)
    return list(keys)


def series(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, list[Any]]:
    """Column-wise values of ``rows`` (None where a row lacks a key), with ``step`` (and ``phase``)."""
    out: dict[str, list[Any]] = {"step": [r["step"] for r in rows]}
    if any("phase" in r for r in rows):
        out["phase"] = [r.get("phase", "train") for r in rows]
    for key in keys:
        column = [r.get(key) for r in rows]
        out[key] = [v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in column]
    return out


def with_skipped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Train rows with the derived ``groups/skipped`` where both group counts are logged."""
    out = []
    for row in rows:
        sampled, kept = row.get("groups/sampled"), row.get("groups/kept")
        if isinstance(sampled, (int, float)) and isinstance(kept, (int, float)):
            row = {**row, SKIPPED: sampled - kept}
        out.append(row)
    return out


def _take(keys: list[str], used: set[str], pick: Callable[[str], bool]) -> list[str]:
    chosen = [k for k in keys if k not in used and pick(k)]
    used.update(chosen)
    return chosen


def discover(runs: list[Run]) -> list[Panel]:
    """The panels for ``runs``: known families first, then one panel per remaining key."""
    train_keys = numeric_keys(r for run in runs for r in with_skipped(run.train_rows))
    eval_keys = numeric_keys(r for run in runs for r in run.eval_rows)
    used: set[str] = set()
    panels: list[Panel] = []

    def add(pid: str, title: str, source: str, keys: list[str], percent: bool = False) -> None:
        if keys:
            panels.append(Panel(pid, title, source, keys, percent))

    t = train_keys
    reward = _take(t, used, lambda k: k == "reward/mean")
    reward += _take(t, used, lambda k: k.startswith("reward/") and k not in _NOT_COMPONENTS)
    reward += _take(t, used, lambda k: k == "reward/shaped_mean")
    add("reward", "Reward (total and per component)", "train", reward)
    add(
        "train-accuracy",
        "Accuracy of the sampled completions",
        "train",
        _take(t, used, "train/accuracy".__eq__),
        True,
    )
    e_used: set[str] = set()
    # role games (rlvr.roles): each role's reward and components, in training and on held-out problems
    roles = dict.fromkeys(k.split("/")[1] for k in [*t, *eval_keys] if re.match(r"(eval/)?role/[^/]+/", k))
    for role in roles:
        mine = _take(t, used, lambda k, r=role: k.startswith(f"role/{r}/") and not k.endswith(_ROLE_COUNTS))
        add(f"role-{_slug(role)}", f"Role {role}: reward and components", "train", mine)
        held = _take(
            eval_keys,
            e_used,
            lambda k, r=role: k.startswith(f"eval/role/{r}/") and not k.endswith(_ROLE_COUNTS),
        )
        add(f"eval-role-{_slug(role)}", f"Role {role} on held-out problems (sampled)", "eval", held)
    add("eval-accuracy", "Held-out accuracy", "eval", _take(eval_keys, e_used, "eval/accuracy".__eq__), True)
    add(
        "eval-groups",
        "Held-out accuracy by group",
        "eval",
        _take(eval_keys, e_used, lambda k: k.startswith("eval/accuracy/")),
        True,
    )
    add("entropy", "Entropy", "train", _take(t, used, lambda k: "entropy" in k))
    mismatch = _take(t, used, lambda k: k.startswith("mismatch/"))  # model.precision: sampler vs trainer
    add("mismatch", "Sampler/trainer mismatch (logprobs)", "train", mismatch)
    add("kl", "KL", "train", _take(t, used, lambda k: bool(_KL.search(k))))
    add("clip", "Clip fraction", "train", _take(t, used, lambda k: bool(_CLIP.search(k))), True)
    add("length", "Response length (tokens)", "train", _take(t, used, "completion/mean_length".__eq__))
    add("truncated", "Truncated responses", "train", _take(t, used, "completion/truncated_rate".__eq__), True)
    add(
        "groups",
        "Groups: sampled, kept, skipped",
        "train",
        _take(t, used, lambda k: k in ("groups/sampled", "groups/kept", SKIPPED, "update/skipped")),
    )
    add(
        "errors",
        "Reward errors",
        "train",
        _take(t, used, lambda k: k == "reward/errors" or k.startswith("reward_errors/"))
        if _any_nonzero(runs, "reward/errors", "reward_errors/")
        else _take(t, used, "reward/errors".__eq__),
    )
    _take(t, used, lambda k: k.startswith("reward_errors/"))  # all zero: the total says so
    for key in t:
        if key not in used:
            panels.append(Panel(_slug(key), key, "train", [key], section="other"))
    for key in eval_keys:
        if key not in e_used and not key.startswith("eval/size/"):
            panels.append(Panel(_slug("eval-" + key), key, "eval", [key], section="other"))
    seen: dict[str, int] = {}
    for panel in panels:  # ids are DOM ids: unique even when two keys slug alike
        seen[panel.id] = seen.get(panel.id, 0) + 1
        if seen[panel.id] > 1:
            panel.id = f"{panel.id}-{seen[panel.id]}"
    return panels


def _any_nonzero(runs: list[Run], total: str, prefix: str) -> bool:
    return any(
        (k == total or k.startswith(prefix)) and isinstance(v, (int, float)) and v
        for run in runs
        for row in run.train_rows
        for k, v in row.items()
    )


def _slug(key: str) -> str:
    return "m-" + re.sub(r"[^A-Za-z0-9]+", "-", key).strip("-").lower()


def panel_dicts(panels: list[Panel]) -> list[dict[str, Any]]:
    return [asdict(p) for p in panels]
