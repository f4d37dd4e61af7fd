"""Shared fixtures. Tests marked ``slow`` (longer real-model runs) run only with ``--runslow``; those
marked ``vllm`` or ``distributed`` (a vLLM server, torchrun ranks) with ``--runscale`` (or
``--runslow``): ``make test`` stays under 10 minutes on 2 cores, ``make test-scale`` runs them and
CI runs both."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


_SHARED = "RLVR_TEST_SHARED_CACHE"  # set by the xdist controller for its workers (pytest_configure)


@pytest.fixture(scope="session", autouse=True)
def _rlvr_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Built-in models are converted into a cache private to this test run, not the user's.

    ``rlvr.models.bundled`` caches converted models in ``$RLVR_CACHE`` or ``~/.cache/rlvr``. Tests
    that used the user's cache depended on what was there (a stale or half-written model from an
    older rlvr passed or failed them) and wrote into it. The run shares one cache, so the real model
    is converted once per run (about 10 s), also under ``pytest -n 2``: the controller makes one
    fresh directory for all its workers (``pytest_configure``; the conversion holds a file lock, so a
    second worker waits for the first) and removes it at the end. Reusing a cache across runs is an
    explicit choice: set ``RLVR_TEST_CACHE`` to a directory (CI can persist it; pointing it at
    ``~/.cache/rlvr`` opts into the user's cache on purpose).
    """
    chosen = os.environ.get("RLVR_TEST_CACHE") or os.environ.get(_SHARED)
    # Under pytest's basetemp (.pytest-tmp in the repository, see pyproject.toml: tests leave nothing
    # in the host's /tmp), removed at the end of the session: a converted model is 0.5 GB.
    cache = chosen or str(tmp_path_factory.mktemp("rlvr-test-cache"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RLVR_CACHE", cache)
            yield cache
    finally:
        if not chosen:
            shutil.rmtree(cache, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller (``-n N``, not a worker) makes the cache its workers share: a new directory
    next to their basetemps, named in the environment they inherit when they start."""
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not workers or os.environ.get("RLVR_TEST_CACHE"):
        return
    root = Path(config.invocation_params.dir, config.option.basetemp or ".pytest-tmp")
    root.mkdir(parents=True, exist_ok=True)
    os.environ[_SHARED] = config._rlvr_shared_cache = tempfile.mkdtemp(prefix="rlvr-test-cache-", dir=root)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = getattr(config, "_rlvr_shared_cache", None)
    if shared:
        shutil.rmtree(shared, ignore_errors=True)
        os.environ.pop(_SHARED, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")
    parser.addoption(
        "--runscale",
        action="store_true",
        help="also run the tests marked vllm or distributed (a vLLM server, torchrun ranks): "
        "`make test-scale`, which CI runs after `make test`",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = config.getoption("--runslow")
    scale = slow or config.getoption("--runscale")
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_scale = pytest.mark.skip(reason="vLLM / torchrun: run with --runscale (make test-scale)")
    for item in items:
        if "slow" in item.keywords and not slow:
            item.add_marker(skip_slow)
        elif ("vllm" in item.keywords or "distributed" in item.keywords) and not scale:
            item.add_marker(skip_scale)
