"""RewardSpec validation and the RewardPool: isolation, timeouts, crashes, errors, results, stats."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import reasoning_gym

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import RewardPool, RewardResult, RewardSpec, list_rewards, register_reward

# Workers resolve rewards by import path; they inherit sys.path, so make the fixtures importable
# here whatever pytest's rootdir / import mode is.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
fixtures = importlib.import_module("reward_fixtures")
FIX = fixtures.__name__

TIMEOUT = 1.0


def fix(name: str, **kwargs) -> RewardSpec:
    return RewardSpec(name=f"{FIX}:{name}", **kwargs)


def examples(n: int) -> list[Example]:
    return [Example(id=str(i), prompt=[{"role": "user", "content": "q"}], reference=str(i)) for i in range(n)]


# -- RewardSpec ----------------------------------------------------------------------------------


def test_spec_unknown_reward_lists_known_names():
    with pytest.raises(RlvrError) as info:
        RewardSpec(name="mathh")
    assert "mathh" in str(info.value) and "math" in str(info.value) and "reasoning_gym" in str(info.value)


def test_spec_unknown_param_names_it_and_lists_allowed():
    with pytest.raises(RlvrError) as info:
        RewardSpec(name="format", params={"require_thnk": True})
    assert "require_thnk" in str(info.value) and "require_think" in str(info.value)


def test_spec_missing_required_param():
    with pytest.raises(RlvrError, match="max_tokens"):
        RewardSpec(name="overlong", params={"buffer": 10})


def test_spec_bad_param_value_lists_allowed_values():
    with pytest.raises(RlvrError) as info:
        RewardSpec(name="math", params={"extract": "tags"})
    assert "extract" in str(info.value) and "answer_tag" in str(info.value)
    with pytest.raises(RlvrError, match="max_tokens"):
        RewardSpec(name="overlong", params={"max_tokens": 0, "buffer": 0})


def test_spec_pool_supplied_kwargs_cannot_be_params():
    with pytest.raises(RlvrError, match="completion_tokens"):
        RewardSpec(name="length_penalty", params={"max_tokens": 10, "completion_tokens": 3})


def test_spec_rejects_unknown_fields_and_bad_import_paths():
    with pytest.raises(Exception, match="wieght"):
        RewardSpec(name="format", wieght=2.0)
    with pytest.raises(RlvrError, match="no_such_module"):
        RewardSpec(name="no_such_module:fn")
    with pytest.raises(RlvrError, match="nope"):
        RewardSpec(name=f"{FIX}:nope")


def test_spec_inspects_which_pool_kwargs_to_pass():
    assert RewardSpec(name="format").call_spec().pool_kwargs == ()
    overlong = RewardSpec(name="overlong", params={"max_tokens": 10, "buffer": 2}).call_spec()
    assert overlong.pool_kwargs == ("completion_tokens", "finish_reason")
    assert RewardSpec(name="confidence").call_spec().pool_kwargs == ("token_logprobs",)
    assert fix("any_kwargs").call_spec().pool_kwargs == (
        "completion_tokens",
        "finish_reason",
        "token_logprobs",
        "top_logprobs",
        "token_self_certainty",
    )


def test_spec_coerces_params_by_annotation():
    assert RewardSpec(name="length_penalty", params={"max_tokens": "10"}).params == {"max_tokens": 10}


def test_pool_rejects_duplicate_labels():
    with pytest.raises(RlvrError, match="format"):
        RewardPool([RewardSpec(name="format"), RewardSpec(name="format")], workers=1)


# -- isolation and normal scoring ----------------------------------------------------------------


def test_rewards_run_in_other_processes_and_workers_persist():
    with RewardPool([fix("pid")], workers=2) as pool:
        worker_pids = {float(w.proc.pid) for w in pool._workers}
        first = {r.total for r in pool.score(["a"] * 8, examples(8))}
        second = {r.total for r in pool.score(["a"] * 8, examples(8))}
    assert float(os.getpid()) not in first
    assert first <= worker_pids and second <= worker_pids  # the same workers served both batches


def test_reasoning_gym_through_the_pool():
    data = reasoning_gym.create_dataset(
        "chain_sum", size=5, seed=0, min_terms=2, max_terms=2, min_digits=1, max_digits=2
    )
    batch = [
        Example(id=str(i), prompt=[{"role": "user", "content": e["question"]}], metadata={"rg_entry": e})
        for i, e in enumerate(data)
    ]
    completions = [
        f"<answer>{e['answer']}</answer>" if i % 2 == 0 else "<answer>1000</answer>"
        for i, e in enumerate(data)
    ]
    specs = [RewardSpec(name="reasoning_gym"), RewardSpec(name="format", weight=0.5)]
    with RewardPool(specs, workers=2) as pool:
        results = pool.score(completions, batch)
    assert [r.components["reasoning_gym"] for r in results] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert [r.total for r in results] == [1.5, 0.5, 1.5, 0.5, 1.5]
    assert all(r.ok for r in results)


def test_verifier_routes_mixed_sources_in_workers():
    batch = [
        Example(id="m", prompt=[], reference=r"\frac{1}{2}", verifier="math"),
        Example(id="e", prompt=[], reference="Paris", verifier="exact_match"),
        Example(id="o", prompt=[], verifier="overlong"),
    ]
    overlong = {"overlong": {"max_tokens": 10, "buffer": 5}}
    spec = RewardSpec(name="verifier", params={"reward_params": overlong})
    with RewardPool([spec], workers=2) as pool:
        results = pool.score(
            ["<answer>0.5</answer>", "<answer>Paris</answer>", "x"], batch, completion_tokens=[1, 1, 8]
        )
    assert [r.total for r in results] == [1.0, 1.0, -0.6]


def test_results_keep_item_order_across_chunks():
    n = 101
    completions = ["x" * i for i in range(n)]
    with RewardPool([RewardSpec(name="fixture_scaled_len", params={"scale": 2.0})], workers=2) as pool:
        results = pool.score(completions, examples(n))
    assert [r.total for r in results] == [2.0 * i for i in range(n)]


def test_dict_rewards_become_components():
    specs = [fix("parts", weight=2.0), fix("parts_no_score")]
    with RewardPool(specs, workers=1) as pool:
        [result] = pool.score(["a"], examples(1))
    assert result.components == {
        f"{FIX}:parts/score": 0.5,
        f"{FIX}:parts/bonus": 2.0,
        f"{FIX}:parts_no_score/a": 1.0,
        f"{FIX}:parts_no_score/b": 2.0,
    }
    assert result.total == 2.0 * 0.5 + (1.0 + 2.0)  # "score" if present, else the sum


def test_token_counts_and_finish_reasons_are_passed_when_accepted():
    specs = [
        fix("token_info", label="info"),
        fix("any_kwargs", label="kw", params={"extra": 1}),
        RewardSpec(name="overlong", params={"max_tokens": 100, "buffer": 20}),
        RewardSpec(name="format"),  # does not accept them: would raise TypeError if they were passed
    ]
    with RewardPool(specs, workers=1) as pool:
        results = pool.score(
            ["<answer>1</answer>"] * 2,
            examples(2),
            completion_tokens=[90, 10],
            finish_reasons=["stop", "length"],
        )
    assert [r.errors for r in results] == [{}, {}]
    assert results[0].components == {
        "info/tokens": 90.0,
        "info/cut": 0.0,
        "kw": 6.0,  # extra + the five pool-supplied kwargs (missing ones as None)
        "overlong": -0.5,
        "format": 1.0,
    }
    assert results[1].components["info/cut"] == 1.0 and results[1].components["overlong"] == -1.0


def test_length_reward_without_token_counts_is_an_error():
    with RewardPool([RewardSpec(name="length_penalty", params={"max_tokens": 10})], workers=1) as pool:
        [result] = pool.score(["a"], examples(1))
    assert result.total is None and "completion_tokens" in result.errors["length_penalty"]


def test_score_validates_lengths_and_accepts_empty_batches():
    with RewardPool([RewardSpec(name="format")], workers=1) as pool:
        assert pool.score([], []) == []
        with pytest.raises(ValueError, match="examples"):
            pool.score(["a", "b"], examples(1))
        with pytest.raises(ValueError, match="finish_reasons"):
            pool.score(["a"], examples(1), finish_reasons=[])
        unpicklable = examples(1)
        unpicklable[0].metadata["fn"] = lambda: None
        with pytest.raises(RlvrError, match="picklable"):
            pool.score(["a"], unpicklable)
        assert pool.score(["<answer>1</answer>"], examples(1))[0].total == 1.0


def test_close_stops_workers_and_is_final():
    pool = RewardPool([RewardSpec(name="format")], workers=2)
    processes = [w.proc for w in pool._workers]
    pool.close()
    pool.close()
    assert not any(p.is_alive() for p in processes)
    with pytest.raises(RuntimeError, match="close"):
        pool.score(["a"], examples(1))


# -- errors: never a silent zero -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("boom", "ValueError: bad thing happened"),
        ("exits", "SystemExit"),
        ("nan", "non-finite"),
        ("wrong_type", "returned str"),
        ("returns_none", "returned NoneType"),
    ],
)
def test_reward_errors_are_reported_not_zero(name, expected):
    spec = fix(name)
    with RewardPool([spec, RewardSpec(name="format")], workers=1) as pool:
        [result] = pool.score(["<answer>1</answer>"], examples(1))
        stats = pool.take_stats()
    assert result.total is None
    assert spec.key not in result.components and result.components == {"format": 1.0}
    assert expected in result.errors[spec.key] and "\n" not in result.errors[spec.key]
    if name in ("nan", "wrong_type", "returns_none"):
        assert spec.key in result.errors[spec.key]  # the message names the reward
    assert stats[spec.key] == {"calls": 1, "errors": 1, "timeouts": 0, "crashes": 0, "deadlines": 0}
    assert stats["format"]["errors"] == 0


@pytest.mark.parametrize("name", ["spin", "sleep_long", "hang_in_c"])
def test_hung_reward_times_out_and_the_batch_is_still_scored(name):
    specs = [fix(name, label="slow"), fix("sleep_then_len", label="len", params={"seconds": 0.0})]
    with RewardPool(specs, workers=2, timeout_s=TIMEOUT) as pool:
        stuck = [w.proc for w in pool._workers]
        results = pool.score(["ab", "abc"], examples(2))
        assert not any(p.is_alive() for p in stuck)  # killed, not left spinning
        assert pool.worker_restarts == 2
        assert pool.stats["slow"] == {"calls": 2, "errors": 2, "timeouts": 2, "crashes": 0, "deadlines": 0}
    assert [r.errors for r in results] == [{"slow": f"timeout after {TIMEOUT:g}s"}] * 2
    assert [r.components for r in results] == [{"len": 2.0}, {"len": 3.0}]
    assert [r.total for r in results] == [None, None]


def test_crash_and_segfault_are_errors_and_workers_are_replaced():
    completions = ["ok", "crash", "fine", "segfault", "good", "raise", "last"]
    with RewardPool([fix("misbehave", label="m")], workers=2, timeout_s=TIMEOUT) as pool:
        results = pool.score(completions, examples(len(completions)))
        again = pool.score(["after"] * 4, examples(4))  # the replacements work
        stats = pool.take_stats()
    by_item = dict(zip(completions, results, strict=True))
    assert by_item["crash"].errors["m"] == "worker crashed: worker process exited with code 3"
    assert "SIGSEGV" in by_item["segfault"].errors["m"]
    assert by_item["raise"].errors["m"].startswith("ValueError: bad thing happened")
    for word in ("ok", "fine", "good", "last"):
        assert by_item[word].total == float(len(word)) and by_item[word].ok
    assert [r.total for r in again] == [5.0] * 4
    assert stats["m"] == {"calls": 11, "errors": 3, "timeouts": 0, "crashes": 2, "deadlines": 0}
    assert pool.take_stats()["m"]["calls"] == 0  # take_stats resets the per-step counts
    assert pool.stats["m"]["calls"] == 11  # but not the cumulative ones


def test_timeout_in_the_middle_of_a_chunk_requeues_the_rest():
    completions = ["a", "b", "spin", "c", "d", "e", "f", "g"]
    with RewardPool([fix("misbehave", label="m")], workers=1, timeout_s=TIMEOUT) as pool:
        results = pool.score(completions, examples(len(completions)))
        after = pool.score(["xy"], examples(1))
    assert [r.total for r in results] == [1.0, 1.0, None, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert results[2].errors == {"m": f"timeout after {TIMEOUT:g}s"}
    assert after[0].total == 2.0


def test_timeout_is_per_call_not_per_chunk():
    # 16 items on one worker go out in chunks of 4 calls of 0.5 s: each chunk (2 s) takes longer
    # than the 1.5 s timeout, yet no single call comes within a second of it, so nothing may time out.
    n = 16
    spec = fix("sleep_then_len", label="s", params={"seconds": 0.5})
    with RewardPool([spec], workers=1, timeout_s=1.5) as pool:
        results = pool.score(["abc"] * n, examples(n))
    assert [r.errors for r in results] == [{}] * n
    assert [r.total for r in results] == [3.0] * n


def test_rewards_registered_in_an_importable_module_resolve_in_workers():
    assert "fixture_scaled_len" in list_rewards()
    with RewardPool([RewardSpec(name="fixture_scaled_len", params={"scale": 3.0})], workers=1) as pool:
        [result] = pool.score(["abcd"], examples(1))
    assert result == RewardResult(total=12.0, components={"fixture_scaled_len": 12.0}, errors={})


def test_reward_registered_in_a_function_body_is_an_error_in_workers():
    @register_reward("test_pool_local_only")
    def local_only(completion, example):
        return 1.0

    with RewardPool([RewardSpec(name="test_pool_local_only")], workers=1) as pool:
        [result] = pool.score(["a"], examples(1))
    assert result.total is None
    assert "not available in worker processes" in result.errors["test_pool_local_only"]
