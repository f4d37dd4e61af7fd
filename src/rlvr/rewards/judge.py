"""LLM-as-judge: score a completion by asking a model behind any OpenAI-compatible chat endpoint.

The ``judge`` reward fills a rubric template with the question, the reference (if any), the
completion's answer and the example's metadata (``{metadata[rubric]}``: a per-example rubric from a
data file's ``rubric`` column, or ``{metadata[extra_info][rubric]}`` inside a dict column), sends
it to ``{url}/chat/completions``, and parses a number out of the reply ("Score: 7", or the last
number), scaled to [0, 1] by ``max_score``. A reply without a number is
a reward *error*, not a zero: the judge failed, not the policy.

Robustness: each request has a timeout; connection errors, 429 and 5xx are retried with
exponential backoff; a cross-process limit (lock files, one per slot) keeps all reward workers
together under ``max_concurrency`` requests in flight to one endpoint; answers are cached in memory
and, with ``cache_dir``, on disk — keyed by the full request, so a changed rubric or model never
reuses an old score. Keep ``timeout_s × (retries + 1)`` plus backoff under the pool's timeout.

No third-party HTTP client: ``urllib`` is enough and keeps the reward importable everywhere.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import string
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt

from rlvr.data.example import Example
from rlvr.rewards.extract import ExtractMode, extract_answer
from rlvr.rewards.registry import register_reward

DEFAULT_RUBRIC = (
    "You are a strict grader. Rate how correct and complete the answer is, from 0 (wrong) to "
    "{max_score} (fully correct).\n\nQuestion:\n{question}\n\nReference answer:\n{reference}\n\n"
    "Answer to grade:\n{answer}\n\nReply with one line: Score: <number>"
)
_SCORE = re.compile(r"score\s*[:=]?\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_MEMORY_CACHE: dict[str, str] = {}
_MEMORY_CACHE_MAX = 100_000


class JudgeError(RuntimeError):
    """The endpoint could not be reached or answered with an error, after all retries."""


@dataclass(frozen=True)
class JudgeClient:
    """One OpenAI-compatible chat endpoint, with retries, a concurrency limit and a cache."""

    url: str  # base URL, e.g. "http://127.0.0.1:8000/v1"
    model: str = "default"
    api_key_env: str | None = None  # name of the environment variable holding the API key
    timeout_s: float = 30.0
    retries: int = 2
    backoff_s: float = 0.5
    max_concurrency: int = 8
    cache_dir: str | None = None
    max_tokens: int = 32
    temperature: float = 0.0

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text for ``messages`` (cached by the full request)."""
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        key = hashlib.sha256(json.dumps([self.url, body], sort_keys=True).encode()).hexdigest()
        cached = self._cache_get(key)
        if cached is not None:
            return cached
        with self._slot():
            reply = self._post_with_retries(body)
        self._cache_put(key, reply)
        return reply

    def _post_with_retries(self, body: dict[str, Any]) -> str:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key_env and os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(
                self.url.rstrip("/") + "/chat/completions", data=data, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read())
                return str(payload["choices"][0]["message"]["content"])
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code not in _RETRY_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise JudgeError(f"judge at {self.url} sent an unexpected response: {exc!r}") from exc
        raise JudgeError(f"judge at {self.url} failed after {attempt + 1} attempts: {last}")

    @contextmanager
    def _slot(self):
        """Hold one of ``max_concurrency`` lock files shared by every process on this machine."""
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / f"rlvr-judge-{digest}"
        folder.mkdir(exist_ok=True)
        deadline = time.monotonic() + self.timeout_s * (self.retries + 1)
        while True:
            for index in range(self.max_concurrency):
                handle = open(folder / f"slot{index}.lock", "w")  # noqa: SIM115 - held while yielding
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    handle.close()
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
                    handle.close()
                return
            if time.monotonic() > deadline:
                raise JudgeError(f"no free slot for {self.url} (max_concurrency={self.max_concurrency})")
            time.sleep(0.01)

    def _cache_get(self, key: str) -> str | None:
        if key in _MEMORY_CACHE:
            return _MEMORY_CACHE[key]
        if self.cache_dir:
            path = Path(self.cache_dir) / f"{key}.json"
            if path.is_file():
                reply = json.loads(path.read_text())["reply"]
                _MEMORY_CACHE[key] = reply
                return reply
        return None

    def _cache_put(self, key: str, reply: str) -> None:
        if len(_MEMORY_CACHE) >= _MEMORY_CACHE_MAX:
            _MEMORY_CACHE.clear()
        _MEMORY_CACHE[key] = reply
        if self.cache_dir:
            folder = Path(self.cache_dir)
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"reply": reply}))
            os.replace(tmp, folder / f"{key}.json")  # atomic: concurrent workers never read half a file


RUBRIC_FIELDS = ("question", "reference", "answer", "max_score", "metadata")
_INDEX = re.compile(r"\[([^\]]*)\]")


def rubric_fields(rubric: str) -> list[tuple[str, list[str]]]:
    """``(field, keys)`` of every placeholder: ``{metadata[a][b]}`` → ``("metadata", ["a", "b"])``.

    Raises ``ValueError`` for a malformed template, a field the judge does not fill, or attribute
    access (``{metadata.x}``): only ``[key]`` indexing reads metadata.
    """
    try:
        parsed = list(string.Formatter().parse(rubric))
    except ValueError as error:
        raise ValueError(f"rubric is not a valid str.format template: {error}") from None
    fields = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        root = re.split(r"[.\[]", name, maxsplit=1)[0]
        if root not in RUBRIC_FIELDS or "." in name.split("[", 1)[0]:
            raise ValueError(
                f"rubric placeholder {{{name}}} is not one of "
                f"{', '.join('{' + f + '}' for f in RUBRIC_FIELDS)} (read metadata with {{metadata[key]}})"
            )
        fields.append((root, _INDEX.findall(name)))
    return fields


def _check_rubric(params: dict[str, Any]) -> None:
    rubric_fields(params.get("rubric", DEFAULT_RUBRIC))


def _metadata_value(metadata: dict[str, Any], keys: list[str]) -> tuple[bool, Any]:
    value: Any = metadata
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _check_rubric_metadata(params: dict[str, Any], examples: list) -> None:
    """Every example has the metadata the rubric reads, so no call fails on a missing key."""
    for field, keys in rubric_fields(params.get("rubric", DEFAULT_RUBRIC)):
        if field != "metadata" or not keys:
            continue
        for example in examples:
            if not _metadata_value(example.metadata, keys)[0]:
                path = "".join(f"[{k}]" for k in keys)
                raise ValueError(
                    f"the judge rubric reads {{metadata{path}}}, but example {example.id!r} has no "
                    f"metadata{path} (its metadata keys: {', '.join(map(str, example.metadata)) or 'none'})"
                )


def parse_score(reply: str, max_score: float) -> float:
    """The score in a judge's reply, scaled to [0, 1]: "Score: 7" (else the last number) / max."""
    matches = list(_SCORE.finditer(reply))
    if matches:
        match = matches[-1]
        value = float(match.group(1))
    else:
        numbers = _NUMBER.findall(reply)
        if not numbers:
            raise ValueError(f"the judge's reply has no score: {reply[:200]!r}")
        value = float(numbers[-1])
    return min(max(value / max_score, 0.0), 1.0)


@register_reward("judge", check=_check_rubric, check_examples=_check_rubric_metadata)
def judge_reward(
    completion: str,
    example: Example,
    *,
    url: str,
    model: str = "default",
    rubric: str = DEFAULT_RUBRIC,
    max_score: Annotated[float, Gt(0)] = 10.0,
    extract: ExtractMode | None = None,
    api_key_env: str | None = None,
    timeout_s: Annotated[float, Gt(0)] = 30.0,
    retries: Annotated[int, Ge(0)] = 2,
    backoff_s: Annotated[float, Ge(0)] = 0.5,
    max_concurrency: Annotated[int, Ge(1)] = 8,
    cache_dir: str | None = None,
    max_tokens: Annotated[int, Gt(0)] = 32,
    few_shot: list[tuple[str, str]] | None = None,
) -> float:
    """Ask the judge at ``url`` to grade the completion; the parsed score divided by ``max_score``.

    ``rubric`` is a ``str.format`` template with ``{question}``, ``{reference}``, ``{answer}``,
    ``{max_score}`` and ``{metadata[key]}`` (any depth: ``{metadata[extra_info][rubric]}``): the
    example's metadata, e.g. a per-example rubric column of a data file. ``extract`` (an
    :func:`extract_answer` mode) grades only the extracted answer; by default the judge sees the
    whole completion. ``few_shot``: (user message, reply) pairs sent before the rubric as chat
    turns, e.g. the demonstration a verifier trained in a role game saw (docs/roles.md).
    """
    answer = completion if extract is None else (extract_answer(completion, mode=extract) or "")
    try:
        prompt = rubric.format(
            question=example.question,
            reference=example.reference if example.reference is not None else "(none)",
            answer=answer,
            max_score=f"{max_score:g}",
            metadata=example.metadata,
        )
    except (KeyError, IndexError) as error:
        raise ValueError(
            f"the judge rubric reads metadata {error} that example {example.id!r} lacks"
        ) from None
    client = JudgeClient(
        url=url,
        model=model,
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        retries=retries,
        backoff_s=backoff_s,
        max_concurrency=max_concurrency,
        cache_dir=cache_dir,
        max_tokens=max_tokens,
    )
    turns = [
        {"role": role, "content": text}
        for pair in few_shot or ()
        for role, text in zip(("user", "assistant"), pair, strict=True)
    ]
    return parse_score(client.complete([*turns, {"role": "user", "content": prompt}]), max_score)
