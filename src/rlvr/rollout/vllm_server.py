"""A vLLM generation server for rlvr: token ids in, token ids and sampling logprobs out.

This file runs in vLLM's own environment (``make vllm`` builds ``.venv-vllm``), started by
:mod:`rlvr.rollout.vllm_process` as ``.venv-vllm/bin/python <this file> ...``. It imports only the
standard library, torch and vllm: nothing of rlvr and none of rlvr's dependencies, whose pins
(transformers, above all) differ from vLLM's. ``tests/test_rollout_vllm.py`` checks that.

HTTP on a loopback port (0: chosen by the OS; the port is written to ``--ready-file`` once the
model is loaded). Requests and replies are JSON; every reply carries the policy ``version`` the
server samples from.

- ``GET /health``: status, version, model, dtype, weight transfer.
- ``POST /generate``: prompts as token ids, ``n``, ``max_new_tokens``, ``temperature``, ``top_p``,
  ``stop_token_ids``, ``stop`` (strings), ``ignore_eos``, ``seed`` → per prompt, ``n`` completions
  with ``token_ids``, ``logprobs`` (of each sampled token under the temperature-scaled
  distribution) and ``finish_reason``; and per prompt ``cached_tokens``, how many of its tokens
  vLLM's prefix cache supplied. Nothing is tokenized or detokenized for the caller.
- ``POST /update_weights``: ``version`` plus the weights, loaded through vLLM's weight-transfer
  API (``start_weight_update`` → ``update_weights`` → ``finish_weight_update``, which reloads
  layer by layer and redoes the per-layer processing such as the CPU's packed GEMM weights). The
  transport is ``shm`` (a ``torch.save`` file in /dev/shm, the CPU path, registered here as a
  weight-transfer backend of vLLM) or ``nccl`` (vLLM's own NCCL backend, the trainer joining with
  an ``ncclUniqueId``; written for GPUs and not run on one yet). Generation is paused for the
  update (one lock serialises the engine) and the prefix cache is reset after it, so no request
  ever mixes old and new weights.
- ``POST /load_lora``: ``version`` plus ``path``, a PEFT adapter directory (``adapter_config.json``
  and ``adapter_model.safetensors``) on this host: vLLM loads it (``add_lora``) as the adapter every
  later generate samples through, on top of the current weights, and the adapter it replaces is
  removed. Needs a server started with ``--max-lora-rank``. Generation is paused for the swap as for
  a weight update; a full weight update removes the adapter (the new weights are the whole policy).
- ``POST /init_weight_transfer``: the NCCL rendezvous (``init_info`` as vLLM takes it).
- ``POST /shutdown``: reply, then exit.

The server exits by itself when the process that started it goes away (``--parent-pid``), so an
rlvr killed with SIGKILL leaves no server behind.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SHM_BACKEND = "rlvr_shm"


def _register_shm_backend() -> None:
    """Register the ``rlvr_shm`` weight-transfer backend with vLLM's factory: the trainer writes
    its named parameters with ``torch.save`` to a file (in /dev/shm: memory, not disk), the worker
    maps the file and feeds the tensors to the model's own ``load_weights`` between vLLM's
    layerwise-reload calls, exactly as vLLM's NCCL backend does with the tensors it receives.
    The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so registering here
    reaches the worker."""
    import torch
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload,
        initialize_layerwise_reload,
    )

    @dataclass
    class ShmInitInfo(WeightTransferInitInfo):
        pass

    @dataclass
    class ShmUpdateInfo(WeightTransferUpdateInfo):
        path: str

    class ShmWeightTransferEngine(WeightTransferEngine[ShmInitInfo, ShmUpdateInfo]):
        init_info_cls = ShmInitInfo
        update_info_cls = ShmUpdateInfo

        def init_transfer_engine(self, init_info: ShmInitInfo) -> None:
            pass  # nothing to connect: every update names its file

        def start_weight_update(self) -> None:
            initialize_layerwise_reload(self.model)

        def receive_weights(self, update_info: ShmUpdateInfo) -> None:
            weights = torch.load(update_info.path, map_location="cpu", mmap=True, weights_only=True)
            self.model.load_weights(((name, t.to(self.device)) for name, t in weights.items()))

        def finish_weight_update(self) -> None:
            finalize_layerwise_reload(self.model, self.model_config)
            _reprocess_tied_layers(self.model)

        def update_weights(self, update_info: dict[str, Any]) -> None:
            self.receive_weights(self.parse_update_info(update_info))  # no device to synchronize on CPU

        def shutdown(self) -> None:
            pass

    if SHM_BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(SHM_BACKEND, ShmWeightTransferEngine)


def _reprocess_tied_layers(model) -> None:
    """Redo the after-loading processing of layers whose weight is another layer's (a tied LM head).

    vLLM's layerwise reload processes the layer that loaded a tensor, not the layers tied to it
    (its documented limitation 2). On CPU that processing packs the weight for the GEMM kernel, so
    a tied LM head kept scoring with the packed copy of the *old* embedding: after an update, every
    logprob was off by up to ~1 while everything else matched (tests/test_rollout_vllm.py)."""
    by_storage: dict[int, list] = {}
    for module in model.modules():
        weight = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if weight is not None and getattr(module, "quant_method", None) is not None and not weight.is_meta:
            by_storage.setdefault(weight.data_ptr(), []).append(module)
    for modules in by_storage.values():
        if len(modules) > 1:
            for module in modules:
                module.quant_method.process_weights_after_loading(module)


def _lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts for ``max_lora_rank`` (a fixed list) that holds ``rank``."""
    from typing import get_args

    from vllm.config.lora import MaxLoRARanks

    allowed = sorted(get_args(MaxLoRARanks))
    fits = [r for r in allowed if r >= rank]
    if not fits:
        raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({allowed[-1]})")
    return fits[0]


class Server:
    """The vLLM engine behind one lock: a weight update waits for a running generate and the next
    generate waits for the update (pause, load, resume)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vllm import LLM
        from vllm.config import WeightTransferConfig

        self.args = args
        self.lock = threading.Lock()
        self.version = args.version
        self.transfer = args.weight_transfer
        if self.transfer == "shm":
            _register_shm_backend()
        backend = SHM_BACKEND if self.transfer == "shm" else "nccl"
        kwargs: dict[str, Any] = dict(
            model=args.model,
            dtype=args.dtype,
            seed=args.seed,
            max_model_len=args.max_model_len,
            enforce_eager=args.enforce_eager,
            # logprobs of the distribution the token was sampled from after temperature (and top-p,
            # when below 1): the temperature-scaled logprobs the trainer recomputes when top_p = 1
            logprobs_mode="processed_logprobs",
            weight_transfer_config=WeightTransferConfig(backend=backend),
        )
        if args.kv_cache_bytes:
            kwargs["kv_cache_memory_bytes"] = args.kv_cache_bytes
        if args.gpu_memory_utilization:
            kwargs["gpu_memory_utilization"] = args.gpu_memory_utilization
        if args.max_lora_rank:  # one adapter at a time: the policy's current one
            kwargs.update(enable_lora=True, max_lora_rank=_lora_rank(args.max_lora_rank), max_loras=1)
        kwargs.update(json.loads(args.llm_kwargs or "{}"))
        self.llm = LLM(**kwargs)
        self.dtype = str(self.llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch.")
        self.lora = None  # the LoRARequest of the adapter generation runs through (None: the base)
        self.lora_ids = 0  # vLLM caches adapters by integer id: each load gets a new one
        self.shm_dirs = {"/dev/shm"}  # where trainers hand over weights and adapters (remove_leftovers)
        if self.transfer == "shm":
            self.llm.init_weight_transfer_engine({"init_info": {}})

    # ----------------------------------------------------------------------------- routes
    def health(self) -> dict[str, Any]:
        import vllm

        return {
            "status": "ok",
            "version": self.version,
            "model": self.args.model,
            "dtype": self.dtype,
            "weight_transfer": self.transfer,
            "max_lora_rank": self.args.max_lora_rank,
            "lora": None if self.lora is None else self.lora.lora_name,
            "vllm": vllm.__version__,
            "pid": os.getpid(),
        }

    def generate(self, req: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams

        prompts: list[list[int]] = req["prompts"]
        images = req.get("images") or [[] for _ in prompts]  # per prompt: base64 PNG images
        if len(images) != len(prompts):
            raise ValueError("'images' must have one list per prompt")
        n = int(req.get("n", 1))
        seed = req.get("seed")
        requests, params = [], []
        for index, (ids, pictures) in enumerate(zip(prompts, images)):
            if not ids or not all(isinstance(t, int) for t in ids):
                raise ValueError(f"prompt {index} must be a non-empty list of token ids")
            request: dict[str, Any] = {"prompt_token_ids": ids}
            if pictures:  # vLLM expands each image placeholder in the ids itself
                request["multi_modal_data"] = {"image": [_image(p) for p in pictures]}
            requests.append(request)
            params.append(
                SamplingParams(
                    n=n,
                    temperature=float(req.get("temperature", 1.0)),
                    top_p=float(req.get("top_p", 1.0)),
                    max_tokens=int(req["max_new_tokens"]),
                    stop_token_ids=list(req.get("stop_token_ids") or []),
                    stop=list(req.get("stop") or []) or None,
                    include_stop_str_in_output=True,
                    ignore_eos=bool(req.get("ignore_eos", False)),
                    # children of a prompt get seed + 0 .. n-1 (vLLM), so prompts step by n
                    seed=None if seed is None else int(seed) + index * n,
                    logprobs=0,  # the sampled token's own logprob only
                    detokenize=bool(req.get("stop")),  # stop strings need the text; nothing else does
                )
            )
        with self.lock:
            outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora)
            version = self.version
        groups = []
        for out in outputs:
            group = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                logprobs = [entry[token].logprob for token, entry in zip(c.token_ids, c.logprobs)]
                group.append(
                    {
                        "token_ids": list(c.token_ids),
                        "logprobs": logprobs,
                        "finish_reason": c.finish_reason,
                        "stop_reason": c.stop_reason,
                    }
                )
            groups.append(group)
        # prompt tokens of each request served from vLLM's prefix cache (multi-turn reuse)
        cached = [int(out.num_cached_tokens or 0) for out in outputs]
        lengths = [len(out.prompt_token_ids or []) for out in outputs]  # after vLLM's image expansion
        return {"version": version, "outputs": groups, "cached_tokens": cached, "prompt_lengths": lengths}

    def update_weights(self, req: dict[str, Any]) -> dict[str, Any]:
        version = int(req["version"])
        began = time.perf_counter()
        if req.get("transport", self.transfer) != self.transfer:
            raise ValueError(f"this server was started for {self.transfer} weight transfer")
        if self.transfer == "shm":
            update_info = {"path": req["path"]}
            self.shm_dirs.add(os.path.dirname(req["path"]))
        else:
            update_info = {k: req[k] for k in ("names", "dtype_names", "shapes")}
        with self.lock:  # no generate runs while the weights change
            self.llm.start_weight_update()
            self.llm.update_weights({"update_info": update_info})
            self.llm.finish_weight_update(weight_version=str(version))
            self.llm.reset_prefix_cache()  # cached keys and values belong to the old weights
            # and so do a VLM's cached image embeddings (vLLM reuses them across requests by image)
            self.llm.llm_engine.reset_encoder_cache()
            if self.lora is not None:  # new full weights are the whole policy: no adapter on top
                self.llm.llm_engine.remove_lora(self.lora.lora_int_id)
                self.lora = None
            self.version = version
        seconds = time.perf_counter() - began
        print(f"weight update to version {version} ({self.transfer}) took {seconds:.2f} s", flush=True)
        return {"version": version, "seconds": seconds}

    def load_lora(self, req: dict[str, Any]) -> dict[str, Any]:
        from vllm.lora.request import LoRARequest

        version, path = int(req["version"]), str(req["path"])
        if not self.args.max_lora_rank:
            raise ValueError("this server was started without LoRA: start it with --max-lora-rank R")
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise ValueError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
        self.shm_dirs.add(os.path.dirname(path.rstrip("/")))
        began = time.perf_counter()
        with self.lock:  # no generate runs while the adapter changes
            self.lora_ids += 1
            lora = LoRARequest(f"policy-v{version}", self.lora_ids, path)
            if not self.llm.llm_engine.add_lora(lora):  # loads it now: a bad adapter fails here
                raise RuntimeError(f"vLLM did not load the adapter in {path}")
            if self.lora is not None:
                self.llm.llm_engine.remove_lora(self.lora.lora_int_id)
            self.lora, self.version = lora, version
        seconds = time.perf_counter() - began
        print(f"adapter of version {version} loaded in {seconds:.2f} s", flush=True)
        return {"version": version, "seconds": seconds}

    def init_weight_transfer(self, req: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.llm.init_weight_transfer_engine({"init_info": req["init_info"]})
        return {"version": self.version}


def _image(encoded: str):
    """A PIL image from the trainer's base64 PNG."""
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(encoded)), formats=("PNG",)).convert("RGB")


def _handler(server: Server, stop: threading.Event):
    routes = {
        "/generate": server.generate,
        "/update_weights": server.update_weights,
        "/load_lora": server.load_lora,
        "/init_weight_transfer": server.init_weight_transfer,
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # one line per request is noise
            pass

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, server.health())
            else:
                self._reply(404, {"error": f"no route {self.path}", "version": server.version})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as err:
                self._reply(400, {"error": f"bad JSON: {err}", "version": server.version})
                return
            if self.path == "/shutdown":
                self._reply(200, {"status": "stopping", "version": server.version})
                stop.set()
                return
            route = routes.get(self.path)
            if route is None:
                self._reply(404, {"error": f"no route {self.path}", "version": server.version})
                return
            try:
                self._reply(200, route(req))
            except (KeyError, ValueError, TypeError) as err:
                self._reply(400, {"error": f"{type(err).__name__}: {err}", "version": server.version})
            except Exception as err:  # the client raises it with the server's log tail
                traceback.print_exc()
                self._reply(500, {"error": f"{type(err).__name__}: {err}", "version": server.version})

    return Handler


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent:
            print(f"parent process {parent} is gone: exiting", flush=True)
            stop.set()


def remove_leftovers(directories: set[str], pid: int) -> list[str]:
    """Remove the hand-over files and adapter directories that trainers named after this server
    (``rlvr-vllm-s<pid>-*``: the trainer removes its own, unless it was killed while writing one);
    returns what was removed."""
    import glob
    import shutil

    removed = []
    for directory in sorted(directories):
        for path in glob.glob(os.path.join(directory, f"rlvr-vllm-s{pid}-*")):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            removed.append(path)
    return removed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--kv-cache-bytes", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--max-lora-rank", type=int, default=0, help="serve LoRA adapters up to this rank (0: no LoRA)"
    )
    p.add_argument("--weight-transfer", choices=("shm", "nccl"), default="shm")
    p.add_argument("--llm-kwargs", default=None, help="JSON object of further vllm.LLM arguments")
    p.add_argument("--version", type=int, default=0, help="policy version of the weights in --model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port chosen by the OS")
    p.add_argument("--ready-file", default=None, help="where to write {port, pid} once serving")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # the engine core and its worker run in this process: the shm backend registered here is the
    # one the worker uses, and there is one process to stop
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    stop = threading.Event()
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()
    server = Server(args)
    httpd = ThreadingHTTPServer((args.host, args.port), _handler(server, stop))
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp"
        with open(tmp, "w") as f:
            json.dump({"port": port, "pid": os.getpid()}, f)
        os.replace(tmp, args.ready_file)
    print(f"rlvr vLLM server ready on http://{args.host}:{port} (pid {os.getpid()})", flush=True)
    stop.wait()
    httpd.shutdown()
    remove_leftovers(server.shm_dirs, os.getpid())
    print("rlvr vLLM server stopped", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # vLLM's in-process engine has nothing to flush; its teardown can hang at exit


if __name__ == "__main__":
    main()
