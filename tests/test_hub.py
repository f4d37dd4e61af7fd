"""Online use: Hub ids download as in transformers unless downloads are off (rlvr.hub); errors say
how to allow them; a device torch cannot use is one clear error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlvr import hub
from rlvr.errors import RlvrError


def test_importing_rlvr_leaves_hub_downloads_on() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    code = "import os, rlvr.api, rlvr.cli; print(os.environ.get('HF_HUB_OFFLINE'))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["None"]


@pytest.fixture
def fresh_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """No offline setting, no probe made yet; whatever the test switches on is undone after it."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "_probed", False)
    monkeypatch.setattr(hub, "_unreachable", None)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", huggingface_hub.constants.HF_HUB_OFFLINE)
    try:
        import datasets.config
    except ImportError:  # an optional extra
        return
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", datasets.config.HF_HUB_OFFLINE)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", datasets.config.HF_DATASETS_OFFLINE)


def test_an_unreachable_hub_means_the_cache_alone_and_says_so(fresh_hub, monkeypatch) -> None:
    import huggingface_hub.constants

    from rlvr.models.loading import load_tokenizer

    calls = []
    monkeypatch.setattr(hub, "_probe", lambda: calls.append(1) or "gaierror: Name or service not known")
    with pytest.raises(RlvrError) as info:
        load_tokenizer("no-such-org/no-such-model")
    message = " ".join(str(info.value).split())
    assert (
        "cannot be reached from this machine" in message
        and "hf download no-such-org/no-such-model" in message
    )
    assert os.environ["HF_HUB_OFFLINE"] == "1" and huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert hub.hub_offline() and calls == [1]  # probed once per process


def test_the_bundled_model_never_touches_the_network(fresh_hub, monkeypatch) -> None:
    import socket

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # as a user's process is
    from rlvr.models.loading import load_model, load_tokenizer

    tried = []

    def refuse(*args, **kwargs):
        tried.append(args[:1])
        raise OSError("network use in a test")

    for name in ("getaddrinfo", "create_connection"):
        monkeypatch.setattr(socket, name, refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    load_tokenizer("tiny-random")
    load_model("tiny-random")
    assert tried == [] and not hub._probed and "HF_HUB_OFFLINE" not in os.environ


def test_a_reachable_hub_downloads(fresh_hub, monkeypatch) -> None:
    from rlvr.models.loading import _offline

    monkeypatch.setattr(hub, "_probe", lambda: None)
    assert _offline("no-such-org/no-such-model") is False  # local_files_only=False: transformers downloads
    assert "HF_HUB_OFFLINE" not in os.environ
    assert "hf auth login" in hub.downloads_hint("no-such-org/no-such-model")


def test_offline_by_setting_says_how_to_allow_downloads(monkeypatch) -> None:
    from rlvr.data.hf_source import load_hf_dataset
    from rlvr.models.loading import load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_unreachable", None)
    with pytest.raises(RlvrError, match="set HF_HUB_OFFLINE=0, to let rlvr download it"):
        load_tokenizer("no-such-org/no-such-model")
    pytest.importorskip("datasets")
    with pytest.raises(RlvrError, match="set HF_HUB_OFFLINE=0, to let rlvr download it"):
        load_hf_dataset("no-such-org/no-such-dataset")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this torch has a usable GPU")
def test_cuda_on_a_cpu_only_torch_is_one_clear_error() -> None:
    from rlvr.models.loading import load_model

    with pytest.raises(RlvrError) as info:  # before any weights load; the CLI prints it alone, exit 2
        load_model("tiny-random", device="cuda")
    message = str(info.value)
    assert "model.device='cuda'" in message and "CPU-only build without CUDA" in message
    assert "GPU install" in message
    with pytest.raises(RlvrError, match="model.device='gpu' is not a torch device"):
        load_model("tiny-random", device="gpu")
