"""``rlvr report``: the page of real tiny-random runs, checked in headless Chromium; bad input."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from chromium import Chromium, find_chromium
from rich.console import Console
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.report import load_runs, write_report
from rlvr.report.load import Run
from rlvr.report.panels import discover

FLAKY = "rewards.functions=[{name: 'reward_fixtures:fail_some', label: flaky}]"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    """Two real 2-step runs: ``plain`` (a length reward), and ``flaky`` (a reward that raises on
    some completions, so steps have reward errors and skipped groups), with its console output."""
    root = tmp_path_factory.mktemp("report-runs")
    common = [*TINY_RUN, f"output_dir={root}", "train.steps=2", "eval.group_by=[operators]"]
    api.train(load_config(None, [*common, "name=plain", "train.log_samples=-1"]), quiet=True)
    console = Console(file=io.StringIO(), width=300, force_terminal=False)
    flaky = [*common, "name=flaky", FLAKY, "rollout.prompts_per_step=4", "train.log_samples=-1", "seed=1"]
    api.train(load_config(None, flaky), console=console, quiet=False)
    return {"plain": root / "plain", "flaky": root / "flaky", "console": console.file.getvalue()}


# ------------------------------------------------------------------------------- what is read
def test_panels_follow_the_logged_keys(runs) -> None:
    loaded = load_runs([runs["plain"], runs["flaky"]])
    panels = {p.id: p for p in discover(loaded)}
    assert panels["reward"].keys[0] == "reward/mean"
    assert {"reward/reward_fixtures:scaled_len", "reward/flaky"} <= set(panels["reward"].keys)
    assert panels["eval-accuracy"].keys == ["eval/accuracy"]
    assert set(panels["eval-groups"].keys) == {"eval/accuracy/+", "eval/accuracy/-"}
    assert panels["groups"].keys == ["groups/sampled", "groups/kept", "groups/skipped"]
    assert "update/entropy" in panels["entropy"].keys and "update/clip_frac" in panels["clip"].keys
    # the flaky run's errors are non-zero, so the per-reward error counts get drawn with the total
    assert panels["errors"].keys[0] == "reward/errors"
    assert any(k.startswith("reward_errors/flaky/") for k in panels["errors"].keys)
    assert "kl" not in panels  # nothing KL was logged (algo.kl_coef=0): no empty chart
    others = {k for p in panels.values() if p.section == "other" for k in p.keys}
    assert {"update/loss", "update/grad_norm", "time/step_s"} <= others
    drawn = {k for p in panels.values() for k in p.keys}
    logged = {k for r in loaded for row in r.train_rows for k, v in row.items() if isinstance(v, float)}
    missing = {k for k in logged - drawn if not k.startswith("reward_errors/")}
    assert not missing, f"logged but drawn nowhere: {missing}"


def test_samples_hold_token_text_and_logprobs(runs) -> None:
    rows = read_jsonl(runs["plain"] / "samples.jsonl")
    assert rows and all(len(r["token_text"]) == len(r["token_logprobs"]) == r["tokens"] for r in rows)
    assert all("".join(r["token_text"]) == r["completion"] for r in rows)
    assert all(lp is not None and lp <= 0 for r in rows for lp in r["token_logprobs"])
    assert {r["group"] for r in rows} <= {"+", "-"}
    # GRPO's advantage is one per sequence: no per-token column repeating it
    assert not any("token_advantages" in r for r in rows)


def test_token_advantages_are_written_when_they_differ_by_token(tmp_path) -> None:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=gae",
            "train.steps=1",
            "eval.before=false",
            "algo.advantage=gae",
            "algo.critic.kind=head",
            "algo.dynamic_sampling=false",
        ],
    )
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "gae" / "samples.jsonl")
    assert rows and all(len(r["token_advantages"]) == r["tokens"] for r in rows)
    for r in rows:  # the logged advantage is the mean of the token advantages
        assert sum(r["token_advantages"]) / r["tokens"] == pytest.approx(r["advantage"], abs=1e-3)


def test_progress_bar_shows_reward_errors_and_skipped_groups(runs) -> None:
    """The flaky run's bar ends with its error and skipped-group totals, summed from metrics.jsonl."""
    train = [r for r in read_jsonl(runs["flaky"] / "metrics.jsonl") if r["phase"] == "train"]
    errors = int(sum(r["reward/errors"] for r in train))
    skipped = int(sum(r["groups/sampled"] - r["groups/kept"] for r in train))
    sampled = int(sum(r["groups/sampled"] for r in train))
    assert errors and skipped, "the run must have errors and skipped groups to test anything"
    text = runs["console"]
    assert f"reward errors {errors}" in text and f"skipped groups {skipped}/{sampled}" in text, text


def test_progress_bar_is_quiet_about_issues_when_there_are_none() -> None:
    from rlvr.log import note_issues, training_progress

    console = Console(file=io.StringIO(), width=300, force_terminal=False)
    with training_progress(console) as progress:
        task = progress.add_task("train", total=2, reward=0.0, acc=0.0, tps=0.0)
        clean = {"reward/errors": 0.0, "groups/sampled": 4.0, "groups/kept": 4.0}
        note_issues(progress, task, clean)
        progress.update(task, completed=1)
    assert "errors" not in console.file.getvalue() and "skipped" not in console.file.getvalue()
    console = Console(file=io.StringIO(), width=300, force_terminal=False)
    with training_progress(console) as progress:
        task = progress.add_task("train", total=2, reward=0.0, acc=0.0, tps=0.0)
        note_issues(progress, task, {"reward/errors": 3.0, "groups/sampled": 4.0, "groups/kept": 1.0})
        note_issues(progress, task, {"reward/errors": 1.0, "groups/sampled": 4.0, "groups/kept": 0.0})
        note_issues(progress, task, {"groups/sampled": 4.0, "groups/kept": 0.0, "update/skipped": 1.0})
    text = console.file.getvalue()
    assert "reward errors 4" in text and "skipped groups 11/12" in text and "without update 1" in text


# ------------------------------------------------------------------------------- bad input
def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "500"}  # one line, not wrapped
    cmd = [sys.executable, "-m", "rlvr.cli", "report", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, ignore=shutil.ignore_patterns("checkpoints", "report.html"))
    return to


@pytest.mark.parametrize(
    ("damage", "needle"),  # each names its file and line (and the other, good run is read first)
    [
        ("missing-dir", "no such run directory"),
        ("no-metrics", "no metrics.jsonl"),
        ("bad-json", "metrics.jsonl:3: not valid JSON"),
        ("not-object", "metrics.jsonl:2: not a JSON object"),
        ("bad-step", "metrics.jsonl:1: key 'step' must be a non-negative integer"),
        ("bad-tokens", "samples.jsonl:2: key 'token_logprobs' has 1 values for"),
        ("bad-reward", "samples.jsonl:1: key 'reward' must be a number"),
    ],
)
def test_bad_input_is_named_by_file_and_line_and_nothing_is_written(runs, tmp_path, damage, needle) -> None:
    run = _copy(runs["plain"], tmp_path / "run")
    metrics, samples = run / "metrics.jsonl", run / "samples.jsonl"
    lines = metrics.read_text().splitlines()
    rows = samples.read_text().splitlines()
    if damage == "missing-dir":
        shutil.rmtree(run)
    elif damage == "no-metrics":
        metrics.unlink()
    elif damage == "bad-json":
        metrics.write_text("\n".join([*lines[:2], lines[2][:-5], *lines[3:]]) + "\n")
    elif damage == "not-object":
        metrics.write_text("\n".join([lines[0], "[1, 2]", *lines[1:]]) + "\n")
    elif damage == "bad-step":
        metrics.write_text("\n".join([lines[0].replace('"step": 0', '"step": "zero"'), *lines[1:]]) + "\n")
    elif damage == "bad-tokens":
        row = json.loads(rows[1])
        row["token_logprobs"] = row["token_logprobs"][:1]
        samples.write_text("\n".join([rows[0], json.dumps(row), *rows[2:]]) + "\n")
    elif damage == "bad-reward":
        row = json.loads(rows[0])
        row["reward"] = "high"
        samples.write_text("\n".join([json.dumps(row), *rows[1:]]) + "\n")
    out = tmp_path / "out.html"
    with pytest.raises(RlvrError) as caught:
        write_report([runs["flaky"], run], out)
    assert needle in str(caught.value) and str(run) in str(caught.value), caught.value
    assert not out.exists() and not list(tmp_path.glob(".out.html*"))  # nothing half-written


def test_cli_bad_input_exits_2_with_one_message(runs, tmp_path) -> None:
    run = _copy(runs["plain"], tmp_path / "run")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([*lines[:2], "{oops", *lines[2:]]) + "\n")
    out = tmp_path / "out.html"
    result = _cli(str(run), "--out", str(out), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"error: {run / 'metrics.jsonl'}:3: not valid JSON" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_an_existing_report_survives_bad_input(runs, tmp_path) -> None:
    out = tmp_path / "out.html"
    out.write_text("previous report")
    with pytest.raises(RlvrError, match="no such run directory"):
        write_report([runs["plain"], tmp_path / "nope"], out)
    assert out.read_text() == "previous report"


def test_cli_writes_the_default_file(runs, tmp_path) -> None:
    run = _copy(runs["plain"], tmp_path / "run")
    result = _cli(str(run), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (run / "report.html").read_text()
    assert page.startswith("<!doctype html>") and 'id="report-data"' in page
    for remote in ("http://", "https://", "//cdn", "<link", "src="):  # self-contained: fetches nothing
        assert remote not in page.split('id="report-data"')[0], remote


def test_text_in_the_data_cannot_break_out_of_the_page(tmp_path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "phase": "train", "reward/mean": 0.5}) + "\n")
    evil = "</script><script>window.pwned=1</script>{{JS}}<!--"
    (run / "samples.jsonl").write_text(json.dumps({"step": 1, "completion": evil, "reward": 1.0}) + "\n")
    page = write_report([run], tmp_path / "r.html").read_text()
    data = page.split('id="report-data">')[1].split("</script>")[0]
    assert json.loads(data)["runs"][0]["samples"][0]["completion"] == evil
    assert page.count("<script") == 2  # the data block and the page's own script


# ------------------------------------------------------------------------------- in a browser
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium; .ci/run installs it)"
)


def _open(page: Path, profile: Path) -> Chromium:
    profile.mkdir()
    browser = Chromium(CHROMIUM, profile)
    try:
        browser.open(page.resolve().as_uri())
        browser.wait_for("document.body.dataset.ready === '1'")
    except BaseException:
        browser.close()
        raise
    return browser


PATHS = """[...document.querySelectorAll('#%s svg.chart path.series')].map(p => ({
  run: p.dataset.run, key: p.dataset.key, points: Number(p.dataset.points),
  moves: (p.getAttribute('d').match(/M/g) || []).length,
  lines: (p.getAttribute('d').match(/L/g) || []).length}))"""


@needs_chromium
def test_report_renders_in_chromium(runs, tmp_path) -> None:
    out = write_report([runs["plain"], runs["flaky"]], tmp_path / "report.html")
    loaded = {r.name: r for r in load_runs([runs["plain"], runs["flaky"]])}
    with _open(out, tmp_path / "profile") as browser:
        assert browser.errors == [], browser.errors
        local = [u for u in browser.requests if not u.startswith(("file:", "data:", "about:"))]
        assert local == [], f"the page fetched {local}"
        # every train panel has one path per run and key, each through every logged step
        for panel, keys in (("reward", ["reward/mean"]), ("entropy", ["update/entropy"])):
            paths = browser.evaluate(PATHS % f"panel-{panel}")
            for key in keys:
                drawn = {p["run"]: p for p in paths if p["key"] == key}
                assert set(drawn) == set(loaded), (panel, key, paths)
                for name, run in loaded.items():
                    steps = [r for r in run.train_rows if r.get(key) is not None]
                    assert drawn[name]["points"] == len(steps) == 2
                    assert (drawn[name]["moves"], drawn[name]["lines"]) == (1, 1)  # one connected line
        evals = browser.evaluate(PATHS % "panel-eval-accuracy")
        assert sorted(p["points"] for p in evals) == [2, 2]  # before and after, for each run
        groups = browser.evaluate(PATHS % "panel-eval-groups")
        assert len(groups) == 4  # two groups ('+', '-') for each of the two runs
        legend = browser.evaluate(
            "[...document.querySelectorAll('#panel-reward .legend-item')].map(e => e.textContent)"
        )
        assert "plain · mean" in legend and "flaky · flaky" in legend, legend
        total = browser.evaluate("document.querySelectorAll('svg.chart path.series').length")
        assert total >= 20
        # the before/after table: one per run, with the groups
        assert browser.evaluate("document.querySelectorAll('table.ba.groups').length") == 2

        # rollout browser: the plain run's samples, 20 a page, tokens coloured by advantage
        samples = loaded["plain"].samples
        assert browser.evaluate("document.querySelectorAll('#samples .sample').length") == min(
            20, len(samples)
        )
        count = browser.evaluate("document.getElementById('f-count').textContent")
        assert count.endswith(f"of {len(samples)} (of {len(samples)})"), count
        tokens = browser.evaluate(
            "[...document.querySelectorAll('#samples .sample')]"
            ".map(s => s.querySelectorAll('span.tok').length)"
        )
        assert tokens == [r["tokens"] for r in samples[:20]]
        coloured = browser.evaluate(
            "[...document.querySelectorAll('span.tok')].filter(t => t.style.background).length"
        )
        assert coloured > 0
        # which colour means what: green for a positive advantage (the update makes the token more
        # likely), red for a negative one, none at zero; and the strength grows with |advantage|
        shown = browser.evaluate(
            "[...document.querySelectorAll('#samples .sample')].map(s =>"
            " [...s.querySelectorAll('span.tok')].map(t => t.style.background))"
        )
        green, red = "rgba(22, 163, 74", "rgba(220, 38, 38"
        signs = set()
        for row, backgrounds in zip(samples[:20], shown):
            advantage = row["advantage"]
            if advantage is None or advantage == 0:
                assert not any(backgrounds), (advantage, backgrounds[:2])
                continue
            signs.add(advantage > 0)
            want = green if advantage > 0 else red
            assert all(b.startswith(want) for b in backgrounds), (advantage, backgrounds[:2])
        assert signs == {True, False}, "the samples shown should hold both signs of advantage"
        strength = {
            abs(r["advantage"]): float(b[0].rsplit(",", 1)[1].rstrip(")"))
            for r, b in zip(samples[:20], shown)
            if r["advantage"] and b
        }
        ordered = [strength[k] for k in sorted(strength)]
        assert ordered == sorted(ordered) and ordered[0] < ordered[-1], strength
        first = browser.evaluate("document.querySelector('#samples .sample .completion').textContent")
        assert first == samples[0]["completion"]

        def choose(element: str, value: str, event: str = "change") -> None:
            browser.evaluate(
                f"(() => {{ const e = document.getElementById('{element}'); e.value = {json.dumps(value)};"
                f" e.dispatchEvent(new Event('{event}')); }})()"
            )

        # colour by logprob: every sampled token gets a colour from its own logprob
        choose("f-colour", "logprob")
        styles = browser.evaluate("[...document.querySelectorAll('span.tok')].map(t => t.style.background)")
        assert len(styles) == sum(tokens) and all(styles), styles[:3]
        # filter by step
        choose("f-step", "2")
        steps = browser.evaluate(
            "[...document.querySelectorAll('#samples .sample .meta')].map(m => m.textContent)"
        )
        assert steps and all(m.startswith("step 2") for m in steps)
        # the flaky run: only rows with reward errors
        choose("f-step", "all")
        choose("f-run", "1")
        browser.evaluate(
            "(() => { const e = document.getElementById('f-errors'); e.checked = true;"
            " e.dispatchEvent(new Event('change')); })()"
        )
        flaky = loaded["flaky"].samples
        with_errors = [r for r in flaky if r["errors"]]
        shown = browser.evaluate("document.querySelectorAll('#samples .sample').length")
        assert shown == min(20, len(with_errors)) > 0
        assert browser.evaluate(
            "[...document.querySelectorAll('#samples .sample')].every(s => s.querySelector('.error-tag'))"
        )
        # reward range: only rows whose reward is inside it
        browser.evaluate(
            "(() => { const e = document.getElementById('f-errors'); e.checked = false;"
            " e.dispatchEvent(new Event('change')); })()"
        )
        rewards = sorted(r["reward"] for r in flaky if r["reward"] is not None)
        low = rewards[len(rewards) // 2]
        choose("f-rmin", str(low), "input")
        count = browser.evaluate("document.getElementById('f-count').textContent")
        expected = sum(r["reward"] is not None and r["reward"] >= low for r in flaky)
        assert f"of {expected} (of {len(flaky)})" in count, count
        # held-out completions, filtered by eval group
        choose("f-source", "eval")
        choose("f-group", "+")
        evals = loaded["flaky"].eval_samples
        plus = sum(r["group"] == "+" for r in evals)
        choose("f-rmin", "", "input")
        count = browser.evaluate("document.getElementById('f-count').textContent")
        assert f"of {plus} (of {len(evals)})" in count, count

        # hover shows the values at the nearest step
        browser.evaluate(
            "(() => { const s = document.querySelector('#panel-reward svg');"
            " const r = s.getBoundingClientRect(); s.dispatchEvent("
            " new MouseEvent('mousemove', {clientX: r.right - 20, clientY: r.top + 40})); })()"
        )
        tip = browser.evaluate("document.querySelector('#panel-reward .tooltip').textContent")
        last = loaded["plain"].train_rows[-1]["reward/mean"]
        shown = str(float(f"{last:.3g}")).removesuffix(".0")  # as the page formats it: 3 digits
        assert tip.startswith("step 2") and f"plain · mean: {shown}" in tip, (tip, last)

        shot = browser.screenshot(tmp_path / "report.png")
        assert browser.errors == [], browser.errors
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    width = int.from_bytes(png[16:20], "big")
    assert width == 1280


@needs_chromium
def test_a_script_error_is_caught(runs, tmp_path, monkeypatch) -> None:
    """The browser check fails when the page's script breaks (a planted error in the plotting code)."""
    import rlvr.report.page as page_module

    real = page_module._asset

    def broken(name: str) -> str:
        text = real(name)
        return text.replace(
            "function niceTicks(lo, hi, count) {", "function niceTicks(lo, hi, count) { lo.x.y;"
        )

    monkeypatch.setattr(page_module, "_asset", broken)
    out = write_report([runs["plain"]], tmp_path / "broken.html")
    profile = tmp_path / "profile"
    profile.mkdir()
    with Chromium(CHROMIUM, profile, timeout_s=30) as browser:
        browser.open(out.resolve().as_uri())
        assert browser.evaluate("document.body.dataset.ready") is None  # the script stopped
        assert any("TypeError" in e for e in browser.errors), browser.errors


def test_run_names_are_told_apart(tmp_path) -> None:
    for parent in ("a", "b"):
        run = tmp_path / parent / "same"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text('{"step": 0, "phase": "before", "eval/accuracy": 0.5}\n')
    names = [r.name for r in load_runs([tmp_path / "a" / "same", tmp_path / "b" / "same"])]
    assert names == ["a/same", "b/same"]
    assert isinstance(load_runs([tmp_path / "a" / "same"])[0], Run)


# ------------------------------------------------------------------------------- token text
def _sentencepiece_like(vocab: list[bytes]):
    """A decode that, like Llama's SentencePiece tokenizers, drops the space of a leading '▁'."""

    def decode(ids: list[int]) -> str:
        text = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace").replace("▁", " ")
        return text[1:] if text.startswith(" ") else text

    return decode


def test_token_text_keeps_spaces_and_whole_characters() -> None:
    from rlvr.collect.records import token_text

    emoji = "😀".encode()
    vocab = ["▁Hello".encode(), "▁world".encode(), "▁".encode(), *[bytes([b]) for b in emoji], b"!"]
    decode = _sentencepiece_like(vocab)
    ids = list(range(len(vocab)))
    pieces = token_text(ids, decode)
    assert pieces == ["Hello", " world", " ", "", "", "", "😀", "!"]
    assert "".join(pieces) == decode(ids)


def test_token_text_with_the_bundled_tokenizer() -> None:
    from rlvr.collect.records import token_text
    from rlvr.models import load_tokenizer

    tokenizer = load_tokenizer("tiny-random")  # SmolLM2's tokenizer
    text = "Let's see: 15 - 43 = -28. Ünïcödé 😀 中文 <answer>-28</answer>\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=False)

    pieces = token_text(ids, decode)
    assert len(pieces) == len(ids) and "".join(pieces) == decode(ids) == text
    assert "\ufffd" not in "".join(pieces) and " 😀" in pieces


def _long_run(path: Path, steps: int, seed: int) -> Path:
    import random

    rng = random.Random(seed)
    path.mkdir(parents=True)
    rows = [{"step": 0, "phase": "before", "eval/accuracy": 0.4}]
    for step in range(1, steps + 1):
        rows.append(
            {
                "step": step,
                "phase": "train",
                "reward/mean": rng.random(),
                "reward/correct": rng.random(),
                "update/entropy": rng.random() if step % 7 else float("nan"),  # gaps
                "groups/sampled": 8.0,
                "groups/kept": float(rng.randint(0, 8)),
            }
        )
    rows.append({"step": steps, "phase": "after", "eval/accuracy": 0.6})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = [{"step": s, "completion": "c", "reward": 0.5} for s in range(1, steps + 1) for _ in range(4)]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    return path


def test_samples_of_long_runs_are_thinned_by_whole_steps() -> None:
    from rlvr.report.page import thin

    rows = [{"step": s, "i": i} for s in range(1, 3001) for i in range(4)]
    kept, note = thin(rows, limit=4000)
    steps = {r["step"] for r in kept}
    assert len(kept) <= 4000 and all(sum(r["step"] == s for r in kept) == 4 for s in list(steps)[:50])
    assert 3000 in steps and 1 in steps and note.startswith(f"{len(kept)} of 12000 rows")
    assert len(kept) > 2000  # thinned, not emptied
    assert thin(rows[:100]) == (rows[:100], "")


@pytest.mark.slow  # 3 x 20,000 steps: about 45 s on the shared 2-core machine
@needs_chromium
def test_long_runs_render(tmp_path) -> None:
    """Three runs of 20,000 steps: every point drawn, gaps left where values are missing (an extent
    taken with Math.min(...values) overflowed the stack here)."""
    runs = [_long_run(tmp_path / f"run{i}", 20_000, i) for i in range(3)]
    out = write_report(runs, tmp_path / "long.html")
    with _open(out, tmp_path / "profile") as browser:
        assert browser.errors == [], browser.errors
        paths = browser.evaluate(PATHS % "panel-reward")
        assert len(paths) == 6 and all(p["points"] == 20_000 for p in paths)
        entropy = browser.evaluate(PATHS % "panel-entropy")
        assert all(p["points"] == 20_000 - 20_000 // 7 and p["moves"] > 1 for p in entropy)
        count = browser.evaluate("document.getElementById('f-count').textContent")
        assert count.endswith("(of 3816)"), count  # 80,000 samples thinned by whole steps
