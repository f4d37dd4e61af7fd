"""Instruction-following constraints: each checker on passing and failing text, and the reward."""

from __future__ import annotations

import json

import pytest

from rlvr.data import load_file
from rlvr.data.example import Example
from rlvr.rewards import get_reward
from rlvr.rewards.ifeval import CONSTRAINTS, check_constraint, count_sentences, paragraphs

CASES = [
    # (constraint, passing text, failing text)
    ({"type": "min_words", "n": 3}, "one two three", "one two"),
    ({"type": "max_words", "n": 3}, "one, two three.", "one two three four"),
    ({"type": "min_sentences", "n": 2}, "First one. Second one", "Only one here."),
    ({"type": "max_sentences", "n": 1}, "Just this one!", "One. Two."),
    ({"type": "min_paragraphs", "n": 2}, "a\n\nb", "a\nb"),
    ({"type": "max_paragraphs", "n": 1}, "a\nb", "a\n\n\nb"),
    ({"type": "paragraphs", "n": 3}, "a\n***\nb\n***\nc", "a\n\nb"),
    ({"type": "include_keywords", "keywords": ["cat", "Fur"]}, "The CAT has fur.", "The cat is bald."),
    ({"type": "exclude_keywords", "keywords": ["dog"]}, "Dogma is fine (not a whole word).", "A dog!"),
    ({"type": "keyword_frequency", "keyword": "yes", "n": 2}, "yes, yes, yes", "yes and no"),
    ({"type": "keyword_frequency", "keyword": "no", "n": 1, "relation": "at most"}, "no", "no no"),
    ({"type": "keyword_frequency", "keyword": "a", "n": 2, "relation": "exactly"}, "a b a", "a a a"),
    ({"type": "json_format"}, '```json\n{"a": [1, 2]}\n```', "{'a': 1}"),
    ({"type": "bullet_count", "n": 2}, "Intro\n* one\n- two", "* one\n* two\n* three"),
    ({"type": "sections", "n": 2}, "Section 1\nintro\nSection 2\nbody", "Section 1\nonly"),
    ({"type": "lowercase"}, "all lower case, 123.", "Not all lower"),
    ({"type": "uppercase"}, "ALL CAPS 42!", "ALL CAPS but one"),
    ({"type": "start_with", "phrase": "Dear Sir"}, "  dear sir, hello", "Hello, dear sir"),
    (
        {"type": "end_with", "phrase": "Any other questions?"},
        "Done. Any other questions?",
        "Any other questions? No.",
    ),
    ({"type": "no_commas"}, "No commas here.", "One, two."),
    ({"type": "placeholders", "n": 2}, "Dear [name], at [address].", "Dear [name]."),
    ({"type": "title"}, "<<A Poem>>\nroses", "A Poem\nroses"),
    ({"type": "quotation"}, '"wrapped"', 'not "wrapped"'),
    ({"type": "postscript"}, "Body.\nP.S. bye", "Body. bye"),
    ({"type": "postscript", "marker": "P.P.S"}, "Body.\nP.P.S bye", "Body.\nP.S. bye"),
]


@pytest.mark.parametrize(
    ("constraint", "good", "bad"), CASES, ids=lambda v: v.get("type") if isinstance(v, dict) else ""
)
def test_each_checker(constraint, good, bad):
    assert check_constraint(good, constraint) is True
    assert check_constraint(bad, constraint) is False


def test_every_constraint_type_is_tested():
    assert {c["type"] for c, _, _ in CASES} == set(CONSTRAINTS)


def test_counting_helpers():
    assert count_sentences("Hi. How are you? Fine!") == 3
    assert count_sentences("Pi is 3.14 roughly") == 1  # a decimal point is not a sentence end
    assert len(paragraphs("\n\na\n\n\nb\n\n")) == 2


def test_bad_constraints_are_errors_naming_the_problem():
    with pytest.raises(ValueError, match="unknown constraint type 'max_wrds'"):
        check_constraint("x", {"type": "max_wrds", "n": 3})
    with pytest.raises(ValueError, match="needs 'n'"):
        check_constraint("x", {"type": "max_words"})
    with pytest.raises(ValueError, match="relation"):
        check_constraint("x", {"type": "keyword_frequency", "keyword": "x", "n": 1, "relation": "some"})


def test_reward_is_the_fraction_satisfied_or_all_or_nothing():
    constraints = [
        {"type": "max_words", "n": 5},
        {"type": "lowercase"},
        {"type": "include_keywords", "keywords": ["cat"]},
        {"type": "no_commas"},
    ]
    example = Example(id="i", prompt=[], metadata={"constraints": constraints})
    reward = get_reward("ifeval")
    text = "<think>Long Reasoning, With Commas, Ignored</think>the cat sat, happily"
    assert reward(text, example) == 0.75  # only the comma in the response fails
    assert reward(text, example, all_or_nothing=True) == 0.0
    assert reward("the cat sat", example, all_or_nothing=True) == 1.0
    assert reward(text, example, strip_think=False) == 0.25
    with pytest.raises(ValueError, match="constraints"):
        reward("x", Example(id="n", prompt=[]))


def test_a_jsonl_task_file_carries_constraints_into_metadata(tmp_path):
    rows = [
        {"question": "Describe a cat.", "constraints": [{"type": "max_words", "n": 5}]},
        {"question": "Shout.", "constraints": [{"type": "uppercase"}, {"type": "min_words", "n": 1}]},
    ]
    path = tmp_path / "ifeval.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    examples = load_file(path, answer_key=None, verifier="ifeval")
    reward = get_reward("ifeval")
    assert examples[0].metadata["constraints"] == rows[0]["constraints"]
    assert reward("A small furry cat.", examples[0]) == 1.0
    assert reward("HEY", examples[1]) == 1.0 and reward("hey", examples[1]) == 0.5
