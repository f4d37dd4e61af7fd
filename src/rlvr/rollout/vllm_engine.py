"""The vLLM rollout engine: generation in a vLLM server process, weights pushed after every update.

:class:`VLLMEngine` is a :class:`~rlvr.rollout.base.RolloutEngine`: token ids in, token ids and the
logprob of every sampled token out (vLLM's ``processed_logprobs``: under the temperature-scaled
distribution, as the HF engine and the trainer compute them), with ``finish_reason`` "stop" (a stop
token, kept as the last token), "stop_string" (the token completing a stop string, kept) or
"length". Nothing is re-tokenized; ``text`` is decoded here for rewards, as the HF engine does.

:class:`VLLMWeightSync` is the :class:`~rlvr.train.loop.weight_sync.WeightSync` for it: after each update
it sends the learner's named parameters (HF names; vLLM's ``load_weights`` maps them onto its
fused layers) and the version; the server pauses generation, loads, resets its prefix cache and
resumes, and stamps every later reply with that version. A model sharded with FSDP2 (its
parameters DTensor shards) is pushed whole: each parameter is gathered just before it is sent
(:func:`_whole`, a collective: every rank pushes the same parameters in the same order, each to its
own server), so no rank holds more than one gathered parameter at a time on its device.

LoRA (``model.lora.r > 0``; ``rollout.vllm.lora_sync``): ``adapter`` (the default) writes only the
adapters, in PEFT's format, to a directory in ``rollout.vllm.shm_dir`` and the server loads them with
vLLM's ``add_lora`` as the adapter of every later request (a few MB instead of the whole model; the
server's base weights never change). ``merged`` sends the base weights with the adapters added
(:func:`rlvr.models.lora.merged_weights`) through the transport below, for a server without LoRA.

Transports of full weights (``rollout.vllm.weight_transfer``):

- ``shm`` (CPU, same host): the parameters are written with ``torch.save`` to a file in
  ``/dev/shm`` (memory), the server maps and loads it, the file is removed. Verified on CPU.
- ``nccl`` (GPU): vLLM's NCCL weight-transfer backend; this process joins its NCCL group as rank 0
  with an ``ncclUniqueId`` (torch only, no vLLM here) and broadcasts every parameter while the
  server receives. Written, not yet run on a GPU.

Sampling seeds: each call draws one seed from :attr:`generator` (checkpointed with the run), so a
resumed run asks vLLM for the same seeds.
"""

from __future__ import annotations

import base64
import io
import itertools
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import RlvrError
from rlvr.models.lora import has_adapters, merged_weights
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.vllm_process import VLLMServer, VLLMServerError
from rlvr.vision.prompt import copy_prompt, vision_of


class VLLMEngine:
    """Generates through a vLLM server (started by rlvr or reached by URL)."""

    # multi-turn episodes send the whole conversation each turn; vLLM's automatic prefix cache
    # supplies the KV blocks it already holds (rlvr.rollout.episodes does not warn about it)
    caches_prefixes = True

    def __init__(
        self,
        server: VLLMServer,
        tokenizer,
        stop_token_ids: list[int],
        seed: int = 0,
        weight_transfer: str = "shm",
        shm_dir: str = "/dev/shm",
        lora_sync: str = "adapter",
    ) -> None:
        self.server = server
        self.tokenizer = tokenizer
        self.stop_token_ids = sorted(set(stop_token_ids))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.weight_transfer = weight_transfer
        self.shm_dir = Path(shm_dir)
        self.lora_sync = lora_sync
        self._adapter_dir: Path | None = None  # the adapter the server holds (vLLM may read it again)
        self.lock = threading.RLock()  # a weight push and a generate call never interleave here either
        self._nccl: _NcclSender | None = None
        self._pushes = itertools.count()
        health = server.health()
        self.policy_version = int(health["version"])
        # hand-over files are named after the server's process, which removes any left behind by a
        # trainer killed while writing one (vllm_server.remove_leftovers)
        self._shm_prefix = f"rlvr-vllm-s{health.get('pid', 0)}-{os.getpid()}"
        # prompt tokens sent, and those vLLM's prefix cache supplied (what multi-turn episodes,
        # which send the whole conversation each turn, get back from it)
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0

    # ----------------------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        if params.self_certainty:
            raise RlvrError(
                "the self_certainty reward needs each token's full next-token distribution, which the "
                "vLLM engine does not return; use rollout.engine=hf with it"
            )
        if not prompts:
            return []
        # a lazy prompt's pixel tensors, made once for this call (its completions share them)
        prompts = [copy_prompt(p) if vision_of(p) is not None else p for p in prompts]
        # vLLM refuses n > 1 with greedy sampling; n identical greedy completions are n requests
        copies = params.n if params.temperature == 0 and params.n > 1 else 1
        sent, images = _requests(prompts)
        body = {
            "prompts": [ids for ids in sent for _ in range(copies)],
            "n": params.n // copies,
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            # the HF engine ignores every stop token with ignore_eos; vLLM would still stop at these
            "stop_token_ids": [] if params.ignore_eos else self.stop_token_ids,
            "stop": list(params.stop_strings),
            "ignore_eos": params.ignore_eos,
            "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)),
        }
        if images is not None:
            body["images"] = [png for png in images for _ in range(copies)]
        with self.lock:
            reply = self.server.request("POST", "/generate", body)
        if reply["version"] != self.policy_version:
            raise VLLMServerError(
                f"the vLLM server sampled with policy version {reply['version']}, but this engine was "
                f"last synced to version {self.policy_version}: is another trainer using the same server?"
            )
        if images is not None:
            _check_expansion(prompts, reply.get("prompt_lengths") or [], copies)
        self.prompt_tokens += sum(len(p) for p in body["prompts"])
        self.cached_prompt_tokens += sum(reply.get("cached_tokens") or [])
        outputs_of = reply["outputs"]
        if copies > 1:  # one group per prompt again
            outputs_of = [sum(outputs_of[i : i + copies], []) for i in range(0, len(outputs_of), copies)]
        groups = []
        for p, (prompt, outputs) in enumerate(zip(prompts, outputs_of, strict=True)):
            group = []
            for out in outputs:
                ids, finish = out["token_ids"], _finish_reason(out)
                text_ids = ids[:-1] if finish == "stop" else ids
                group.append(
                    Completion(
                        prompt_index=p,
                        prompt_ids=copy_prompt(prompt),
                        token_ids=ids,
                        logprobs=out["logprobs"],
                        finish_reason=finish,
                        text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
                    )
                )
            groups.append(group)
        return groups

    # ----------------------------------------------------------------------------- weights
    def sync_weights(self, model: torch.nn.Module) -> None:
        self.update_weights(model, self.policy_version)

    def load_policy(self, model: torch.nn.Module, version: int) -> None:
        """Give a server that holds unknown weights (one reached by URL) the whole policy: with
        adapter sync, the base weights first and then the adapters; else as :meth:`update_weights`."""
        if has_adapters(model) and self.lora_sync == "adapter":
            self.push_weights(merged_weights(model, merge=False), version)
        self.update_weights(model, version)

    def update_weights(self, model: torch.nn.Module, version: int) -> float:
        """Send ``model``'s weights to the server as policy ``version``; the server's load time (s).

        An adapter model sends its adapters (``lora_sync=adapter``) or its merged weights."""
        with self.lock:
            if has_adapters(model) and self.lora_sync == "adapter":
                reply = self._send_adapter(model, version)
            else:  # full weights: the server drops any adapter it held
                reply = self.push_weights(merged_weights(model), version)
                self._drop_adapter_dir()
            self.policy_version = int(reply["version"])
        return float(reply.get("seconds", 0.0))

    def push_weights(self, weights: dict[str, torch.Tensor], version: int) -> dict[str, Any]:
        """Send full weights (HF names → tensors) as policy ``version``; the server's reply."""
        with self.lock:
            if self.weight_transfer == "nccl":
                if self._nccl is None:
                    self._nccl = _NcclSender(self.server, next(iter(weights.values())).device)
                return self._nccl.send(weights, version)
            return self._send_shm(weights, version)

    def _send_shm(self, weights: dict[str, torch.Tensor], version: int) -> dict[str, Any]:
        path = self._shm_path("pt")
        tmp = path.with_suffix(".tmp")
        try:
            torch.save({name: _whole(t.detach()).to("cpu") for name, t in weights.items()}, tmp)
            os.replace(tmp, path)
            return self.server.request(
                "POST", "/update_weights", {"version": version, "transport": "shm", "path": str(path)}
            )
        finally:
            tmp.unlink(missing_ok=True)
            path.unlink(missing_ok=True)

    def _send_adapter(self, model: torch.nn.Module, version: int) -> dict[str, Any]:
        """Write the adapters (PEFT's ``save_pretrained``: only they are saved) and have the server
        load them. The directory stays until the next adapter replaces it, because vLLM reads an
        adapter from its path again if it ever drops it from its cache."""
        directory = self._shm_path("lora")
        try:
            model.save_pretrained(str(directory), safe_serialization=True)
            reply = self.server.request("POST", "/load_lora", {"version": version, "path": str(directory)})
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._drop_adapter_dir()
        self._adapter_dir = directory
        return reply

    def _drop_adapter_dir(self) -> None:
        if self._adapter_dir is not None:
            shutil.rmtree(self._adapter_dir, ignore_errors=True)
            self._adapter_dir = None

    def _shm_path(self, suffix: str) -> Path:
        if not self.shm_dir.is_dir():
            raise RlvrError(f"rollout.vllm.shm_dir={self.shm_dir} is not a directory")
        return self.shm_dir / f"{self._shm_prefix}-{next(self._pushes)}.{suffix}"

    def close(self) -> None:
        self.server.close()
        self._drop_adapter_dir()


def _requests(prompts: list[list[int]]) -> tuple[list[list[int]], list[list[str]] | None]:
    """The ids each prompt is sent as, and its images as base64 PNG (None when no prompt has any).
    vLLM expands images itself: a prompt with images (single-turn, or a multi-turn conversation with
    its observations' images) goes as its ids with one placeholder per image (``VisionPrompt.source``),
    and the reply's prompt length is checked against rlvr's expansion."""
    if not any(vision_of(p) is not None for p in prompts):
        return [list(map(int, p)) for p in prompts], None
    sent, images = [], []
    for prompt in prompts:
        vision = vision_of(prompt)
        if vision is None:
            sent.append(list(map(int, prompt)))
            images.append([])
            continue
        if getattr(vision, "source", None) is None:
            raise RlvrError(
                "a prompt with images but without its placeholder form (VisionPrompt.source) cannot be sent "
                "to vLLM, which expands images itself: build it with rlvr.vision.prompt.encode_vision_prompt "
                "or a ChatLedger, or use rollout.engine=hf (docs/vision.md)"
            )
        placeholders, pictures = vision.source
        sent.append(list(map(int, placeholders)))
        images.append([_png(picture) for picture in pictures])
    return sent, images


def _png(image: Any) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def _check_expansion(prompts: list[list[int]], lengths: list[int], copies: int) -> None:
    """vLLM's prompt (its expansion of the images) must be as long as rlvr's, which the trainer
    scores: otherwise the sampling log-probs belong to another prompt."""
    for index, prompt in enumerate(prompts):
        got = lengths[index * copies] if index * copies < len(lengths) else None
        if got != len(prompt):
            raise RlvrError(
                f"vLLM expanded prompt {index}'s images into a {got}-token prompt, the model's processor "
                f"into {len(prompt)} tokens: they disagree on the image tokens, so the sampled log-probs "
                "would belong to another prompt; use rollout.engine=hf with this model"
            )


class VLLMWeightSync:
    """:class:`~rlvr.train.loop.weight_sync.WeightSync` into a :class:`VLLMEngine`'s server."""

    def __init__(self, engine: VLLMEngine) -> None:
        self.engine = engine
        self.last_load_s = 0.0

    def push(self, model: torch.nn.Module, version: int) -> None:
        self.last_load_s = self.engine.update_weights(model, version)

    @property
    def version(self) -> int:
        return self.engine.policy_version


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of an FSDP2 shard (``DTensor.full_tensor``: an all-gather, so every rank must call
    it for the same parameter at the same point), else the tensor itself."""
    from rlvr.train.scale.fsdp import full

    return full(tensor)


def _finish_reason(out: dict[str, Any]) -> str:
    reason = out["finish_reason"]
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop_string" if isinstance(out.get("stop_reason"), str) else "stop"
    raise VLLMServerError(f"vLLM ended a completion with finish_reason={reason!r}")


class _NcclSender:
    """Rank 0 of vLLM's NCCL weight-transfer group, joined with torch alone (``torch.cuda.nccl``):
    vLLM's unique-id rendezvous is meant for trainers without vLLM. The server's side is vLLM's own
    ``NCCLWeightTransferEngine`` (unpacked: one broadcast per parameter, in the order of the names
    sent with the update). TO VERIFY ON GPU: nothing here has run on one."""

    def __init__(self, server: VLLMServer, device: torch.device) -> None:
        if device.type != "cuda":
            raise RlvrError(
                "rollout.vllm.weight_transfer=nccl needs the policy on a CUDA device (model.device)"
            )
        import torch.cuda.nccl as nccl

        self.server, self.device, self.nccl = server, device, nccl
        uid = nccl.unique_id()
        init_info = {
            "nccl_unique_id_b64": base64.b64encode(uid).decode(),
            "rank_offset": 1,
            "world_size": 2,
            "packed": False,
        }
        # both ranks must be inside ncclCommInitRank at once: the server's call runs beside ours
        result = _in_thread(lambda: server.request("POST", "/init_weight_transfer", {"init_info": init_info}))
        with torch.cuda.device(device):
            self.comm = nccl.init_rank(2, uid, 0)
            warm = torch.zeros(1, device=device)  # the one-element all_reduce vLLM's side issues first
            nccl.all_reduce([warm], comms=[self.comm])
            torch.cuda.synchronize(device)
        result()

    def send(self, weights: dict[str, torch.Tensor], version: int) -> dict[str, Any]:
        params = [(name, t.detach()) for name, t in weights.items()]  # a DTensor: its global shape
        body = {
            "version": version,
            "transport": "nccl",
            "names": [name for name, _ in params],
            "dtype_names": [str(p.dtype).removeprefix("torch.") for _, p in params],
            "shapes": [list(p.shape) for _, p in params],
        }
        result = _in_thread(lambda: self.server.request("POST", "/update_weights", body))
        with torch.cuda.device(self.device):
            for _, tensor in params:
                self.nccl.broadcast([_whole(tensor).contiguous()], root=0, comms=[self.comm])
            torch.cuda.synchronize(self.device)
        return result()


def _in_thread(call):
    """Run ``call`` in a thread; return a function that waits for it and returns (or raises) its result."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as err:  # re-raised in the caller
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def wait() -> Any:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return wait
