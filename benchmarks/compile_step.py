"""``torch.compile`` (inductor, CPU) of the decode step and of the training layers, against eager.

    taskset -c 0 .venv/bin/python benchmarks/compile_step.py --threads 1 --part decode
    taskset -c 0 .venv/bin/python benchmarks/compile_step.py --threads 1 --part train

``--part decode``: the fused fp32 decode step (``rlvr.models.fused_decode``) against two compiled
forms of the same arithmetic, on the bundled model continuing one prompt G times (``--shape 1xGxT``,
T decode steps timed per repetition, the KV cache preallocated as in the engine):

- *whole step*: every layer in one graph (``dynamic=True``, so a shrinking batch and a growing cache
  do not recompile). The MKL-packed GEMMs enter the graph as an opaque custom op: inductor's own
  ``mkl._mkl_linear`` lowering accepts only packed weights frozen into the graph as constants, which
  would need a recompile after every policy update.
- *per layer*: one graph for a layer, called once per layer (the weights are its arguments).

``--part train``: one ``policy_update`` of the default demo's shape (``--shape 4x8x24``, real rollouts,
packing on) with every ``LlamaDecoderLayer`` compiled (``layer.compile(dynamic=True)``) against eager,
alternating. transformers' cache update reads the layer's index, so dynamo makes a graph per layer;
``--layers N`` raises dynamo's recompile limit to N (30 compiles every layer; its default 8 compiles
8 layers and runs the others eagerly).

Each part prints the compile time (the first calls, warm-up included) and the median time per step or
update of each variant, repetitions alternating. The numbers are in docs/performance.md.
Inductor caches generated code under /tmp/torchinductor_$USER: a second run compiles faster.
"""

from __future__ import annotations

import statistics
import time

import torch
from bench_setup import RECIPE, bench_args, grpo_step


@torch.library.custom_op("rlvr_bench::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` through the MKL-packed copy, opaque to inductor."""
    return torch.ops.mkl._mkl_linear(x, packed, weight, None, x.shape[0])


@packed_linear.register_fake
def _(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


def layer_step(h, cos, sin, bias, w, kbuf, vbuf, length, eps, shape):  # noqa: ANN001, ANN201
    """One Llama layer of the fused decode step, the same arithmetic as ``FusedLlamaDecoder.step``.
    ``w``: (qkv packed, qkv, o packed, o, gate|up packed, gate|up, down packed, down, norm 1, norm 2)."""
    n_heads, n_kv, head_dim, scaling = shape
    batch, group = h.shape[0], n_heads // n_kv
    k_end, half = (n_heads + n_kv) * head_dim, head_dim // 2
    linear = torch.ops.rlvr_bench.packed_linear
    qkv = linear(torch.nn.functional.rms_norm(h, w[8].shape, w[8], eps), w[0], w[1])
    x = qkv[:, :k_end].view(batch, -1, head_dim)
    qk = x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
    kbuf[:, :, length : length + 1] = qk[:, n_heads:].view(batch, n_kv, 1, head_dim)
    vbuf[:, :, length : length + 1] = qkv[:, k_end:].view(batch, n_kv, 1, head_dim)
    q = qk[:, :n_heads].view(batch, n_kv, group, head_dim)
    scores = torch.matmul(q, kbuf[:, :, : length + 1].transpose(-1, -2)) * scaling + bias
    out = torch.matmul(torch.softmax(scores, dim=-1), vbuf[:, :, : length + 1])
    h = h + linear(out.reshape(batch, n_heads * head_dim), w[2], w[3])
    gate, up = linear(torch.nn.functional.rms_norm(h, w[9].shape, w[9], eps), w[4], w[5]).chunk(2, dim=-1)
    return h + linear(torch.nn.functional.silu(gate) * up, w[6], w[7])


def whole_step(h, cos, sin, bias, weights, kbufs, vbufs, length, eps, shape):  # noqa: ANN001, ANN201
    for w, kbuf, vbuf in zip(weights, kbufs, vbufs):
        h = layer_step(h, cos, sin, bias, w, kbuf, vbuf, length, eps, shape)
    return h


def compiled_decoder(decoder, form: str):  # noqa: ANN001, ANN201
    """``decoder.step`` with its layers run by a compiled ``whole_step`` or ``layer_step``."""
    inner = decoder.inner
    eps = inner.norm.variance_epsilon
    shape = (decoder.n_heads, decoder.n_kv, decoder.head_dim, decoder.layers[0][5])
    weights = [
        (*(t for p in parts[:4] for t in (p.packed, p.weight)), layer.input_layernorm.weight,
         layer.post_attention_layernorm.weight)
        for layer, *parts in decoder.layers
    ]  # fmt: skip
    run = torch.compile(whole_step if form == "whole step" else layer_step, dynamic=True)

    @torch.no_grad()
    def step(tokens, positions, cache, mask):  # noqa: ANN001, ANN202
        h = inner.embed_tokens(tokens)
        cos, sin = inner.rotary_emb(h[:, None], positions[:, None])
        bias = torch.zeros(mask.shape).masked_fill_(mask == 0, float("-inf"))[:, None, None, :]
        length, layers = cache.layers[0]._length, cache.layers
        keys, values = [c._key_buffer for c in layers], [c._value_buffer for c in layers]
        if form == "whole step":
            h = run(h, cos, sin, bias, weights, keys, values, length, eps, shape)
        else:
            for w, kbuf, vbuf in zip(weights, keys, values):
                h = run(h, cos, sin, bias, w, kbuf, vbuf, length, eps, shape)
        for c in layers:
            c._length += 1
            c._expose()
        return decoder.head(torch.nn.functional.rms_norm(h, inner.norm.weight.shape, inner.norm.weight, eps))

    return step


def decode_part(args, g: int, t: int) -> None:  # noqa: ANN001
    from rlvr.models.fused_decode import FusedLlamaDecoder
    from rlvr.rollout.kv_cache import reserve_decode_room

    bench = grpo_step(1, g, t)
    model = bench.model.eval()
    decoder = FusedLlamaDecoder(model, rows_hint=g)
    ids = torch.tensor([bench.prompts[0]])

    def decode(step, steps: int) -> tuple[list[float], torch.Tensor]:  # noqa: ANN001
        with torch.no_grad():  # not inference_mode: compiled graphs refuse inference tensors
            cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(g)
        reserve_decode_room(cache, steps)
        mask = torch.ones((g, ids.shape[1]), dtype=torch.long)
        token, position, times = torch.full((g,), 17), torch.full((g,), ids.shape[1]), []
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones((g, 1))], dim=1)
            start = time.perf_counter()
            logits = step(token, position, cache, mask)
            times.append(time.perf_counter() - start)
            token, position = logits.argmax(-1), position + 1
        return times, logits

    variants = {"eager (fused step)": decoder.step}
    _, reference = decode(decoder.step, 8)
    for form in ("whole step", "per layer"):
        start = time.perf_counter()
        variants[form] = compiled_decoder(decoder, form)
        _, logits = decode(variants[form], 8)
        print(
            f"{form}: compile + 8 steps {time.perf_counter() - start:.1f} s, largest logit difference "
            f"to eager {float((logits - reference).abs().max()):.1e}",
            flush=True,
        )
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.reps):
        for name in variants if rep % 2 == 0 else reversed(list(variants)):
            times[name].append(statistics.median(decode(variants[name], t)[0]))
    base = statistics.median(times["eager (fused step)"])
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"decode step, {g} rows, {name}: {median * 1e3:.1f} ms (median of {args.reps} medians), "
              f"{base / median:.2f}× eager")  # fmt: skip


def train_part(args, p: int, g: int, t: int) -> None:  # noqa: ANN001
    import torch._dynamo

    from rlvr import api
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.optim import build_optimizer, build_scheduler
    from rlvr.train.learn.update import policy_update

    torch._dynamo.config.cache_size_limit = args.layers
    cfg = api.load_config(RECIPE, ["optim.warmup_steps=0"])
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, 1000, cfg.optim)
    engine = HFEngine(model, tokenizer, max_batch_sequences=1024, seed=0)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for b in range(2):
        prompts = [encode_prompt(tokenizer, e.prompt) for e in train[b * p : (b + 1) * p]]
        groups = engine.generate(prompts, SamplingParams(n=g, temperature=1.0, max_new_tokens=t))
        batches.append(build_batch(groups, torch.randn(p * g, generator=gen).tolist(), engine.pad_id))

    def compiled(on: bool) -> None:
        for layer in model.model.layers:
            if on:
                layer.compile(dynamic=True)
            else:
                layer._compiled_call_impl = None

    def update(batch) -> float:  # noqa: ANN001
        start = time.perf_counter()
        policy_update(model, optimizer, scheduler, batch, cfg.algo, 1.0, 1.0, t)
        return time.perf_counter() - start

    update(batches[0])  # eager warm-up
    compiled(True)
    start = time.perf_counter()
    for batch in batches:
        update(batch)
    print(f"compiled layers: compile + 2 updates {time.perf_counter() - start:.1f} s", flush=True)
    times: dict[str, list[float]] = {"eager": [], "compiled layers": []}
    for rep in range(args.reps):
        for name in times if rep % 2 == 0 else reversed(list(times)):
            compiled(name != "eager")
            times[name].extend(update(batch) for batch in batches)
    base = statistics.median(times["eager"])
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(
            f"update {p}x{g}x{t}, {name}: {median:.2f} s (median of {len(seconds)}), "
            f"{base / median:.2f}× eager"
        )


def main() -> None:
    import argparse
    import sys

    part = argparse.ArgumentParser(add_help=False)
    part.add_argument("--part", choices=("decode", "train"), default="decode")
    known, rest = part.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    shape = "1x16x48" if known.part == "decode" else "4x8x24"
    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape=shape, reps=4, extra={"--layers": 8})
    if known.part == "decode":
        decode_part(args, g, t)
    else:
        train_part(args, p, g, t)


if __name__ == "__main__":
    main()
