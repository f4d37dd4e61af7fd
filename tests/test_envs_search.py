"""The search environment: seeded corpus, BM25 retrieval, Search-R1 protocol, exact-match reward."""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlvr.data.example import Example
from rlvr.envs import make_env
from rlvr.envs.search import (
    DEMONSTRATION,
    EMPTY_QUERY_FEEDBACK,
    INVALID_TURN_FEEDBACK,
    LAST_TURN_HINT,
    SYSTEM_PROMPT,
    SearchEnv,
    corpus_index,
    format_information,
    parse_turn,
    search_examples,
    split_questions,
)
from rlvr.envs.search_corpus import RESERVED_NAMES, Corpus, build_corpus
from rlvr.rewards import get_reward
from rlvr.rewards.extract import normalize_answer

SIZE = 200  # the default corpus: 200 documents, 720 questions


def _contains(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(phrase)}\b", text) is not None


def _all_examples(size: int = SIZE) -> list[Example]:
    """Every question of the corpus as an example, train and eval, one and two hops."""
    corpus = build_corpus(0, size)
    examples = []
    for split, questions in zip(("train", "eval"), split_questions(corpus)):
        for hops in (1, 2):
            count = sum(q.hops == hops for q in questions)
            examples += search_examples(count, 0, corpus_size=size, split=split, hops=(hops,))
    return examples


def _run(env: SearchEnv, example: Example, turns: list[str]) -> tuple[float, list, dict]:
    env.reset(example, random.Random(0))
    steps = []
    for text in turns:
        steps.append(env.step(text))
        if steps[-1].done:
            break
    return steps[-1].reward, steps, env.outcome()


# -- the corpus ----------------------------------------------------------------------------------


def test_corpus_is_deterministic_per_seed():
    first = build_corpus.__wrapped__(3, 100)
    again = build_corpus.__wrapped__(3, 100)
    other = build_corpus.__wrapped__(4, 100)
    assert first == again
    assert first.documents != other.documents
    assert len(first.documents) == 100
    assert build_corpus(3, 100) is build_corpus(3, 100)  # cached in-process
    assert search_examples(20, 5, corpus_size=100, corpus_seed=3) == search_examples(
        20, 5, corpus_size=100, corpus_seed=3
    )


@pytest.mark.parametrize("size", [50, SIZE])
def test_every_answer_is_in_exactly_the_intended_document(size):
    corpus = build_corpus(0, size)
    titles = {d.title for d in corpus.documents}
    assert len(titles) == len(corpus.documents), "one document per entity, titles unique"
    for q in corpus.questions:
        gold = corpus.documents[q.gold[-1]]
        assert _contains(gold.text, q.answer), (q, gold)
        naming_subject = [d for d in corpus.documents if _contains(d.contents, q.subject)]
        with_answer = [d.id for d in naming_subject if _contains(d.contents, q.answer)]
        if q.hops == 1:
            assert with_answer == [gold.id], q
        else:  # the company's document names the founder, whose own document holds the answer
            company, founder = (corpus.documents[i] for i in q.gold)
            assert _contains(company.text, founder.title) and not _contains(company.text, q.answer), q


def test_questions_have_distractors_that_share_their_words():
    corpus = build_corpus(0, SIZE)
    people = [q for q in corpus.questions if q.kind == "person.birth_town"]
    shared = 0
    for q in people:
        first, last = q.subject.split()
        others = [
            d
            for d in corpus.documents
            if d.id != q.gold[0] and (_contains(d.contents, first) or _contains(d.contents, last))
        ]
        shared += bool(others)
    assert shared / len(people) >= 0.9


def test_the_demonstration_names_are_not_in_the_corpus():
    text = " ".join(d.contents for d in build_corpus(0, SIZE).documents)
    for name in RESERVED_NAMES:
        assert any(name in m["content"] for m in DEMONSTRATION)
        assert not _contains(text, name)


# -- retrieval -----------------------------------------------------------------------------------


def _recall(corpus: Corpus, k: int) -> float:
    index = corpus_index(corpus.seed, corpus.size)
    hits = [q.gold[0] in {d.id for d, _ in index.search(q.text, k)} for q in corpus.questions]
    return sum(hits) / len(hits)


# Measured (seed 0, the question text as the query, the first gold document): size 100: recall@1,
# @3 and @5 all 0.981 (a few town.river questions lose to other towns' "river ... flows through");
# sizes 200, 400, 1000: recall@1 0.999, @3 1.000. About 10 documents share a word of the subject's
# name at size 200 and 92 share some word with the question. The bounds leave room for other seeds.
@pytest.mark.parametrize(
    ("size", "k", "bound"), [(100, 3, 0.95), (SIZE, 1, 0.97), (SIZE, 3, 0.99), (400, 3, 0.99)]
)
def test_bm25_ranks_the_gold_document_in_the_top_k(size, k, bound):
    recall = _recall(build_corpus(0, size), k)
    print(f"recall@{k} corpus_size={size}: {recall:.3f}")
    assert recall >= bound


def test_bm25_ranks_by_the_words_that_discriminate():
    corpus = build_corpus(0, SIZE)
    index = corpus_index(0, SIZE)
    person = next(d for d in corpus.documents if " was born in " in d.text)
    hits = index.search(f"{person.title} born", 3)
    assert hits[0][0] == person and hits[0][1] > hits[1][1] > 0
    assert index.search("zzqx unknownword", 3) == []  # no shared word: nothing, not arbitrary docs


def test_concurrent_searches_equal_serial_ones():
    corpus = build_corpus(0, SIZE)
    index = corpus_index(0, SIZE)
    queries = [q.text for q in corpus.questions[:200]]
    serial = [index.search(q, 3) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda q: index.search(q, 3), queries)) == serial


# -- the protocol --------------------------------------------------------------------------------


def _oracle_turns(env: SearchEnv, example: Example) -> tuple[float, dict]:
    """Search with the question, read the gold document in the results, answer (two hops: find
    the founder in the company's document, search for the founder, read the answer there)."""
    corpus = build_corpus(example.metadata["corpus_seed"], example.metadata["corpus_size"])
    env.reset(example, random.Random(0))
    query = example.question.removeprefix("Question: ")
    gold_docs = [corpus.documents[i] for i in example.metadata["gold_docs"]]
    for hop, gold in enumerate(gold_docs):
        step = env.step(f"I should look this up. <search>{query}</search>")
        assert not step.done and step.info["searches"] == 1.0 and "invalid_turns" not in step.info
        information = step.messages[0]["content"].removesuffix(f"\n{LAST_TURN_HINT}")
        assert information.startswith("<information>") and information.endswith("</information>")
        body = information.removeprefix("<information>").removesuffix("</information>")
        shown = dict(re.findall(r"^Doc \d+ \(([^)]*)\): (.*)$", body, flags=re.M))
        assert gold.title in shown, (example.question, information)
        if hop + 1 < len(gold_docs):  # the next hop: the founder this document names
            bridge = gold_docs[hop + 1].title
            assert _contains(shown[gold.title], bridge)
            query = f"{bridge} born"
    assert _contains(shown[gold.title], example.reference)
    final = env.step(f"The document says so. <answer>{example.reference}</answer>")
    assert final.done
    return final.reward, env.outcome()


def test_oracle_policy_solves_every_question():
    examples = _all_examples()
    assert len({e.metadata["question_id"] for e in examples}) == len(build_corpus(0, SIZE).questions)
    env = SearchEnv(k=3)
    rewards = []
    for example in examples:
        reward, outcome = _oracle_turns(env, example)
        rewards.append(reward)
        assert outcome["solved"] == reward and outcome["searches"] == example.metadata["hops"]
    print(f"oracle: {sum(rewards)}/{len(rewards)}")
    assert sum(rewards) == len(rewards)


def test_retrieval_reward_paid_on_search_pays_once_per_gold_document_and_never_reaches_a_solve():
    example = next(e for e in _all_examples() if e.metadata["hops"] == 1)
    query = example.question.removeprefix("Question: ")
    env = SearchEnv(retrieval_reward=0.2, retrieval_paid="search")
    env.reset(example, random.Random(0))
    first = env.step(f"<search>{query}</search>")
    again = env.step(f"<search>{query}</search>")  # the same gold document a second time: nothing
    miss = env.step("<search>zzzz qqqq</search>")
    assert (first.reward, again.reward, miss.reward) == (0.2, 0.0, 0.0)
    assert first.info["gold_retrieved"] == 1.0 and "gold_retrieved" not in again.info
    assert env.outcome()["gold_found"] == 1.0
    wrong = env.step("<answer>nobody</answer>")
    assert wrong.done and first.reward + wrong.reward < 1.0  # searching well alone is not a solve
    # off by default: the protocol's reward is the answer's exact match only
    plain = SearchEnv()
    plain.reset(example, random.Random(0))
    assert plain.step(f"<search>{query}</search>").reward == 0.0
    two_hop = next(e for e in _all_examples() if e.metadata["hops"] == 2)
    _, outcome = _oracle_turns(SearchEnv(retrieval_reward=0.2), two_hop)
    assert outcome["gold_found"] == 1.0


def _episode_total(env: SearchEnv, example: Example, turns: list[str]) -> tuple[float, dict]:
    _, steps, outcome = _run(env, example, turns)
    return sum(step.reward for step in steps), outcome


@pytest.mark.parametrize("hops", [1, 2])
def test_hand_played_episodes_rank_answering_above_searching_alone(hops):
    """With the retrieval reward paid at the answer (the default), the optimum (find the gold
    documents, answer right) earns the most; a right answer without searching next; a wrong answer
    after finding the gold documents earns the process reward; searching every turn without ever
    answering, or doing nothing, earns 0 — so farming searches is not a local optimum."""
    example = next(e for e in _all_examples() if e.metadata["hops"] == hops)
    r = 0.2
    make = lambda: SearchEnv(retrieval_reward=r, max_turns=3)  # noqa: E731
    optimum, best = _oracle_turns(make(), example)
    query = example.question.removeprefix("Question: ")
    guessed, _ = _episode_total(make(), example, [f"<answer>{example.reference}</answer>"])
    searched_wrong, wrong_outcome = _episode_total(
        make(), example, [f"<search>{query}</search>", "<answer>nobody</answer>"]
    )
    farming, farmed = _episode_total(make(), example, [f"<search>{query}</search>"] * 3)
    nothing, idle = _episode_total(make(), example, ["hmm"] * 3)
    assert optimum == pytest.approx(1.0 + r) and best["solved"] == 1.0 and best["answered"] == 1.0
    assert guessed == 1.0
    assert searched_wrong == pytest.approx(r * wrong_outcome["gold_found"]) and searched_wrong > 0
    assert farming == 0.0 and nothing == 0.0
    assert optimum > guessed > searched_wrong > farming
    # the farming episode is the one the hacking metric flags; the others are not
    assert farmed["process_unanswered"] == 1.0 and farmed["answered"] == 0.0
    assert idle["process_unanswered"] == 0.0
    assert wrong_outcome["process_unanswered"] == 0.0 and best["process_unanswered"] == 0.0


def test_paid_on_search_the_farming_episode_earns_what_an_answered_one_does():
    """The old payment (on the searching turn) is the trap a seed-1 run fell into: searching every
    turn and never answering earns as much as searching and answering wrongly."""
    example = next(e for e in _all_examples() if e.metadata["hops"] == 1)
    query = example.question.removeprefix("Question: ")
    env = lambda: SearchEnv(retrieval_reward=0.2, retrieval_paid="search", max_turns=3)  # noqa: E731
    farming, farmed = _episode_total(env(), example, [f"<search>{query}</search>"] * 3)
    wrong, _ = _episode_total(env(), example, [f"<search>{query}</search>", "<answer>nobody</answer>"])
    assert farming == pytest.approx(0.2) == pytest.approx(wrong)
    assert farmed["process_unanswered"] == 1.0
    with pytest.raises(ValueError, match="retrieval_paid"):
        SearchEnv(retrieval_paid="sometimes")


def test_the_message_before_the_last_turn_says_to_answer():
    example = search_examples(1, 0)[0]
    _, steps, _ = _run(SearchEnv(max_turns=3), example, ["<search>a b</search>", "<search>c</search>", "x"])
    assert LAST_TURN_HINT not in steps[0].messages[0]["content"]
    assert steps[1].messages[0]["content"].endswith(LAST_TURN_HINT)
    _, steps, _ = _run(SearchEnv(max_turns=3, last_turn_hint=False), example, ["<search>a b</search>"] * 3)
    assert LAST_TURN_HINT not in steps[1].messages[0]["content"]


def test_guessing_without_searching_scores_near_zero():
    corpus = build_corpus(0, SIZE)
    rng = random.Random(0)
    env = SearchEnv()
    rewards = []
    for example in search_examples(150, 0, corpus_size=SIZE, split="eval"):
        # The best blind guess: an answer of the right kind (a town for a town question).
        guess = rng.choice(corpus.answers_of_kind(example.metadata["kind"]))
        reward, steps, outcome = _run(env, example, [f"<answer>{guess}</answer>"])
        assert len(steps) == 1 and outcome["searches"] == 0
        rewards.append(reward)
    mean = sum(rewards) / len(rewards)
    print(f"typed random guess: {mean:.3f}")
    assert mean <= 0.1


def test_answer_is_normalized_like_search_r1():
    example = search_examples(1, 0)[0]
    env = SearchEnv()
    assert _run(env, example, [f"<answer>  the {example.reference.upper()}. </answer>"])[0] == 1.0
    assert _run(env, example, [f"<answer>{example.reference}x</answer>"])[0] == 0.0
    assert _run(env, example, ["<answer> </answer>"])[0] == 0.0


def test_malformed_turns_are_counted_and_answered_with_feedback():
    example = search_examples(1, 0)[0]
    env = SearchEnv(max_turns=5)
    turns = [
        "I think the answer is somewhere.",  # neither tag
        "<search>unclosed query",  # no closing tag: not a search
        "<search>  </search>",  # empty query
        "</search><search>",  # tags in the wrong order
        f"<answer>{example.reference}</answer>",
    ]
    reward, steps, outcome = _run(env, example, turns)
    assert [s.done for s in steps] == [False, False, False, False, True]
    assert [s.info.get("invalid_turns") for s in steps[:4]] == [1.0] * 4
    assert steps[2].info.get("empty_searches") == 1.0
    assert [s.messages[0]["content"] for s in steps[:4]] == [
        INVALID_TURN_FEEDBACK,
        INVALID_TURN_FEEDBACK,
        EMPTY_QUERY_FEEDBACK,
        f"{INVALID_TURN_FEEDBACK}\n{LAST_TURN_HINT}",
    ]
    assert reward == 1.0
    assert outcome == {
        "solved": 1.0,
        "answered": 1.0,
        "searches": 0.0,
        "invalid_turns": 4.0,
        "turns": 5.0,
        "gold_found": 0.0,
        "process_unanswered": 0.0,
    }


def test_max_turns_ends_the_episode_unsolved():
    example = search_examples(1, 0)[0]
    env = SearchEnv(max_turns=2)
    reward, steps, outcome = _run(
        env, example, ["<search>a</search>", "<search>b</search>", "<answer>x</answer>"]
    )
    assert len(steps) == 2 and steps[-1].done and steps[-1].messages == []
    assert steps[-1].info == {"searches": 1.0, "unanswered": 1.0}
    assert reward == 0.0 and outcome["solved"] == 0.0 and outcome["searches"] == 2.0
    # an invalid last turn also ends it
    _, steps, outcome = _run(SearchEnv(max_turns=1), example, ["hmm"])
    assert steps[0].done and steps[0].info == {"invalid_turns": 1.0, "unanswered": 1.0}


def test_text_after_the_stop_string_is_ignored():
    assert SearchEnv.stop_strings == ("</search>",)
    example = search_examples(1, 0)[0]
    env = SearchEnv()
    # The answer written after </search> was never meant to be generated: the turn is a search.
    reward, steps, _ = _run(
        env, example, [f"<search>{example.question}</search><answer>{example.reference}</answer>"]
    )
    assert not steps[0].done and steps[0].reward == 0.0 and steps[0].info["searches"] == 1.0
    assert parse_turn("<search>first</search> more <search>second</search>") == ("search", "first")
    assert parse_turn("<answer>A</answer> <search>q</search>") == ("answer", "A")
    assert parse_turn("<search>q <answer>A</answer> </search>") == ("answer", "A")
    assert parse_turn("no tags") == ("invalid", "")


def test_observation_is_truncated_to_the_budget():
    index = corpus_index(0, SIZE)
    hits = index.search("born town river founded", 5)
    assert len(hits) == 5
    full = format_information(hits, 10_000)
    short = format_information(hits, 100)
    assert full.count("Doc ") == 5 and len(full) > 300
    body = short.removeprefix("<information>").removesuffix("</information>")
    assert body.endswith(" ...") and len(body) <= 100 + len(" ...")
    assert full.removeprefix("<information>").startswith(body.removesuffix(" ...").rstrip())
    example = search_examples(1, 0)[0]
    assert SearchEnv(demonstrate=False).reset(example, random.Random(0)) == example.prompt
    opening = SearchEnv(role="user").reset(example, random.Random(0))
    # system, the worked exchange as chat turns (its observation in the environment's role), question
    assert opening[0] == example.prompt[0] and opening[-1] == example.prompt[-1]
    assert [m["role"] for m in opening[1:-1]] == ["user", "assistant", "user", "assistant"]
    assert opening[2]["content"] == "<search>Dovan Reth born</search>"
    env = make_env("search", {"k": 5, "max_chars": 100, "role": "user"})
    env.reset(example, random.Random(0))
    message = env.step(f"<search>{example.question}</search>").messages[0]
    assert message["role"] == "user" and len(message["content"]) <= 100 + len(
        " ...<information></information>"
    )


# -- examples and the reward ---------------------------------------------------------------------


def test_search_examples_train_and_eval_never_share_a_question():
    train = search_examples(500, 1, split="train", hops=(1, 2))
    eval_ = search_examples(180, 2, split="eval", hops=(1, 2))
    assert not {e.question for e in train} & {e.question for e in eval_}
    assert len({e.question for e in train}) == 500
    example = eval_[0]
    assert example.metadata["env"] == "search" and example.metadata["corpus_seed"] == 0
    assert example.prompt[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert example.question.startswith("Question: ") and example.verifier == "exact_match"
    with pytest.raises(ValueError, match="larger corpus_size"):
        search_examples(10_000, 0)
    # another corpus_seed is another corpus: the questions change
    assert {e.question for e in search_examples(50, 0, corpus_seed=1)} != {
        e.question for e in search_examples(50, 0)
    }


def test_the_exact_match_reward_scores_the_final_answer_like_the_env():
    reward = get_reward("exact_match")
    example = Example(id="x", prompt=[], reference="Lune")
    params = {"extract": "answer_tag", "normalize": "squad"}
    assert reward("<search>q</search> ... <answer>The  lune.</answer>", example, **params) == 1.0
    assert reward("<answer>Lune river</answer>", example, **params) == 0.0
    assert reward("<answer>the</answer>", Example(id="y", prompt=[], reference="A"), **params) == 0.0
    assert reward("<answer>the lune</answer>", example) == 0.0  # the default stays strict
    assert normalize_answer("  The  Lune's,  river! ") == "lunes river"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Thelma") == "thelma"  # articles only as whole words
