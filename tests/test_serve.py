"""``rlvr serve`` driven by the official Tinker SDK (the pinned ``tinker`` package) in this process.

The server runs on a loopback port chosen by the OS, with the tiny random model; the SDK's
requests go over real HTTP through its own client code.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from rlvr.algo.losses import POLICY_LOSSES  # noqa: E402
from rlvr.config.algo import AlgoConfig  # noqa: E402
from rlvr.config.schema import OptimConfig  # noqa: E402
from rlvr.models.loading import load_model  # noqa: E402
from rlvr.rollout.base import Completion, SamplingParams  # noqa: E402
from rlvr.rollout.hf_engine import HFEngine  # noqa: E402
from rlvr.serve import ServeSettings, Service  # noqa: E402
from rlvr.serve.http import TinkerServer  # noqa: E402
from rlvr.train.learn.batch import build_batch  # noqa: E402
from rlvr.train.learn.optim import build_optimizer, build_scheduler  # noqa: E402
from rlvr.train.learn.update import batch_logprobs, policy_update  # noqa: E402

PROMPT = [5, 17, 42, 8, 99, 23]
COMPLETIONS = [[61, 7, 300, 12, 4], [88, 88, 19, 2, 640], [9, 301, 77, 5, 33]]
ADVANTAGES = [1.0, -0.25, -0.5]


def _start(tmp_path, monkeypatch, **settings):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    service = Service(ServeSettings(model="tiny-random", root=tmp_path / "ckpt", **settings))
    server = TinkerServer(("127.0.0.1", 0), service, poll_seconds=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = tinker.ServiceClient(base_url=server.url)
    return service, server, client


@pytest.fixture
def full(tmp_path, monkeypatch):
    service, server, client = _start(tmp_path, monkeypatch, full=True)
    yield service, server, client
    server.shutdown()
    service.stop()


def _datums(sampler_logprobs: list[list[float]]) -> list[types.Datum]:
    """The Tinker way: input = sequence[:-1], targets = sequence[1:], zeros on the prompt."""
    out = []
    for completion, logprobs, adv in zip(COMPLETIONS, sampler_logprobs, ADVANTAGES):
        seq = PROMPT + completion
        pad = len(PROMPT) - 1
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(seq[:-1]),
                loss_fn_inputs={
                    "target_tokens": seq[1:],
                    "logprobs": [0.0] * pad + logprobs,
                    "advantages": [0.0] * pad + [adv] * len(completion),
                },
            )
        )
    return out


def _rlvr_batch(model):
    groups = [[Completion(0, PROMPT, c, [0.0] * len(c), "length") for c in COMPLETIONS]]
    batch = build_batch(groups, ADVANTAGES, pad_id=0)
    batch.sampling_logprobs = batch_logprobs(model, batch, micro=8, temperature=1.0)
    return batch


def test_forward_backward_and_optim_step_change_the_weights_as_rlvr_learner_does(full) -> None:
    service, _, client = full
    reference = load_model("tiny-random")
    batch = _rlvr_batch(reference)  # sampler logprobs = the policy's own: on-policy, as the learner
    sampler = [batch.sampling_logprobs[i, : len(c)].tolist() for i, c in enumerate(COMPLETIONS)]
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    out = training.forward_backward(_datums(sampler), "ppo").result()
    adam = types.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.99, eps=1e-8, grad_clip_norm=0.0)
    training.optim_step(adam).result()
    # per-datum logprobs of every target, the completion's equal to the learner's
    served = out.loss_fn_outputs[1]["logprobs"].to_torch()
    assert served.shape == (len(PROMPT) + len(COMPLETIONS[1]) - 1,)
    assert torch.allclose(served[len(PROMPT) - 1 :], torch.tensor(sampler[1]), atol=1e-5)
    # rlvr's learner on the same batch: PPO-clip, summed over tokens, one AdamW step
    cfg = AlgoConfig(loss="ppo_clip", loss_agg="token-sum", clip_low=0.2, clip_high=0.2)
    optim = OptimConfig(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, warmup_steps=0)
    optimizer = build_optimizer(reference, optim)
    before = {n: p.detach().clone() for n, p in reference.named_parameters()}
    policy_update(reference, optimizer, build_scheduler(optimizer, 1, optim), batch, cfg, 1e9, 1.0, 8)
    (model,) = service.models.values()
    assert model.lora_rank == 0  # --full: every weight trained
    served_weights = dict(model.policy.named_parameters())
    moved = 0
    for name, p in reference.named_parameters():
        # within 1% of one step (lr 1e-3): the two forward paths differ in rounding only
        assert torch.allclose(served_weights[name], p, atol=1e-5), name
        moved += int(not torch.allclose(p, before[name], atol=1e-5))
    assert moved > 10  # the step changed most tensors


def test_importance_sampling_uses_the_sampler_logprobs(full) -> None:
    """The loss is −Σ exp(lp − sampler_lp)·A: with sampler logprobs 1 nat lower the reported loss
    is e times the on-policy one."""
    service, _, client = full
    batch = _rlvr_batch(load_model("tiny-random"))
    sampler = [batch.sampling_logprobs[i, : len(c)].tolist() for i, c in enumerate(COMPLETIONS)]
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    on = training.forward(_datums(sampler), "importance_sampling").result().metrics["loss:sum"]
    shifted = [[x - 1.0 for x in row] for row in sampler]
    off = training.forward(_datums(shifted), "importance_sampling").result().metrics["loss:sum"]
    expected = -sum(a * len(c) for a, c in zip(ADVANTAGES, COMPLETIONS))
    assert on == pytest.approx(expected, rel=1e-4)
    assert off == pytest.approx(expected * torch.e, rel=1e-4)
    assert POLICY_LOSSES.get("importance_sampling") is not None


def test_cross_entropy_is_the_weighted_nll_and_forward_keeps_no_gradient(full) -> None:
    service, _, client = full
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    seq = PROMPT + COMPLETIONS[0]
    weights = [0.0] * (len(PROMPT) - 1) + [1.0] * len(COMPLETIONS[0])
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": seq[1:], "weights": weights},
    )
    out = training.forward([datum], "cross_entropy").result()
    logprobs = out.loss_fn_outputs[0]["logprobs"].to_torch()
    assert out.metrics["loss:sum"] == pytest.approx(
        -float((logprobs * torch.tensor(weights)).sum()), rel=1e-5
    )
    (model,) = service.models.values()
    assert all(p.grad is None for p in model.policy.parameters())


def test_sample_returns_the_engines_tokens_and_logprobs(full) -> None:
    service, _, client = full
    sampling = client.create_sampling_client(base_model=service.path)
    params = types.SamplingParams(max_tokens=7, temperature=1.0, seed=1234)
    got = sampling.sample(types.ModelInput.from_ints(PROMPT), num_samples=3, sampling_params=params).result()
    engine = HFEngine(load_model("tiny-random"), service.tokenizer, seed=1234)
    (want,) = engine.generate([PROMPT], SamplingParams(n=3, temperature=1.0, max_new_tokens=7))
    assert [s.tokens for s in got.sequences] == [c.token_ids for c in want]
    for seq, completion in zip(got.sequences, want):
        assert seq.logprobs == pytest.approx(completion.logprobs, abs=1e-5)
        assert seq.stop_reason == ("length" if completion.finish_reason == "length" else "stop")
    # prompt logprobs: None first, then each token's logprob under the model
    lp = sampling.compute_logprobs(types.ModelInput.from_ints(PROMPT)).result()
    assert lp[0] is None and len(lp) == len(PROMPT) and all(x < 0 for x in lp[1:])


def test_lora_client_trains_adapters_only_and_samples_from_its_snapshot(tmp_path, monkeypatch) -> None:
    service, server, client = _start(tmp_path, monkeypatch)
    try:
        training = client.create_lora_training_client(
            base_model=service.path, rank=4, train_mlp=False
        ).result()
        info = training.get_info()
        assert info.is_lora and info.lora_rank == 4 and info.model_data.model_name == service.path
        (model,) = service.models.values()
        base = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
        seq = PROMPT + COMPLETIONS[0]
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)},
        )
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        changed = {n for n, p in model.policy.named_parameters() if not torch.equal(p, base[n])}
        assert changed and all("lora_" in n and "self_attn" in n for n in changed)  # train_mlp=False
        # a client from its checkpoint gets the same adapters (the checkpoint keeps the LoRA config)
        path = training.save_state("lora").result().path
        again = client.create_training_client_from_state(path).result()
        restored = dict(service.models[again.model_id].policy.named_parameters())
        assert set(restored) == set(base)
        assert all(torch.equal(p, restored[n]) for n, p in model.policy.named_parameters())
        # the sampling client samples the trained weights: greedy continuations differ from the base's
        greedy = types.SamplingParams(max_tokens=6, temperature=0.0)
        prompt = types.ModelInput.from_ints(PROMPT)
        trained = training.save_weights_and_get_sampling_client().sample(prompt, 1, greedy).result()
        plain = client.create_sampling_client(base_model=service.path).sample(prompt, 1, greedy).result()
        assert trained.sequences[0].logprobs != plain.sequences[0].logprobs
        # a name saved again holds the new weights, also for a sampler reading it by path
        named = []
        for _ in range(2):
            path = training.save_weights_for_sampler("latest").result().path
            sampler = client.create_sampling_client(model_path=path)
            named.append(sampler.sample(prompt, 1, greedy).result().sequences[0].logprobs)
            training.forward_backward([datum], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        assert named[0] == trained.sequences[0].logprobs and named[1] != named[0]
    finally:
        server.shutdown()
        service.stop()


def test_checkpoints_round_trip_with_the_optimizer_state(full) -> None:
    service, _, client = full
    seq = PROMPT + COMPLETIONS[2]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)},
    )
    adam = types.AdamParams(learning_rate=1e-3)
    first = client.create_lora_training_client(base_model=service.path, rank=8).result()
    first.forward_backward([datum], "cross_entropy").result()
    first.optim_step(adam).result()
    path = first.save_state("step1").result().path
    assert path.endswith("/weights/step1")
    second = client.create_training_client_from_state_with_optimizer(path).result()
    for training in (first, second):  # the same next step from the same state
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(adam).result()
    a, b = (service.models[t.model_id].policy for t in (first, second))
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    # sampler weights are a plain transformers model directory
    saved = first.save_weights_for_sampler("final").result().path
    directory = service.settings.root / saved[len("tinker://") :]
    plain = load_model(str(directory))
    for (name, p), q in zip(a.named_parameters(), plain.parameters()):
        assert torch.equal(p, q), name
    with pytest.raises(tinker.RequestFailedError, match="exists"):
        first.save_state("step1").result()


def test_refused_calls_reach_the_client_as_errors(full) -> None:
    service, server, client = full
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    seq = PROMPT + COMPLETIONS[0]
    good = {"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)}
    datum = types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs=good)
    with pytest.raises(tinker.RequestFailedError, match="loss_fn 'dro' is not supported"):
        training.forward_backward([datum], "dro").result()
    bad = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={**good, "target_tokens": [10**9] * (len(seq) - 1)},
    )
    with pytest.raises(tinker.RequestFailedError, match="datum 0: a target token id is outside"):
        training.forward_backward([bad], "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError, match="loss_fn 'cross_entropy' takes"):
        training.forward_backward([_datums([[0.0] * 5] * 3)[0]], "cross_entropy").result()
    # checked when the request arrives: a 400 the SDK raises as BadRequestError, with the message
    with pytest.raises(tinker.BadRequestError, match="top_k"):
        client.create_sampling_client(base_model=service.path).sample(
            types.ModelInput.from_ints(PROMPT), 1, types.SamplingParams(max_tokens=2, top_k=5)
        ).result()
    with pytest.raises(tinker.BadRequestError, match="no checkpoint"):
        client.create_training_client_from_state("tinker://nobody/weights/x").result()
    # unsupported routes and hostile bodies: a 4xx with a JSON message, the server still serving
    for route, body in (
        ("save_weights_external", b"{}"),
        ("create_session", b"[" * 5000),
        ("load_weights", json.dumps({"path": "tinker://../weights/x"}).encode()),
    ):
        request = urllib.request.Request(f"{server.url}/api/v1/{route}", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 400 and json.loads(caught.value.read())["detail"]
    assert training.forward([datum], "cross_entropy").result().metrics["loss:sum"] > 0


def test_rlvr_serve_command_prints_how_to_connect_and_serves(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "rlvr",
        "serve",
        "--model",
        "tiny-random",
        "--port",
        "0",
        "--root",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "TINKER_BASE_URL=" in line:
                break
        url = line.split("TINKER_BASE_URL=")[1].split()[0]
        with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=10) as reply:
            assert json.loads(reply.read()) == {"status": "ok"}
        request = urllib.request.Request(f"{url}/api/v1/client/config", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert json.loads(reply.read())["use_pyqwest_transport"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert any("rlvr serve:" in line for line in lines), lines


def test_the_engine_reuses_its_packed_decoder_only_while_the_weights_keep_their_name() -> None:
    model = load_model("tiny-random").eval()
    engine = HFEngine(model, load_tokenizer_for_test(), seed=0, packed_weights="on")
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=4)
    if engine.decode_path(2, params) != "fused":
        pytest.skip("no fused decode path here (needs MKL)")
    engine.weights_key = "a"
    engine.generate([PROMPT], params)
    (first,) = engine._decoders.values()
    engine.generate([PROMPT], params)
    assert list(engine._decoders.values()) == [first]  # same name, same batch size: reused
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(3.0)
    engine.weights_key = "b"
    got = engine.generate([PROMPT], params)[0][0].logprobs
    fresh = HFEngine(model, load_tokenizer_for_test(), seed=0, packed_weights="on")
    assert got == pytest.approx(fresh.generate([PROMPT], params)[0][0].logprobs, abs=1e-5)
    assert first not in engine._decoders.values()  # renamed: repacked from the new weights


def load_tokenizer_for_test():
    from rlvr.models.loading import load_tokenizer

    return load_tokenizer("tiny-random")


def test_requests_for_the_same_prompt_are_prefilled_once_and_shared_out() -> None:
    from rlvr.serve.sampling import BASE, Sampler, SampleSpec

    sampler = Sampler(load_model("tiny-random"), load_tokenizer_for_test())
    seen: list[list[list[int]]] = []
    generate = sampler.engine.generate
    sampler.engine.generate = lambda prompts, params: seen.append(prompts) or generate(prompts, params)
    spec = SampleSpec.from_request({"num_samples": 2, "sampling_params": {"max_tokens": 3}}, 16, 8)
    other = PROMPT[:3]
    out = sampler.sample(BASE, [PROMPT, other, PROMPT, other], spec)
    assert seen == [[PROMPT, other]]  # each distinct prompt once, sampled 2 x 2 times
    assert [len(group) for group in out] == [2, 2, 2, 2]
    assert out[0] != out[2]  # the shares are different samples
    sampler.sample(BASE, [PROMPT, PROMPT, other], spec)  # uneven repeats: as they came
    assert seen[-1] == [PROMPT, PROMPT, other]


def test_the_shared_prefix_forward_gives_the_full_forwards_logprobs_and_gradients() -> None:
    import numpy as np

    from rlvr.serve import forward
    from rlvr.serve.wire import Datum

    def datums(advantage: float) -> list[Datum]:
        out = []
        for completion in COMPLETIONS:
            seq = np.array(PROMPT + completion)
            adv = np.r_[np.zeros(len(PROMPT) - 1), np.full(len(completion), advantage)].astype(np.float32)
            targets = seq[1:].copy()
            targets[:2] = 7  # prompt positions may hold any target (the cookbook writes 0s there)
            out.append(Datum(seq[:-1], {"target_tokens": targets, "advantages": adv}))
        return out

    model = load_model("tiny-random")
    results = {}
    for name, fn in (
        ("shared", lambda d: forward.datum_logprobs(model, d, "advantages")),
        ("full", lambda d: forward._full(model, d)),
    ):
        model.zero_grad()
        lps = fn(datums(1.0))
        sum(lp[len(PROMPT) - 1 :].sum() for lp in lps).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results[name] = ([lp.detach() for lp in lps], grads)
    for a, b in zip(results["shared"][0], results["full"][0]):
        assert torch.allclose(a, b, atol=1e-5)
    for a, b in zip(results["shared"][1], results["full"][1]):
        assert torch.allclose(a, b, atol=1e-5)
    # datums of zero advantage: the same logprobs, no graph
    inert = forward.datum_logprobs(model, datums(0.0), "advantages")
    assert all(not lp.requires_grad for lp in inert)
    for a, b in zip(inert, results["full"][0]):
        assert torch.allclose(a, b, atol=1e-5)


def test_forward_backward_custom_runs_its_loss_on_the_client(full) -> None:
    """The SDK's custom losses: a forward for the logprobs, then ``cross_entropy`` with weights
    ``−dL/dlogprob``; for L = −2·Σ logprob the gradient is twice cross_entropy's with weights 1."""
    service, _, client = full
    training = client.create_lora_training_client(base_model=service.path, rank=8).result()
    seq = PROMPT + COMPLETIONS[0]
    n = len(seq) - 1

    def datum(weight: float) -> types.Datum:
        return types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={"target_tokens": seq[1:], "weights": [weight] * n},
        )

    def loss_fn(data, logprobs_list):
        loss = -(logprobs_list[0] * 2.0).sum()
        return loss, {"custom": float(loss.detach())}

    out = training.forward_backward_custom([datum(1.0)], loss_fn).result()
    assert out.metrics["custom"] > 0
    (model,) = service.models.values()
    custom = [p.grad.clone() for p in model.policy.parameters()]
    model.policy.zero_grad()
    training.forward_backward([datum(1.0)], "cross_entropy").result()
    for a, p in zip(custom, model.policy.parameters()):
        assert torch.allclose(a, 2.0 * p.grad, atol=1e-6)


def test_two_clients_train_their_own_models_side_by_side(full) -> None:
    """Two ServiceClients (two sessions) interleave their steps; each model ends where it would
    alone, and closing a session frees its model."""
    service, server, _ = full
    seq = PROMPT + COMPLETIONS[1]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)},
    )
    clients = [tinker.ServiceClient(base_url=server.url) for _ in range(2)]
    trainers = [c.create_lora_training_client(base_model=service.path, rank=8).result() for c in clients]
    rates = (1e-3, 3e-3)
    for _ in range(2):  # submitted together, so the server interleaves them
        futures = [t.forward_backward([datum], "cross_entropy") for t in trainers]
        steps = [t.optim_step(types.AdamParams(learning_rate=lr)) for t, lr in zip(trainers, rates)]
        for f in futures + steps:
            f.result()
    models = [service.models[t.model_id].policy for t in trainers]
    alone = clients[1].create_lora_training_client(base_model=service.path, rank=8).result()
    for _ in range(2):  # the second client's steps again, with nothing in between
        alone.forward_backward([datum], "cross_entropy").result()
        alone.optim_step(types.AdamParams(learning_rate=rates[1])).result()
    for p, q in zip(models[1].parameters(), service.models[alone.model_id].policy.parameters()):
        assert torch.equal(p, q)
    assert not all(torch.equal(p, q) for p, q in zip(models[0].parameters(), models[1].parameters()))
    clients[0].close("success").result()
    assert trainers[0].model_id not in service.models and trainers[1].model_id in service.models
