"""Checkpoint requests of ``rlvr serve``: ``save_state``, ``save_weights_for_sampler`` and loading,
as a part of :class:`rlvr.serve.service.Service` (on disk: :mod:`rlvr.serve.checkpoints`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from rlvr.serve import checkpoints as ckpt
from rlvr.serve.replicas import announce
from rlvr.serve.training import TrainedModel
from rlvr.serve.wire import WireError

if TYPE_CHECKING:
    from rlvr.serve.service import Future


class CheckpointRequests:
    """Mixed into :class:`~rlvr.serve.service.Service`, whose state these methods use."""

    def _meta(self, model: TrainedModel) -> dict[str, Any]:
        return {
            "base_model": self.path,
            "lora_rank": model.lora_rank,
            "lora_alpha": self.settings.lora_alpha,
            "model_id": model.model_id,
            "steps": model.steps,
            "lora_config": model.lora_config,
        }

    def save_weights(self, body: dict[str, Any]) -> Future:
        model = self.model(body.get("model_id"))
        run, name = ckpt.run_name(model.model_id), ckpt.plain(body.get("path"), "save_weights: path")
        overwrite = bool(body.get("overwrite", False))

        def save() -> dict[str, Any]:
            directory = ckpt.fresh_dir(self.settings.root, run, "weights", name, overwrite)
            ckpt.save_state(directory, model.policy, model.optimizer, self._meta(model))
            return {"path": ckpt.tinker_path(run, "weights", name), "type": "save_weights"}

        return self.submit(save, name="save_weights")

    def save_for_sampler(self, body: dict[str, Any]) -> Future:
        from rlvr.models.lora import merged_weights

        model = self.model(body.get("model_id"))
        run, name = ckpt.run_name(model.model_id), body.get("path")
        if name is not None:
            ckpt.plain(name, "save_weights_for_sampler: path")

        def save() -> dict[str, Any]:
            if name is None:
                snapshot = f"{run}/{model.steps}/{uuid.uuid4().hex[:8]}"
                self.sampler.add(snapshot, merged_weights(model.policy))
                return {"sampling_session_id": self._new_sampling_session(snapshot)}
            # a named snapshot is held under its path, so a sampling client made from the path
            # right after finds it in memory instead of reading it back from disk
            path = ckpt.tinker_path(run, "sampler_weights", name)
            directory = ckpt.fresh_dir(self.settings.root, run, "sampler_weights", name, True)
            self.sampler.add(path, merged_weights(model.policy))
            self.sampler.load(path)
            ckpt.save_sampler(directory, self.sampler.model, self.tokenizer, self._meta(model))
            return {"path": path, "type": "save_weights_for_sampler"}

        return self.submit(save, name="save_weights_for_sampler")

    def load_weights(self, body: dict[str, Any]) -> Future:
        _, directory = ckpt.resolve(self.settings.root, body.get("path"), "weights")
        with_optimizer = bool(body.get("optimizer", False))
        meta = ckpt.read_meta(directory)
        if body.get("model_id") is not None:
            model_id, create = self.model(body["model_id"]).model_id, None
        else:  # a new training client from the checkpoint
            self.check_base(body.get("base_model"))
            session_id = body.get("session_id")
            model_id = self._new_model_id(session_id, body.get("model_seq_id"))
            rank = meta.get("lora_rank", 0)
            lora = meta.get("lora_config") if isinstance(meta.get("lora_config"), dict) else {"rank": rank}
            create = (session_id, lora if rank else {})
            if bool(rank) == self.settings.full:
                raise WireError(
                    f"{body['path']} was trained {'with LoRA' if rank else 'in full'}; "
                    f"this server trains {'in full' if self.settings.full else 'LoRA adapters'}"
                )

        steps = int(meta.get("steps", 0))

        def load() -> dict[str, Any]:
            announce("load", model_id, create, directory, with_optimizer, steps)
            self._load_state(model_id, create, directory, with_optimizer, steps)
            return {"path": body["path"], "model_id": model_id, "type": "load_weights"}

        return self.submit(load, name="load_weights")

    def _load_state(
        self, model_id: str, create: tuple[str, dict] | None, directory: Any, with_optimizer: bool, steps: int
    ) -> None:
        """A checkpoint's weights (and optimizer) into a model, built first when ``create`` says how."""
        model = self._build(model_id, *create) if create is not None else self.model(model_id)
        if with_optimizer:
            model.ensure_optimizer()
        ckpt.load_state(directory, model.policy, model.optimizer if with_optimizer else None)
        model.steps = steps
