"""``rlvr``: train, evaluate, list tasks, show configs. Logic lives in :mod:`rlvr.api`."""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from rlvr.errors import RlvrError, Stopped, TrainingFailed

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="RL post-training with verifiable rewards."
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect configs.")
app.add_typer(config_app, name="config")
console = Console(stderr=True)
if not console.is_terminal:  # a batch job's log: one line per message, not wrapped at 80 columns
    console.soft_wrap = True
_state = {"debug": False}


def _split_args(config: str | None, overrides: list[str] | None) -> tuple[str | None, list[str]]:
    """``rlvr train a=1`` passes the override as CONFIG; treat any arg with '=' as an override."""
    overrides = list(overrides or [])
    if config and "=" in config:
        return None, [config, *overrides]
    return config, overrides


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False) -> None:
    _state["debug"] = debug


@app.command()
def train(
    config: Annotated[str | None, typer.Argument(help="YAML config or recipe name.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides, e.g. optim.lr=1e-5")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the run from its last checkpoint, with its saved config.yaml; only steps, "
            "time limits, logging, checkpoint and eval settings may be changed.",
        ),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete an existing run of this name (output_dir/name: its logs and checkpoints) and "
            "train again from scratch. Only an rlvr run directory, never a symbolic link.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False,
) -> None:
    """Train a model (default: GRPO on reasoning-gym chain_sum with the bundled SmolLM2-135M)."""
    _train(config, overrides, resume, overwrite, quiet)


@app.command()
def sft(
    config: Annotated[str | None, typer.Argument(help="YAML config or recipe name.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides, e.g. sft.path=chats.jsonl")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run from its last checkpoint (as rlvr train).")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Delete an existing run of this name first (as rlvr train).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False,
) -> None:
    """Supervised fine-tuning on chat data (sft.path): rlvr train with stage=sft."""
    _train(config, overrides, resume, overwrite, quiet, stage="sft")


@app.command()
def rm(
    config: Annotated[str | None, typer.Argument(help="YAML config or recipe name.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides, e.g. rm.pairs=file rm.path=pairs.jsonl")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Delete an existing run of this name first (as rlvr train).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False,
) -> None:
    """Train a reward model (Bradley-Terry) on verifier-built or file pairs: rlvr train with stage=rm."""
    _train(config, overrides, False, overwrite, quiet, stage="rm")


def _train(
    config: str | None,
    overrides: list[str] | None,
    resume: bool,
    overwrite: bool,
    quiet: bool,
    stage: str | None = None,
) -> None:
    """``rlvr train``'s body; ``stage`` (a stage's own command) is set as an override."""
    from rlvr import api

    path, items = _split_args(config, overrides)
    if stage is not None:
        given = [item for item in items if item.split("=", 1)[0].strip() == "stage"]
        if given and given[-1].split("=", 1)[1].strip() != stage:
            raise RlvrError(f"rlvr {stage} trains stage={stage}; for {given[-1].strip()} use rlvr train")
        items = [*items, f"stage={stage}"]
    if resume:  # the run's saved config; only settings safe to change mid-run may be given
        cfg, changes = api.resume_config(path, items)
        if changes:
            from rlvr.train.loop.resume import describe

            console.print(f"--resume: applied {describe(changes)}", highlight=False)
    else:
        cfg = api.load_config(path, items)
    results = api.train(cfg, resume=resume, console=console, quiet=quiet, overwrite=overwrite)
    from rlvr.train.loop.health import run_failure

    failure = run_failure(results)  # no update at all, or most reward calls failed: exit 3
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 alone reports
        if failure:
            raise typer.Exit(TrainingFailed.exit_code)
        return
    before, after = results.get("before"), results.get("after")
    for label, metrics in (("before", before), ("after", after)):
        if metrics and "rm/eval_accuracy" in metrics:  # a reward model's held-out pairs
            console.print(
                f"held-out {label:6s}: pair accuracy {metrics['rm/eval_accuracy']:.1%}  "
                f"loss {metrics['rm/eval_loss']:.4f}  (n={int(metrics['rm/eval_pairs'])} pairs)"
            )
        if metrics and "sft/eval_loss" in metrics:  # a stage's own held-out metric
            console.print(f"held-out {label:6s}: SFT loss {metrics['sft/eval_loss']:.4f}")
        if metrics and "eval/accuracy" in metrics:
            extra = (
                f"answer tags {metrics['eval/answer_tag_rate']:.1%}"
                if "eval/answer_tag_rate" in metrics
                else f"turns {metrics['eval/turns']:.2f}  tool calls {metrics['eval/tool_calls']:.2f}  "
                f"tool errors {metrics['eval/tool_errors']:.2f} per episode"
            )
            console.print(
                f"held-out {label:6s}: accuracy {metrics['eval/accuracy']:.1%}  {extra}  "
                f"(n={int(metrics['eval/size'])})"
            )
            by_group = _group_line(metrics)
            if by_group:
                console.print(f"  by group: {by_group}")
            if "eval_master/accuracy" in metrics:  # eval.weights both: the line above is the sampler's
                console.print(
                    f"  the sampler's weights above; the master weights (what the checkpoint saves): "
                    f"accuracy {metrics['eval_master/accuracy']:.1%}"
                )
    console.print(f"run directory: {cfg.output_dir}/{cfg.name}")
    if results.get("model") and cfg.stage == "rm":
        console.print(
            f"reward model: {results['model']}  (rewards.functions: [{{name: reward_model, params: "
            f"{{path: {results['model']}}}}}])",
            highlight=False,
            markup=False,
        )
    if failure:
        raise TrainingFailed(failure)


@app.command()
def collect(
    config: Annotated[str | None, typer.Argument(help="YAML config or recipe name.")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides")] = None,
    out: Annotated[str, typer.Option("--out", help="JSONL file to write (must not exist).")] = "",
    prompts: Annotated[
        int | None, typer.Option("--prompts", help="Groups to collect (default: one step's worth).")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="train, or eval: every held-out problem.")] = "train",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Sample and score trajectories with a config's model, data and rewards; write them as JSONL."""
    from rlvr import api

    if not out:
        raise RlvrError("rlvr collect needs --out FILE.jsonl")
    path, items = _split_args(config, overrides)
    cfg = api.load_config(path, items)
    summary = api.collect(cfg, out, prompts, split, console=console, quiet=quiet)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    console.print(
        f"{int(summary['trajectories'])} trajectories in {int(summary['groups/sampled'])} groups "
        f"({int(summary['groups/kept'])} kept) → {summary['out']}\n"
        f"reward {summary['reward/mean']:.3f}  accuracy {summary['train/accuracy']:.1%}  "
        f"reward errors {int(summary['reward/errors'])}"
    )
    for key, value in summary.items():
        if key.startswith("reward_errors/") and value:
            console.print(f"  {key}: {int(value)}")


def _group_line(metrics: dict[str, float], most: int = 12) -> str:
    """``group accuracy (n)`` for each ``eval/accuracy/<group>``; empty for one group or too many."""
    groups = [k.removeprefix("eval/accuracy/") for k in metrics if k.startswith("eval/accuracy/")]
    if not 1 < len(groups) <= most:
        return ""
    return " · ".join(
        f"{g} {metrics[f'eval/accuracy/{g}']:.0%} ({int(metrics[f'eval/size/{g}'])})" for g in groups
    )


@app.command("eval")
def eval_cmd(
    model: Annotated[
        str, typer.Option("--model", help="Built-in name, local model dir, run directory or checkpoint.")
    ] = "smollm2-135m-instruct",
    task: Annotated[str | None, typer.Option("--task", help="reasoning-gym task (or use a config).")] = None,
    config: Annotated[
        str | None, typer.Option("--config", help="YAML config for data/eval settings.")
    ] = None,
    samples: Annotated[int, typer.Option("--samples", help="Sampled completions per prompt for pass@k.")] = 0,
    pass_k: Annotated[str, typer.Option("--pass-k", help="Comma-separated k values.")] = "1",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics as JSON on stdout.")] = False,
) -> None:
    """Evaluate a model on held-out problems: greedy accuracy, answer-format use, pass@k."""
    from rlvr import api

    # a run directory or checkpoint: its model, evaluated with the run's own data, rewards and env
    model, run_config = api.resolve_run(model)
    items = [f"model.name={model}", f"eval.samples={samples}", f"eval.pass_k=[{pass_k}]", *(overrides or [])]
    if task:
        items.append(f"data.task={task}")
    cfg = api.load_config(config or run_config, items)
    metrics = api.evaluate_model(cfg, console=console)
    if as_json:
        print(json.dumps(metrics, indent=2))
        return
    table = Table(title=f"{cfg.model.name} on {cfg.data.task or cfg.data.path}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key.removeprefix("eval/"), f"{value:.4f}" if isinstance(value, float) else str(value))
    Console().print(table)


@app.command()
def report(
    runs: Annotated[list[str], typer.Argument(help="Run directories (runs/NAME); several overlay.")],
    out: Annotated[
        str | None,
        typer.Option("--out", help="HTML file to write (default: RUN/report.html, report.html for several)."),
    ] = None,
) -> None:
    """Write one self-contained HTML page of runs: curves, before/after tables, a rollout browser."""
    from rlvr.report import write_report

    path = write_report(runs, out)
    console.print(f"report: {path} ({path.stat().st_size / 1024:.0f} kB)", highlight=False)


@app.command()
def recipes() -> None:
    """List the method presets (recipes), one line each: run one with `rlvr train NAME`."""
    from rlvr.config.load import recipe_names, recipe_summary

    table = Table("recipe", "what it trains")
    for name in recipe_names():
        table.add_row(name, recipe_summary(name))
    Console().print(table)


@app.command()
def tasks() -> None:
    """List data sources, every reasoning-gym task and every environment dataset."""
    import rlvr.envs  # noqa: F401  (the built-in environments register their datasets)
    from rlvr.data import SUPPORTED_EXTENSIONS, list_reasoning_gym_tasks
    from rlvr.data.env_source import ENV_DATASETS

    print(
        "sources: reasoning_gym (data.task=NAME), file (data.path="
        + "|".join(SUPPORTED_EXTENSIONS)
        + "), hf (data.path=local dataset dir), env (data.source=env data.task=NAME)"
    )
    print("environment datasets (data.source=env):")
    for name in ENV_DATASETS.names():
        print(f"  {name}")
    print("reasoning-gym tasks:")
    for name in list_reasoning_gym_tasks():
        print(f"  {name}")


@app.command()
def serve(
    model: Annotated[str, typer.Option("--model", help="Built-in name, local HF directory or hub id.")] = (
        "smollm2-135m-instruct"
    ),
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    root: Annotated[
        str, typer.Option("--root", help="Directory of the checkpoints clients save.")
    ] = "runs/serve",
    full: Annotated[
        bool, typer.Option("--full", help="Train every weight, not the LoRA clients ask for.")
    ] = False,
    lora_alpha: Annotated[
        float, typer.Option("--lora-alpha", help="LoRA alpha of clients' adapters.")
    ] = 32.0,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require this X-API-Key.")] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", help="torch threads (default: torch's).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed for requests without one.")] = 0,
    engine: Annotated[
        str, typer.Option("--engine", help="Sampling engine: hf, or vllm (make vllm; a server started here).")
    ] = "hf",
    vllm_url: Annotated[
        str | None, typer.Option("--vllm-url", help="With --engine vllm: a running rlvr vLLM server.")
    ] = None,
) -> None:
    """Serve the Tinker training API (forward_backward, optim_step, sample, checkpoints) on this machine."""
    from pathlib import Path

    from rlvr.serve.main import serve as run_server
    from rlvr.serve.service import ServeSettings

    settings = ServeSettings(
        model=model,
        root=Path(root),
        full=full,
        lora_alpha=lora_alpha,
        seed=seed,
        engine=engine,
        vllm_url=vllm_url,
    )
    run_server(settings, host, port, api_key, threads)


@config_app.command("show")
def config_show(
    config: Annotated[str | None, typer.Argument(help="YAML config or recipe name.")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides")] = None,
    doc: Annotated[bool, typer.Option("--doc", help="Each key's description beside its value.")] = False,
) -> None:
    """Print the resolved config (defaults ← file ← overrides) as YAML."""
    from rlvr.config import dump_config, load_config
    from rlvr.config.doc import dump_config_doc

    path, items = _split_args(config, overrides)
    cfg = load_config(path, items)
    print(dump_config_doc(cfg) if doc else dump_config(cfg), end="")


@app.command("reward")
def reward_cmd(
    completions: Annotated[
        str,
        typer.Option(
            "--completions",
            help="JSONL file, one completion per row; or rlvr collect's trajectories (with --config).",
        ),
    ],
    task: Annotated[
        str | None,
        typer.Option("--task", help="Reward name (math, code, ifeval, ...) or reasoning-gym task."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Score as training with this config or recipe does: all its rewards, weights, pool "
            "and timeouts (key=value overrides apply to it; --workers/--timeout do not).",
        ),
    ] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides of --config")] = None,
    reward: Annotated[
        list[str] | None, typer.Option("--reward", help="Reward to apply (repeatable); default from --task.")
    ] = None,
    params: Annotated[
        str | None,
        typer.Option("--params", help='JSON params per reward, e.g. \'{"math": {"extract": "boxed"}}\'.'),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Reward worker processes (0: one per CPU).")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per reward call.")] = 10.0,
    out: Annotated[
        str | None, typer.Option("--out", help="With --config: write each row's total, components, errors.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Score a file of completions offline: mean reward, per-component means, errors, examples."""
    from rlvr.rewards.offline import print_summary, score_file, score_with_config
    from rlvr.safe_parse import loads_json

    if config is not None or overrides:
        if task or reward or params:
            raise RlvrError("rlvr reward: give --config or --task/--reward/--params, not both")
        from rlvr import api

        cfg = api.load_config(config, overrides or [])
        summary = score_with_config(completions, cfg, out=out, console=console)
    else:
        if not task:
            raise RlvrError("rlvr reward needs --task NAME (a reward or reasoning-gym task) or --config FILE")
        if out:
            raise RlvrError("--out needs --config")
        try:
            parsed = loads_json(params, "--params") if params else None
        except json.JSONDecodeError as err:
            raise RlvrError(f"--params is not valid JSON: {err}") from err
        summary = score_file(
            completions, task, reward, parsed, workers=workers, timeout_s=timeout, console=console
        )
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print_summary(summary, Console())


def _cli_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(usage errors, other CLI errors, exits) as raised by the installed typer: typer >= 0.20
    raises its vendored click's classes (``typer._click``), older ones click's own."""
    import importlib

    usage, other, exits = [], [], [typer.Exit]
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        usage.append(module.UsageError)
        other.append(module.ClickException)
        if hasattr(module, "Exit"):
            exits.append(module.Exit)
    return tuple(usage), tuple(other), tuple(exits)


_IO_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS}


def main() -> None:
    """The ``rlvr`` entry point: one message and a non-zero exit for every mistake (2 for usage and
    config errors, 3 for a training run that did not train, 74 when a checkpoint or log cannot be
    written: a full disk, an I/O error; 130 when interrupted), a traceback only with ``--debug``."""
    try:
        code = app(standalone_mode=False)
        # typer >= 0.20 turns Ctrl-C into Exit(130) and, outside standalone mode, *returns* that code:
        # without this an interrupted eval, reward or start-up exited 0, as if it had finished
        if isinstance(code, int) and not isinstance(code, bool) and code:
            if code == 130:
                console.print("interrupted")
            sys.exit(code)
    except Stopped as err:  # Ctrl-C or SIGTERM: where the run stopped, not an error
        console.print(str(err), highlight=False)
        sys.exit(err.exit_code)
    except RlvrError as err:
        if _state["debug"]:
            raise
        console.print(f"[bold red]error:[/bold red] {err}", highlight=False)
        sys.exit(err.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        console.print("interrupted")
        sys.exit(130)
    except OSError as err:  # a full disk or an I/O error outside a checkpoint (logs, output files)
        if _state["debug"] or err.errno not in _IO_ERRNOS:
            raise
        where = f": {err.filename}" if err.filename else ""
        console.print(f"[bold red]error:[/bold red] {err.strerror}{where}", highlight=False)
        sys.exit(74)
    except Exception as err:
        usage, other, exits = _cli_exceptions()
        if isinstance(err, usage):  # unknown command or option, missing or malformed parameter
            err.show()
            sys.exit(2)
        if isinstance(err, other):
            err.show()
            sys.exit(getattr(err, "exit_code", 1) or 1)
        if isinstance(err, exits):
            sys.exit(getattr(err, "exit_code", 0))
        raise


if __name__ == "__main__":
    main()
