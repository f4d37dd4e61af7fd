"""Instruction-following constraints: each checker on passing and failing text, and the reward."""

from __future__ import annotations

import json

import pytest

from rlvr.data import load_file
from rlvr.data.example import Example
from rlvr.rewards import get_reward
from rlvr.rewards.ifeval import CONSTRAINTS, check_constraint, count_sentences, paragraphs
from rlvr.rewards.ifeval_official import OFFICIAL, check_instruction, load_ifeval
from rlvr.rewards.ifeval_text import detect_language

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
    ({"type": "title"}, "<<A Poem>>\nroses", "<<  >>\nroses"),  # a blank title is no title
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


# -- the official IFEval format and definitions ---------------------------------------------------

# One passing and one failing response per official instruction id, written from the official
# checker's definitions (docs/rewards.md, "Agreement with external references", counts them).
OFFICIAL_CASES = [
    ("keywords:existence", {"keywords": ["cat", "Fur"]}, "The CAT has fur.", "The cat is bald."),
    ("keywords:frequency", {"keyword": "yes", "frequency": 2, "relation": "at least"}, "yes, yes", "yes"),
    ("keywords:frequency", {"keyword": "no", "frequency": 2, "relation": "less than"}, "no", "no no"),
    ("keywords:forbidden_words", {"forbidden_words": ["dog"]}, "Dogma is fine.", "A Dog!"),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zoo zz",
        "zoo",
    ),
    ("language:response_language", {"language": "de"}, "Der Hund ist nicht in dem Haus.", "The dog is out."),
    (
        "language:response_language",
        {"language": "en"},
        "the dog is not in the house",
        "el perro es muy grande y la casa",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "Dr. Smith met Mr. J. Doe at 3.30 p.m. in the U.K. office. They talked.",
        "One. Two. Three.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", "a\n\nb"),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "***\na\n***\nb\n***", "a\n***\n***\nb"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "don't stop", "one two"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        'First.\n\n"Then, more.',
        "First.\n\nNow then.",
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[a] and [b]", "[a] only"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\np. s. bye", "Hi.\nPS bye"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S bye", "Hi.\nP.S. bye"),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 2},
        "* a\n- b\n1. c",
        "* a\n+ b\n1. c\n**bold**",
    ),
    ("detectable_format:constrained_response", {}, "Well. My answer is no.", "My answer is: no"),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*one* and **two**",
        "*one* and ** **",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\na\nSection 2\nb",
        "Section 1\na\nsection 2\nb",
    ),
    ("detectable_format:json_format", {}, '```JSON\n{"a": 1}\n```', "{'a': 1}"),
    ("detectable_format:title", {}, "<<A Poem>>\nroses", "<<   >>\nroses"),
    ("combination:two_responses", {}, "one\n******\ntwo", "same\n******\nsame"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "say hi. Hi!", "Hi! Say hi."),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        '"Done. Any other questions?"',
        "Any other questions? No.",
    ),
    ("startend:quotation", {}, ' "wrapped" ', 'not "wrapped"'),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "NASA and WELL-KNOWN things",
        "NASA and others",
    ),
    ("change_case:english_capital", {}, "THE DOG IS IN THE HOUSE", "EL PERRO ES MUY GRANDE Y LA CASA"),
    ("change_case:english_lowercase", {}, "the dog is in the house", "the dog is in the House"),
    ("change_case:english_lowercase", {}, "the dog is in the house", "el perro es muy grande y la casa"),
    ("punctuation:no_comma", {}, "No commas here.", "One, two."),
]


@pytest.mark.parametrize(("instruction", "kwargs", "good", "bad"), OFFICIAL_CASES)
def test_official_instruction(instruction, kwargs, good, bad):
    for strict in (False, True):
        assert check_instruction(good, instruction, kwargs, strict) is True
        assert check_instruction(bad, instruction, kwargs, strict) is False


def test_every_official_instruction_is_covered():
    assert {case[0] for case in OFFICIAL_CASES} == set(OFFICIAL)
    assert len(OFFICIAL) == 25


@pytest.mark.parametrize(
    ("instruction", "kwargs", "text", "strict_verdict", "rlvr_verdict"),
    [
        # the official checker counts a language it cannot detect as followed; rlvr does not
        ("language:response_language", {"language": "fr"}, "12345 !!!", True, False),
        # an empty [] is a placeholder to the official checker
        ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[] and [ ]", True, False),
        # the official checker finds the marker anywhere in a line
        (
            "detectable_content:postscript",
            {"postscript_marker": "P.S."},
            "Bye now. P.S. see you",
            True,
            False,
        ),
    ],
)
def test_where_rlvr_deliberately_differs(instruction, kwargs, text, strict_verdict, rlvr_verdict):
    assert check_instruction(text, instruction, kwargs, strict=True) is strict_verdict
    assert check_instruction(text, instruction, kwargs, strict=False) is rlvr_verdict


def test_keywords_are_literal_not_regular_expressions():
    assert check_instruction("I code in C++.", "keywords:existence", {"keywords": ["c++"]}) is True
    assert check_instruction("I code in C.", "keywords:existence", {"keywords": ["c++"]}) is False


def test_official_instruction_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown IFEval instruction 'punctuation:no_comas'"):
        check_instruction("x", "punctuation:no_comas", {})
    with pytest.raises(ValueError, match="needs 'num_words'"):
        check_instruction("x", "length_constraints:number_words", {"relation": "at least", "num_words": None})
    with pytest.raises(ValueError, match="less than"):
        check_instruction("x", "length_constraints:number_words", {"relation": "at most", "num_words": 2})


STRICT_CASES = [
    # (rlvr constraint, text, rlvr's default verdict, strict (official) verdict)
    ({"type": "paragraphs", "n": 2}, "a\n\nb", True, False),  # only *** divides paragraphs
    ({"type": "paragraphs", "n": 2}, "a\n***\nb", True, True),
    ({"type": "max_paragraphs", "n": 3}, "a\n***\n***\nb", True, False),  # an empty middle paragraph
    ({"type": "bullet_count", "n": 2}, "1. a\n2. b", True, False),  # numbered items are not bullets
    ({"type": "bullet_count", "n": 2}, "+ a\n+ b", True, False),
    ({"type": "bullet_count", "n": 2}, "*a\n- b", False, True),
    ({"type": "lowercase"}, "el perro es muy grande y la casa", True, False),  # English only
    ({"type": "lowercase"}, "1234", True, False),  # no letters: not lower case
    ({"type": "uppercase"}, "THE DOG IS IN THE HOUSE", True, True),
]


@pytest.mark.parametrize(("constraint", "text", "default", "strict"), STRICT_CASES)
def test_strict_mode_follows_the_official_definitions(constraint, text, default, strict):
    assert check_constraint(text, constraint) is default
    assert check_constraint(text, constraint, strict=True) is strict


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Dr. Smith went to Washington. He left.", 2),
        ("I met J. Smith today. It was fine.", 2),
        ("Visit example.com for more. Thanks!", 2),
        ("We eat fruit, e.g. apples. Then we rest.", 2),
        ("He lives in the U.S. He likes it.", 2),
        ("Apples, pears, etc. are fruit.", 1),
        ('He said "Stop." Then he left.', 2),
        ("Pi is 3.14 and e is 2.72. Done", 2),
        ("", 0),
    ],
)
def test_sentence_splitting_with_abbreviations(text, sentences):
    assert count_sentences(text) == sentences


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("the quick brown fox jumps over the lazy dog", "en"),
        ("THE QUICK BROWN FOX IS ON THE ROAD", "en"),
        ("le chat est sur la table et il dort", "fr"),
        ("это хорошая книга и я её читаю", "ru"),
        ("це гарна книга і я її читаю", "uk"),
        ("यह एक अच्छी किताब है और मैं इसे पढ़ रहा हूँ", "hi"),
        ("これは本です", "ja"),
        ("안녕하세요 반갑습니다", "ko"),
        ("12345 !!!", None),
    ],
)
def test_language_detection_reads_lower_case_text(text, language):
    assert detect_language(text) == language


def test_the_official_data_format_loads_and_scores(tmp_path):
    rows = [
        {
            "key": 1000,
            "prompt": "Write about cats without commas, in at least 5 words.",
            "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
            "kwargs": [{}, {"relation": "at least", "num_words": 5}],
        },
        {  # the published data set lists every argument name, null where it does not apply
            "key": 1001,
            "prompt": "Give a title.",
            "instruction_id_list": ["detectable_format:title"],
            "kwargs": [{"num_words": None, "relation": None}],
        },
    ]
    path = tmp_path / "input_data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    examples = load_ifeval(path)
    assert [e.id for e in examples] == ["1000", "1001"]
    assert examples[0].prompt[-1]["content"] == rows[0]["prompt"]  # no answer format appended
    reward = get_reward("ifeval")
    assert reward("Cats sleep all day long.", examples[0]) == 1.0
    assert reward("Cats, dogs.", examples[0]) == 0.0
    assert reward("Cats sleep, all day long.", examples[0], all_or_nothing=True) == 0.0
    assert reward("<<Cats>>", examples[1]) == 1.0 and reward("<< >>", examples[1]) == 0.0
    path.write_text(json.dumps({**rows[0], "instruction_id_list": ["punctuation:no_comas", "x"]}))
    with pytest.raises(ValueError, match="no_comas"):
        load_ifeval(path)
