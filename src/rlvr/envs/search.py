"""Search over a local corpus, Search-R1's protocol: ``<search>`` → ``<information>`` → ``<answer>``.

Each model turn either searches (``<search>query</search>``; the turn ends at ``</search>``, the
environment's stop string) and gets the top ``k`` documents back inside ``<information>`` tags, or
answers (``<answer>...</answer>``), which ends the episode with reward 1.0 if the answer equals
the example's reference after SQuAD normalization, else 0.0 — the same judgement as the
``exact_match`` reward with ``extract="answer_tag", normalize="squad"``, which is how the reward
pool scores the final answer. A turn with neither is told what to write and counted as invalid.

The corpus is :func:`~rlvr.envs.search_corpus.build_corpus` of the example's
``metadata["corpus_seed"]`` and ``["corpus_size"]``; its BM25 index (``bm25s``, in-process) is
built once per corpus and shared by every episode.
"""

from __future__ import annotations

import functools
import random
import threading
from typing import Literal

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.envs.search_corpus import Corpus, Document, Question, build_corpus
from rlvr.rewards.builtin import exact_match_reward

DEFAULT_CORPUS_SIZE = 200
MAX_CORPUS_SIZE = 10000  # the largest corpus a data row may ask for (it is generated and indexed)

_SEARCH_OPEN, _SEARCH_CLOSE = "<search>", "</search>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"

INVALID_TURN_FEEDBACK = (
    "No search or answer found. Write <search>your query</search> to look something up, "
    "or <answer>the answer</answer> to finish."
)
EMPTY_QUERY_FEEDBACK = "The search query was empty. Write <search>your query</search> with some words in it."
LAST_TURN_HINT = "This is your last turn: write your answer as <answer>short answer</answer>."

SYSTEM_PROMPT = (
    "You answer questions about people, towns and companies that are only described in a private "
    "encyclopedia. Look facts up: write <search>query</search> and the results come back inside "
    "<information> and </information>. You may search more than once. When you know the answer, "
    "write it as <answer>short answer</answer>."
)
# One worked exchange as real chat turns (question -> search -> information -> answer), placed
# between the system message and the question when the environment demonstrates (the default). A
# 135M model copies a demonstrated turn structure far more readily than one described in prose.
DEMONSTRATION: tuple[Message, ...] = (
    {"role": "user", "content": "Question: In which town was Dovan Reth born?"},
    {"role": "assistant", "content": "<search>Dovan Reth born</search>"},
    {
        "role": "tool",
        "content": "<information>Doc 1 (Dovan Reth): Dovan Reth was born in Hollem in 1921. "
        "Dovan worked as a tailor.</information>",
    },
    {"role": "assistant", "content": "<answer>Hollem</answer>"},
)


class BM25Index:
    """BM25 (Lucene's variant, ``bm25s``) over a corpus's documents, title included.

    English stop words are dropped and nothing is stemmed: the corpus's names are invented words.
    ``search`` is safe to call from several threads (episodes step concurrently).
    """

    def __init__(self, documents: tuple[Document, ...]) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        self.documents = documents
        self._tokenizer = Tokenizer(lower=True, stopwords="en")
        ids = self._tokenizer.tokenize([d.contents for d in documents], return_as="ids", show_progress=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(ids, show_progress=False)
        # bm25s does not promise thread safety (its tokenizer writes its vocabulary on some paths);
        # a search takes about 0.2 ms, so holding a lock costs concurrent episodes nothing.
        self._lock = threading.Lock()

    def search(self, query: str, k: int) -> list[tuple[Document, float]]:
        """The ``k`` best documents for ``query`` with their scores, best first; documents that
        share no word with the query (score 0) are left out, so a query of unknown words finds none."""
        k = min(k, len(self.documents))
        with self._lock:
            ids = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
            found, scores = self._retriever.retrieve(ids, k=k, show_progress=False, n_threads=0)
        return [(self.documents[int(i)], float(s)) for i, s in zip(found[0], scores[0], strict=True) if s > 0]


@functools.lru_cache(maxsize=8)
def corpus_index(seed: int, size: int = DEFAULT_CORPUS_SIZE) -> BM25Index:
    """The BM25 index of ``build_corpus(seed, size)``, built once per process."""
    return BM25Index(build_corpus(seed, size).documents)


def format_information(hits: list[tuple[Document, float]], max_chars: int) -> str:
    """The observation for a search: numbered documents inside ``<information>`` tags, the
    documents' text cut to ``max_chars`` characters in all (the tags are not counted)."""
    body = "\n".join(f"Doc {n} ({doc.title}): {doc.text}" for n, (doc, _) in enumerate(hits, 1))
    if not hits:
        body = "No documents found."
    if len(body) > max_chars:
        body = body[:max_chars].rstrip() + " ..."
    return f"<information>{body}</information>"


def parse_turn(text: str) -> tuple[Literal["search", "answer", "invalid"], str]:
    """The action in a model turn: ``("search", query)``, ``("answer", answer)`` or ``("invalid", "")``.

    Whichever tag closes first wins; text after it is ignored (a model that kept writing past
    ``</search>`` ran beyond its stop string). The content is stripped; it may be empty.
    """
    search_end = text.find(_SEARCH_CLOSE)
    answer_end = text.find(_ANSWER_CLOSE)
    search_open = text.rfind(_SEARCH_OPEN, 0, search_end) if search_end >= 0 else -1
    answer_open = text.rfind(_ANSWER_OPEN, 0, answer_end) if answer_end >= 0 else -1
    if search_open < 0:
        search_end = -1
    if answer_open < 0:
        answer_end = -1
    if search_end >= 0 and (answer_end < 0 or search_end < answer_end):
        return "search", text[search_open + len(_SEARCH_OPEN) : search_end].strip()
    if answer_end >= 0:
        return "answer", text[answer_open + len(_ANSWER_OPEN) : answer_end].strip()
    return "invalid", ""


@register_env("search")
class SearchEnv(Environment):
    """One question answered by searching the example's corpus (see the module docstring).

    ``k``: documents per search; ``max_chars``: the observation's character budget; ``max_turns``:
    model turns before the episode ends unanswered with reward 0; ``role``: the role of the
    environment's messages; ``demonstrate``: open with one worked exchange as chat turns
    (:data:`DEMONSTRATION`) between the system message and the question. ``corpus_seed`` /
    ``corpus_size`` are used only for an example whose metadata does not name its corpus.

    ``retrieval_reward`` (default 0: off) is a process reward, earned the first time a search brings
    back one of the question's gold documents (``metadata["gold_docs"]``), split evenly between
    them: at most ``retrieval_reward`` per episode. ``retrieval_paid`` says when it is paid:
    ``"answer"`` (the default) adds what the episode earned to the answering turn's reward, right or
    wrong, so an episode that never answers earns nothing — searching every turn cannot collect it;
    ``"search"`` pays it on the searching turn, which a policy can collect without ever answering
    (the local optimum a 25-step run found at seed 1: docs/agents.md). Totals with ``"answer"``: a
    right answer after finding the gold documents 1 + r, a right answer without them 1, a wrong one
    after finding them r, a wrong one without them 0, no answer 0.

    ``last_turn_hint`` (default on) adds :data:`LAST_TURN_HINT` to the message before the model's
    last turn. ``Step.info`` holds what the turn adds to the run's counters (``searches``,
    ``invalid_turns``, ``empty_searches``, ``gold_retrieved``, ``unanswered``: the turn limit came
    first); :meth:`outcome` has the episode's totals, among them ``process_unanswered``: 1 when the
    episode earned process reward and ended without an answer — the signature of a policy that
    farms the process reward (``reward/env/process_unanswered`` in metrics.jsonl, warned about by
    the run).
    """

    stop_strings = (_SEARCH_CLOSE,)
    # what a data row's env_params may set (rlvr.envs.data_params); a corpus is built per
    # (seed, size), so its size is bounded for rows (metadata corpus_size too: MAX_CORPUS_SIZE)
    data_params = {
        "k": DataParam(int, 1, 50),
        "max_chars": DataParam(int, 1, 20000),
        "max_turns": DataParam(int, 1, 32),
        "role": DataParam(str, choices=("tool", "user")),
        "corpus_seed": DataParam(int, 0, 2**31 - 1),
        "corpus_size": DataParam(int, 1, MAX_CORPUS_SIZE),
        "demonstrate": DataParam(bool),
        "retrieval_reward": DataParam(float, 0.0, 1.0),
        "retrieval_paid": DataParam(str, choices=("answer", "search")),
        "last_turn_hint": DataParam(bool),
    }

    def __init__(
        self,
        k: int = 3,
        max_chars: int = 1000,
        max_turns: int = 4,
        role: str = "tool",
        corpus_seed: int = 0,
        corpus_size: int = DEFAULT_CORPUS_SIZE,
        demonstrate: bool = True,
        retrieval_reward: float = 0.0,
        retrieval_paid: Literal["answer", "search"] = "answer",
        last_turn_hint: bool = True,
    ) -> None:
        if k < 1 or max_chars < 1 or max_turns < 1:
            raise ValueError(
                f"search env: k, max_chars and max_turns must be positive, got {k}, {max_chars}, {max_turns}"
            )
        if retrieval_paid not in ("answer", "search"):
            raise ValueError(
                f"search env: retrieval_paid must be 'answer' or 'search', got {retrieval_paid!r}"
            )
        self.k, self.max_chars, self.max_turns, self.role = k, max_chars, max_turns, role
        self.demonstrate, self.retrieval_reward = demonstrate, retrieval_reward
        self.retrieval_paid, self.last_turn_hint = retrieval_paid, last_turn_hint
        self._gold: frozenset[int] = frozenset()
        self._found: set[int] = set()
        self._default_corpus = (corpus_seed, corpus_size)
        self._example: Example | None = None
        self._index: BM25Index | None = None
        self.turns = self.searches = self.invalid_turns = 0
        self.solved = self.answered = False

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        if example.reference is None:
            raise ValueError(f"search env: example {example.id!r} has no reference answer")
        seed = int(example.metadata.get("corpus_seed", self._default_corpus[0]))
        size = int(example.metadata.get("corpus_size", self._default_corpus[1]))
        if not 1 <= size <= MAX_CORPUS_SIZE:  # rows name their corpus: each size is a corpus built
            raise ValueError(
                f"search env: {example.where}: corpus_size must be 1..{MAX_CORPUS_SIZE}, got {size}"
            )
        self._example, self._index = example, corpus_index(seed, size)
        self._gold, self._found = frozenset(int(d) for d in example.metadata.get("gold_docs", ())), set()
        self.turns = self.searches = self.invalid_turns = 0
        self.solved = self.answered = False
        if not self.demonstrate:
            return list(example.prompt)
        system = [m for m in example.prompt if m["role"] == "system"]
        rest = [m for m in example.prompt if m["role"] != "system"]
        demo = [dict(m, role=self.role) if m["role"] == "tool" else dict(m) for m in DEMONSTRATION]
        return [*system, *demo, *rest]

    def step(self, text: str) -> Step:
        if self._example is None or self._index is None:
            raise RuntimeError("search env: step() before reset()")
        self.turns += 1
        action, content = parse_turn(text)
        if action == "answer":
            reward = exact_match_reward(
                f"{_ANSWER_OPEN}{content}{_ANSWER_CLOSE}",
                self._example,
                extract="answer_tag",
                normalize="squad",
            )
            self.solved, self.answered = reward == 1.0, True
            if self.retrieval_paid == "answer":
                reward += self.process_reward()
            return Step(reward=reward, done=True)
        info: dict[str, float] = {}
        reward = 0.0
        if action == "search" and content:
            self.searches += 1
            info["searches"] = 1.0
            hits = self._index.search(content, self.k)
            new_gold = {doc.id for doc, _ in hits} & self._gold - self._found
            if new_gold:
                self._found |= new_gold
                info["gold_retrieved"] = float(len(new_gold))
                if self.retrieval_paid == "search":
                    reward = self.retrieval_reward * len(new_gold) / len(self._gold)
            reply = format_information(hits, self.max_chars)
        else:
            self.invalid_turns += 1
            info["invalid_turns"] = 1.0
            if action == "search":
                info["empty_searches"] = 1.0
            reply = EMPTY_QUERY_FEEDBACK if action == "search" else INVALID_TURN_FEEDBACK
        if self.turns >= self.max_turns:
            info["unanswered"] = 1.0
            return Step(reward=reward, done=True, info=info)
        if self.last_turn_hint and self.turns == self.max_turns - 1:
            reply = f"{reply}\n{LAST_TURN_HINT}"
        return Step(messages=[{"role": self.role, "content": reply}], reward=reward, info=info)

    def has_expert(self) -> bool:
        return True

    def expert_turn(self, messages: list[Message]) -> str:
        """The oracle's next turn (the SFT demonstrations of ``sft.player: optimal``): search with
        the question's own words, then for each further hop with the name of the entity the last
        gold document leads to (the founder a company's document names), and once every gold
        document has come back, answer with the reference — the span the gold document holds. It
        reads the episode (the example's reference and gold documents), not only ``messages``
        (it won all 720 questions of corpora 0 and 1; docs/agents.md)."""
        if self._example is None or self._index is None:
            raise RuntimeError("search env: expert_turn() before reset()")
        # in the order the hops need them (self._gold is the same ids as a set)
        missing = [d for d in map(int, self._example.metadata.get("gold_docs", ())) if d not in self._found]
        if not missing:
            return f"{_ANSWER_OPEN}{self._example.reference}{_ANSWER_CLOSE}"
        if self.searches == 0:
            query = self._example.question.removeprefix("Question: ").rstrip("?").strip()
        elif 0 <= missing[0] < len(self._index.documents):
            query = self._index.documents[missing[0]].title
        else:
            raise ValueError(
                f"search env: {self._example.where}: gold document {missing[0]} is not in its corpus "
                f"of {len(self._index.documents)} documents"
            )
        return f"{_SEARCH_OPEN}{query}{_SEARCH_CLOSE}"

    def process_reward(self) -> float:
        """The retrieval reward the episode has earned so far (paid or not)."""
        return self.retrieval_reward * len(self._found) / len(self._gold) if self._gold else 0.0

    def outcome(self) -> dict[str, float]:
        earned = self.process_reward() > 0
        return {
            "solved": float(self.solved),
            "answered": float(self.answered),
            "searches": float(self.searches),
            "invalid_turns": float(self.invalid_turns),
            "turns": float(self.turns),
            "gold_found": len(self._found) / len(self._gold) if self._gold else 0.0,
            "process_unanswered": float(earned and not self.answered),
        }


def search_examples(
    count: int,
    seed: int,
    *,
    corpus_size: int = DEFAULT_CORPUS_SIZE,
    corpus_seed: int = 0,
    split: Literal["train", "eval"] = "train",
    eval_fraction: float = 0.25,
    hops: tuple[int, ...] = (1,),
) -> list[Example]:
    """``count`` questions about corpus ``(corpus_seed, corpus_size)``, drawn by ``seed``.

    The corpus's questions are split once, by ``corpus_seed``, into an eval part
    (``eval_fraction`` of them) and a train part, so train and eval never share a question
    whatever ``seed`` and ``count`` are. ``hops`` selects single-hop (1) and/or two-hop (2)
    questions. Asking for more questions than the split holds is an error.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"search_examples: split must be 'train' or 'eval', got {split!r}")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"search_examples: eval_fraction must be in (0, 1), got {eval_fraction}")
    corpus = build_corpus(corpus_seed, corpus_size)
    pool = split_questions(corpus, eval_fraction)[split == "eval"]
    pool = [q for q in pool if q.hops in hops]
    if count > len(pool):
        raise ValueError(
            f"search_examples: {count} {split} questions asked, but corpus {corpus_seed} of {corpus_size} "
            f"documents has {len(pool)} with hops in {hops}; use a larger corpus_size"
        )
    chosen = random.Random(seed).sample(pool, count)
    return [
        Example(
            id=f"search-{corpus_seed}-{corpus_size}-{q.id}",
            prompt=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"Question: {q.text}"},
            ],
            reference=q.answer,
            data_source="search",
            verifier="exact_match",
            metadata={
                "env": "search",
                "corpus_seed": corpus_seed,
                "corpus_size": corpus_size,
                "question_id": q.id,
                "kind": q.kind,
                "hops": q.hops,
                "gold_docs": list(q.gold),
            },
        )
        for q in chosen
    ]


def split_questions(corpus: Corpus, eval_fraction: float = 0.25) -> tuple[list[Question], list[Question]]:
    """``(train, eval)``: the corpus's questions shuffled by its seed, ``eval_fraction`` held out."""
    order = list(corpus.questions)
    random.Random(f"rlvr-search-split:{corpus.seed}").shuffle(order)
    n_eval = round(len(order) * eval_fraction)
    return order[n_eval:], order[:n_eval]
