"""What an adapted environment costs per turn, side by side in one run: the same game (addition with
one retry, ``openenv_arithmetic.py`` / ``verifiers_arithmetic.py``) played by a scripted answer
through each adapter's reset/step, no model involved.

Arms: OpenEnv in process, OpenEnv over its WebSocket (OpenEnv's own server in a thread of this
process), verifiers with one HTTP client for every turn (rlvr's harness), and verifiers with a new
client per turn (the harness before it shared one). Every episode answers wrong, then right: two
turns each. Prints ms per turn for each arm and the ratios; ``--json`` writes them.

    python benchmarks/interop/adapter_overhead.py --episodes 100 [--json runs/interop/adapter_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from rlvr.data.env_source import load_env_examples  # noqa: E402
from rlvr.envs import make_env, verifiers_harness  # noqa: E402


def _serve_openenv() -> str:
    import uvicorn
    from openenv.core.env_server import create_app
    from openenv_arithmetic import AnswerAction, ArithmeticRetry, QuestionObservation

    app = create_app(lambda: ArithmeticRetry(), AnswerAction, QuestionObservation, max_concurrent_envs=8)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _play(name: str, params: dict, examples: list) -> float:
    """Seconds per turn over ``examples`` (each: a wrong answer, then the right one)."""
    turns, start = 0, time.perf_counter()
    for example in examples:
        env = make_env(name, params)
        question = env.reset(example, random.Random(0))[-1]["content"]
        x, y = (int(n) for n in question.split("What is ")[1].split("?")[0].split(" + "))
        turns += 1
        if not env.step(str(x + y + 1)).done:
            env.step(str(x + y))
            turns += 1
        env.close()
    return (time.perf_counter() - start) / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    url = _serve_openenv()
    seeded = load_env_examples("openenv", args.episodes, 0, "train", {})
    tasks = load_env_examples("verifiers", args.episodes, 0, "train", {"taskset": "verifiers_arithmetic"})
    shared = verifiers_harness._http
    arms = {
        "openenv in process": lambda: _play(
            "openenv",
            {"environment": "openenv_arithmetic:ArithmeticRetry", "observation_field": "prompt"},
            seeded,
        ),
        "openenv websocket": lambda: _play(
            "openenv", {"base_url": url, "observation_field": "prompt"}, seeded
        ),
        "verifiers, one client": lambda: _play("verifiers", {"taskset": "verifiers_arithmetic"}, tasks),
        "verifiers, a client per turn": lambda: _per_turn_clients(tasks, shared),
    }
    for arm in arms.values():  # warm-up: imports, servers, first connections
        arm()
    results = {name: 1000 * arm() for name, arm in arms.items()}
    for name, ms in results.items():
        print(f"{name:32s} {ms:7.2f} ms/turn")
    one, per_turn = results["verifiers, one client"], results["verifiers, a client per turn"]
    print(f"verifiers: a client per turn / one client = {per_turn / one:.2f}x")
    print(f"verifiers (one client) / openenv websocket = {one / results['openenv websocket']:.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"episodes": args.episodes, "ms_per_turn": results}, indent=2))


def _per_turn_clients(tasks: list, shared) -> float:
    verifiers_harness._http = lambda: httpx.AsyncClient()  # a new client (and TLS context) per turn
    try:
        return _play("verifiers", {"taskset": "verifiers_arithmetic"}, tasks)
    finally:
        verifiers_harness._http = shared


if __name__ == "__main__":
    main()
