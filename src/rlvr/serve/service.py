"""The state behind ``rlvr serve``: sessions, training models, sampling sessions and futures.

Every long operation (creating a model, forward/backward, an optimizer step, saving, loading,
sampling) is queued and answered with a future, as the Tinker protocol has it. One worker thread
runs the queue in arrival order: the SDK posts a training client's requests in its sequence order,
so forward/backward → optim_step order holds per client, and compute never runs twice at once on
the CPU. Sample requests that wait together for the same weights and parameters run as one batch.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import RlvrError
from rlvr.serve import checkpoints as ckpt
from rlvr.serve.replicas import announce, rank_and_world
from rlvr.serve.sampling import BASE, Sampler, SampleSpec
from rlvr.serve.saving import CheckpointRequests
from rlvr.serve.training import AdamParams, TrainedModel
from rlvr.serve.wire import (
    WireError,
    decode_forward_backward,
    encode_forward_backward_output,
    encode_sample_response,
    prompt_tokens,
)

log = logging.getLogger("rlvr.serve")


@dataclass
class ServeSettings:
    model: str = "smollm2-135m-instruct"
    root: Path = Path("runs/serve")
    full: bool = False  # train every weight, whatever LoRA rank a client asks for
    lora_alpha: float = 32.0
    max_models: int = 4
    max_snapshots: int = 3
    max_request_tokens: int = 1_000_000
    max_new_tokens: int = 2048
    max_samples: int = 256
    micro_batch: int = 16
    sample_batch_wait_s: float = 0.05
    seed: int = 0
    engine: str = "hf"  # the sampler's engine: hf (in process) or vllm (a vLLM server, make vllm)
    vllm_url: str | None = None  # with engine vllm: a running rlvr vLLM server instead of starting one


@dataclass
class Future:
    request_id: str
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | bytes | None = None  # JSON, or a protobuf message's bytes
    error: dict[str, str] | None = None


@dataclass
class Task:
    future: Future
    run: Callable[[], dict[str, Any] | bytes]
    name: str = "request"
    batch_key: Any = None  # sample tasks with equal keys run together
    sample: tuple[str, list[int], SampleSpec, bool] | None = None


class Service(CheckpointRequests):
    def __init__(self, settings: ServeSettings) -> None:
        from rlvr.models.loading import load_model, load_tokenizer, resolve_model_path

        self.settings = settings
        self.path = resolve_model_path(settings.model)
        self.names = {settings.model, self.path}
        self.tokenizer = load_tokenizer(self.path)
        self._load_model = lambda: load_model(self.path)
        self.sampler = Sampler(
            self._load_model(),
            self.tokenizer,
            settings.max_snapshots,
            settings.seed,
            engine=_engine(settings, self.path),
        )
        self.sessions: set[str] = set()
        self.models: dict[str, TrainedModel] = {}
        self.sampling: dict[str, str] = {}  # sampling session id → snapshot id (or a sampler dir)
        self.futures: dict[str, Future] = {}
        self.queue: deque[Task] = deque()
        self.cond = threading.Condition()
        self.lock = threading.Lock()
        self.stopping = False
        self.worker = threading.Thread(target=self._work, name="rlvr-serve-worker", daemon=True)
        self.worker.start()

    # ---- sessions and lookups (answered at once) ----
    def create_session(self) -> str:
        session_id = f"s{uuid.uuid4().hex[:12]}"
        with self.lock:
            self.sessions.add(session_id)
        return session_id

    def finish_session(self, session_id: str) -> None:
        with self.lock:
            self.sessions.discard(session_id)
            dropped = [m for m, model in self.models.items() if model.session_id == session_id]
            for model_id in dropped:
                del self.models[model_id]
        if dropped and rank_and_world()[1] > 1:  # the followers drop them too, in the queue's order
            self.submit(lambda: announce("drop", dropped) or {}, name="drop models")

    def model(self, model_id: Any) -> TrainedModel:
        with self.lock:
            found = self.models.get(model_id) if isinstance(model_id, str) else None
        if found is None:
            raise WireError(f"no training model {model_id!r} on this server")
        return found

    def check_base(self, base_model: Any) -> None:
        if base_model is not None and base_model not in self.names:
            raise WireError(
                f"base_model {base_model!r} is not served here: this server serves {self.path} "
                f"(start rlvr serve --model NAME for another)"
            )

    def info(self, model_id: Any) -> dict[str, Any]:
        model = self.model(model_id)
        arch = type(self.sampler.model).__name__
        return {
            "type": "get_info",
            "model_id": model.model_id,
            "model_data": {"arch": arch, "model_name": self.path, "tokenizer_id": self.path},
            "is_lora": model.lora_rank > 0,
            "lora_rank": model.lora_rank or None,
            "model_name": self.path,
        }

    def sampler_info(self, sampling_session_id: str) -> dict[str, Any]:
        with self.lock:
            snapshot = self.sampling.get(sampling_session_id)
        if snapshot is None:
            raise WireError(f"no sampling session {sampling_session_id!r}")
        info = {"sampler_id": sampling_session_id, "base_model": self.path}
        return {**info, "model_path": snapshot} if snapshot.startswith("tinker://") else info

    def create_sampling_session(self, body: dict[str, Any]) -> str:
        path = body.get("model_path")
        if path is not None:
            ckpt.resolve(self.settings.root, path, "sampler_weights")
            snapshot = path
        else:
            self.check_base(body.get("base_model"))
            snapshot = BASE
        return self._new_sampling_session(snapshot)

    def _new_sampling_session(self, snapshot: str) -> str:
        sampling_id = f"p{uuid.uuid4().hex[:12]}"
        with self.lock:
            self.sampling[sampling_id] = snapshot
        return sampling_id

    # ---- futures ----
    def submit(self, run: Callable[[], dict[str, Any] | bytes], **kw: Any) -> Future:
        future = Future(f"r{uuid.uuid4().hex}")
        with self.lock:
            self.futures[future.request_id] = future
        with self.cond:
            self.queue.append(Task(future, run, **kw))
            self.cond.notify()
        return future

    def wait(self, request_id: Any, timeout: float) -> Future | None:
        with self.lock:
            future = self.futures.get(request_id) if isinstance(request_id, str) else None
        if future is None:
            raise WireError(f"no request {request_id!r} on this server")
        if not future.done.wait(timeout):
            return None
        with self.lock:
            self.futures.pop(future.request_id, None)
        return future

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                task = self.queue.popleft()
                batch = [task]
                if task.batch_key is not None:  # the sample requests waiting for the same weights
                    # a client sends a batch's requests one POST at a time: give the rest a moment
                    # to arrive (a decode step reads every weight whatever the batch size)
                    deadline = time.monotonic() + self.settings.sample_batch_wait_s
                    while (left := deadline - time.monotonic()) > 0 and not self.stopping:
                        self.cond.wait(left)
                    rest = [t for t in self.queue if t.batch_key == task.batch_key]
                    for other in rest:
                        self.queue.remove(other)
                    batch += rest
            start = time.perf_counter()
            if task.sample is not None:
                self._run_samples(batch)
            else:
                self._finish(task.future, task.run)
            log.info(
                "%s%s: %.2f s",
                task.name,
                f" x{len(batch)}" if len(batch) > 1 else "",
                time.perf_counter() - start,
            )

    @staticmethod
    def _outcome(run: Callable[[], Any], name: str) -> tuple[Any, dict[str, str] | None]:
        """``run()``'s result, or the error the client gets instead (the server lives on)."""
        try:
            return run(), None
        except WireError as err:
            return None, {"error": str(err), "category": "user"}
        except Exception as err:  # a bug or resource failure
            log.error("%s failed:\n%s", name, traceback.format_exc())
            return None, {"error": f"internal error: {type(err).__name__}: {err}", "category": "server"}

    def _finish(self, future: Future, run: Callable[[], dict[str, Any] | bytes]) -> None:
        future.result, future.error = self._outcome(run, f"request {future.request_id}")
        future.done.set()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.sampler.close()

    # ---- training ----
    def create_model(self, body: dict[str, Any]) -> Future:
        self.check_base(body.get("base_model"))
        session_id, seq = body.get("session_id"), body.get("model_seq_id")
        model_id = self._new_model_id(session_id, seq)
        lora = body.get("lora_config") or {}
        if not isinstance(lora, dict):
            raise WireError("create_model: lora_config must be an object")

        def build() -> dict[str, Any]:
            announce("build", model_id, session_id, lora)
            self._build(model_id, session_id, lora)
            return {"model_id": model_id, "type": "create_model"}

        return self.submit(build, name="create_model")

    def _new_model_id(self, session_id: Any, seq: Any) -> str:
        with self.lock:
            if session_id not in self.sessions:
                raise WireError(f"no session {session_id!r} on this server")
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise WireError(f"model_seq_id must be a non-negative integer, got {seq!r}")
            model_id = f"{session_id}:train:{seq}"
            if model_id in self.models:
                raise WireError(f"model {model_id} exists")
        self._check_room()
        return model_id

    def _check_room(self) -> None:
        """Refused early (at submission) and again where the model is built (in the worker: two
        creations submitted together cannot both pass)."""
        with self.lock:
            if len(self.models) >= self.settings.max_models:
                raise WireError(
                    f"this server holds {self.settings.max_models} training models already, its limit "
                    "(ServeSettings.max_models); a finished session frees its models"
                )

    def _build(self, model_id: str, session_id: str, lora: dict[str, Any]) -> TrainedModel:
        from rlvr.config.schema import LoraConfig
        from rlvr.models.lora import apply_lora

        self._check_room()
        rank = lora.get("rank", 32)
        if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= 1024:
            raise WireError(f"lora_config.rank must be an integer from 1 to 1024, got {rank!r}")
        flags = {key: lora.get(key, True) for key in ("train_attn", "train_mlp", "train_unembed")}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise WireError(f"lora_config.{key} must be true or false, got {value!r}")
        rank = 0 if self.settings.full else rank
        policy = self._load_model()
        if rank > 0:
            targets = []
            if flags["train_attn"]:
                targets += ["q_proj", "k_proj", "v_proj", "o_proj"]
            if flags["train_mlp"]:
                targets += ["gate_proj", "up_proj", "down_proj"]
            tied = getattr(policy.config, "tie_word_embeddings", False)
            if flags["train_unembed"] and not tied:  # a tied head shares the embedding's weight
                targets.append("lm_head")
            if not targets:
                raise WireError(
                    "lora_config trains nothing (train_attn, train_mlp and train_unembed are all off)"
                )
            seed = lora.get("seed")
            torch.manual_seed(
                seed if isinstance(seed, int) and not isinstance(seed, bool) else self.settings.seed
            )
            policy = apply_lora(
                policy, LoraConfig(r=rank, alpha=self.settings.lora_alpha, target_modules=targets)
            )
        model = TrainedModel(model_id, policy, rank, self.settings.micro_batch)
        model.session_id = session_id
        model.lora_config = dict(lora)  # kept in its checkpoints: a load rebuilds the same adapters
        with self.lock:
            self.models[model_id] = model
        return model

    def forward_backward(self, body: bytes, forward_only: bool | None = None) -> Future:
        fb = decode_forward_backward(body, self.settings.max_request_tokens)
        if forward_only is not None:
            fb.forward_only = forward_only
        model = self.model(fb.model_id)

        def run() -> bytes:
            announce("forward_backward", model.model_id, fb)
            outputs, metrics = model.forward_backward(fb)
            return encode_forward_backward_output(outputs, metrics, fb.loss_fn)

        return self.submit(run, name=f"forward_backward({fb.loss_fn}, {len(fb.data)} datums)")

    def optim_step(self, body: dict[str, Any]) -> Future:
        model = self.model(body.get("model_id"))
        adam = AdamParams.from_json(body.get("adam_params", {}))
        if body.get("optimizer_params") is not None:
            raise WireError("optim_step: only AdamW (adam_params) is supported by rlvr serve")

        def run() -> dict[str, Any]:
            announce("optim_step", model.model_id, adam)
            return {"metrics": model.optim_step(adam), "type": "optim_step"}

        return self.submit(run, name="optim_step")

    # ---- sampling ----
    def sample(self, body: dict[str, Any]) -> tuple[Future, int]:
        spec = SampleSpec.from_request(body, self.settings.max_new_tokens, self.settings.max_samples)
        prompt = prompt_tokens(body.get("prompt"), self.settings.max_request_tokens)
        vocab = self.sampler.model.get_output_embeddings().weight.shape[0]
        if not prompt or min(prompt) < 0 or max(prompt) >= vocab:
            raise WireError(f"sample: the prompt is empty or has a token id outside [0, {vocab})")
        with self.lock:
            snapshot = self.sampling.get(body.get("sampling_session_id"))
        if snapshot is None:
            path = body.get("model_path")
            if path is not None:
                ckpt.resolve(self.settings.root, path, "sampler_weights")  # it must exist
                snapshot = path
            else:
                self.check_base(body.get("base_model"))
                if body.get("base_model") is None:
                    raise WireError(f"sample: no sampling session {body.get('sampling_session_id')!r}")
                snapshot = BASE
        with_prompt = bool(body.get("prompt_logprobs", False))
        key = None if spec.seed is not None or with_prompt else (snapshot, spec)
        future = self.submit(
            lambda: b"",  # unused: sample tasks run in batches (_run_samples)
            name="sample",
            batch_key=key,
            sample=(snapshot, prompt, spec, with_prompt),
        )
        return future, spec.num_samples

    def _snapshot(self, snapshot: str) -> str:
        """A disk sampler checkpoint is loaded into memory on first use."""
        if snapshot == BASE or not snapshot.startswith("tinker://") or snapshot in self.sampler.snapshots:
            return snapshot
        _, directory = ckpt.resolve(self.settings.root, snapshot, "sampler_weights")
        names = list(self.sampler.base)
        self.sampler.add(snapshot, ckpt.load_sampler_weights(directory, names))
        return snapshot

    def _run_samples(self, batch: list[Task]) -> None:
        """One engine call for the batch's prompts; each request gets its own response (or the
        batch's error)."""
        snapshot, _, spec, with_prompt = batch[0].sample  # type: ignore[misc]

        def run_all() -> list[bytes]:
            snap = self._snapshot(snapshot)
            prompts = [t.sample[1] for t in batch]  # type: ignore[index]
            groups = self.sampler.sample(snap, prompts, spec)
            logprobs = self.sampler.prompt_logprobs(snap, prompts[0]) if with_prompt else None
            return [encode_sample_response(group, logprobs) for group in groups]

        results, error = self._outcome(run_all, f"sample batch of {len(batch)}")
        for i, task in enumerate(batch):
            task.future.result, task.future.error = (results[i] if results else None), error
            task.future.done.set()


def _engine(settings: ServeSettings, path: str) -> Callable[[Any, Any, int], Any] | None:
    """How the sampler builds its engine: None for rlvr's HF engine; for ``vllm``, rlvr's vLLM engine
    on a server started here (``make vllm``'s environment, its log under ``--root``) or reached at
    ``vllm_url``, built as ``rlvr train`` builds it with ``rollout.engine: vllm``."""
    if settings.engine == "hf":
        return None
    if settings.engine != "vllm":
        raise RlvrError(f"rlvr serve --engine: hf or vllm, not {settings.engine!r}")

    def build(model: Any, tokenizer: Any, seed: int) -> Any:
        from rlvr.config import load_config
        from rlvr.rollout.from_config import build_vllm_engine

        overrides = [f"model.name={path}", "rollout.engine=vllm", f"seed={seed}"]
        if settings.vllm_url:
            overrides.append(f"rollout.vllm.url={settings.vllm_url}")
        settings.root.mkdir(parents=True, exist_ok=True)
        return build_vllm_engine(load_config(None, overrides), model, tokenizer, settings.root)

    return build
