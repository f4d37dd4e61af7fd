"""``rlvr serve --engine vllm``: the Tinker SDK samples from a vLLM server that the service keeps in
step with the weights clients train. Marked ``vllm``: needs ``.venv-vllm`` (``make vllm``) and runs
in ``make test-scale``, skipped with the reason where that environment is absent."""

from __future__ import annotations

import threading

import pytest
import torch

tinker = pytest.importorskip("tinker")

from tinker import types  # noqa: E402

from rlvr.models.chat import encode_prompt  # noqa: E402
from rlvr.models.loading import load_model  # noqa: E402
from rlvr.rollout import HFEngine, SamplingParams  # noqa: E402
from rlvr.rollout.vllm_process import find_vllm_python  # noqa: E402
from rlvr.serve import ServeSettings, Service  # noqa: E402
from rlvr.serve.http import TinkerServer  # noqa: E402

MODEL = "smollm2-135m-instruct"
TOLERANCE = 0.05  # nats: vLLM's CPU kernels and the trainer's forward differ in rounding


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from rlvr.errors import RlvrError

    try:
        find_vllm_python()
    except RlvrError as err:
        pytest.skip(f"vLLM's environment is absent ({err})")
    mp = pytest.MonkeyPatch()
    mp.setenv("TINKER_API_KEY", "tml-test")
    mp.setenv("TINKER_TELEMETRY", "0")
    service = Service(
        ServeSettings(model=MODEL, root=tmp_path_factory.mktemp("serve"), full=True, engine="vllm")
    )
    server = TinkerServer(("127.0.0.1", 0), service, poll_seconds=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield service, tinker.ServiceClient(base_url=server.url)
    server.shutdown()
    service.stop()
    assert service.sampler.engine.server.process is None  # the vLLM server stopped with the service
    mp.undo()


def _prompt(service) -> list[int]:
    return encode_prompt(service.tokenizer, [{"role": "user", "content": "Name three colours."}])


def _sample(client, prompt: list[int], temperature: float, seed: int = 0):
    params = types.SamplingParams(max_tokens=12, temperature=temperature, seed=seed)
    out = client.sample(types.ModelInput.from_ints(prompt), 1, params).result()
    return out.sequences[0]


def _hf_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.mark.vllm
def test_sampling_through_vllm_follows_the_trained_weights(served) -> None:
    service, client = served
    prompt = _prompt(service)
    # the base model: vLLM's greedy tokens are the HF engine's
    base = client.create_sampling_client(base_model=service.path)
    greedy = _sample(base, prompt, 0.0)
    hf = HFEngine(service.sampler.model, service.tokenizer)
    hf_greedy = hf.generate([prompt], SamplingParams(n=1, temperature=0.0, max_new_tokens=12))[0][0]
    assert greedy.tokens == hf_greedy.token_ids

    # one SFT step with a large learning rate on another answer moves the policy far
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    target = service.tokenizer("Purple, teal and ochre.", add_special_tokens=False)["input_ids"]
    sequence = prompt + target
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(target)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(sequence[:-1]),
        loss_fn_inputs={"target_tokens": sequence[1:], "weights": weights},
    )
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=3e-4)).result()
    trained = training.save_weights_and_get_sampling_client().result()

    # vLLM now samples the trained weights: its logprobs are the trained policy's, not the base's
    sampled = _sample(trained, prompt, 1.0, seed=7)
    (model,) = service.models.values()
    policy = _hf_logprobs(model.policy, prompt, sampled.tokens)
    base_logprobs = _hf_logprobs(load_model(service.path), prompt, sampled.tokens)
    served_logprobs = torch.tensor(sampled.logprobs)
    assert (served_logprobs - policy).abs().max() < TOLERANCE
    assert (served_logprobs - base_logprobs).abs().max() > 10 * TOLERANCE
    # and the base model is still there: loading it sends the base weights back
    assert _sample(base, prompt, 0.0).tokens == greedy.tokens
