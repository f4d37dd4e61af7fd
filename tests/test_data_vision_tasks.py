"""Procedural image questions (rlvr.data.vision_tasks): the pixels agree with the answers."""

from __future__ import annotations

import json
import pickle
import re
from collections import deque

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from rlvr.data.env_source import load_env_examples
from rlvr.data.example import Example
from rlvr.data.vision_tasks import (
    BAR_COLOUR,
    BOARD_COLOURS,
    COLOURS,
    LABEL_COLOUR,
    UNKNOWN_CELL,
    is_held_out,
    render_grid_board,
    scene_key,
    vision_chart_examples,
    vision_colour_examples,
    vision_count_examples,
    vision_position_examples,
)
from rlvr.errors import RlvrError
from rlvr.rewards.builtin import exact_match_reward
from rlvr.rewards.registry import get_reward

TASKS = ("vision_count", "vision_colour", "vision_position", "vision_chart")
WHITE = (255, 255, 255)


def pixels(example: Example) -> np.ndarray:
    image = example.images[0]
    assert image.mode == "RGB"
    return np.asarray(image).astype(int)


def mask_of(array: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return (array == np.array(colour)).all(axis=-1)


def components(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """8-connected components of ``mask`` by flood fill, each a list of (row, column)."""
    seen = np.zeros_like(mask, dtype=bool)
    found = []
    for start in zip(*np.nonzero(mask), strict=True):
        if seen[start]:
            continue
        seen[start] = True
        queue, cells = deque([start]), []
        while queue:
            r, c = queue.popleft()
            cells.append((r, c))
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    rr, cc = r + dr, c + dc
                    if (
                        0 <= rr < mask.shape[0]
                        and 0 <= cc < mask.shape[1]
                        and mask[rr, cc]
                        and not seen[rr, cc]
                    ):
                        seen[rr, cc] = True
                        queue.append((rr, cc))
        found.append(cells)
    return found


def shape_of(cells: list[tuple[int, int]]) -> str:
    """A component's shape by how much of its bounding box it fills: 1.0, ~0.78, ~0.55."""
    rows, cols = zip(*cells, strict=True)
    fill = len(cells) / ((max(rows) - min(rows) + 1) * (max(cols) - min(cols) + 1))
    return "square" if fill > 0.95 else "circle" if fill > 0.68 else "triangle"


def text(example: Example) -> str:
    return example.prompt[-1]["content"]


@pytest.mark.parametrize("task", TASKS)
def test_examples_are_registered_and_well_formed(task: str) -> None:
    """Each task loads as data.source=env: ids, source, verifier, plain-text prompt, picklable metadata."""
    examples = load_env_examples(task, 5, 3, "train", {})
    assert [e.id for e in examples] == [f"{task}-train-{i}" for i in range(5)]
    for example in examples:
        assert example.data_source == task and example.verifier == "exact_match"
        assert [m["role"] for m in example.prompt] == ["user"]
        assert "<answer></answer>" in text(example) and "<image" not in text(example).lower()
        assert len(example.images) == 1 and example.images[0].mode == "RGB"
        assert json.loads(json.dumps(example.metadata)) == example.metadata  # plain data only
        assert pickle.loads(pickle.dumps(example)).metadata == example.metadata


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_split_index_and_config_give_identical_images(task: str) -> None:
    config = {"size": 80}
    first = load_env_examples(task, 6, 11, "eval", config)
    again = load_env_examples(task, 10, 11, "eval", config)[:6]  # an example depends on its index only
    assert [e.images[0].tobytes() for e in first] == [e.images[0].tobytes() for e in again]
    assert [(text(e), e.reference) for e in first] == [(text(e), e.reference) for e in again]
    other = load_env_examples(task, 6, 12, "eval", config)
    assert [e.images[0].tobytes() for e in first] != [e.images[0].tobytes() for e in other]


@pytest.mark.parametrize("task", TASKS)
def test_held_out_scenes_never_appear_in_training(task: str) -> None:
    train = load_env_examples(task, 300, 0, "train", {})
    held_out = load_env_examples(task, 300, 1, "eval", {})
    assert not {e.images[0].tobytes() for e in train} & {e.images[0].tobytes() for e in held_out}
    assert not {scene_key(e.metadata["scene"]) for e in train} & {
        scene_key(e.metadata["scene"]) for e in held_out
    }
    assert not any(is_held_out(e.metadata["scene"]) for e in train)
    assert all(is_held_out(e.metadata["scene"]) for e in held_out)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"min_count": 4, "max_count": 9, "size": 96},
        {"shapes": ["triangle"], "distractors": True},
        {"distractors": True, "max_count": 8},
        {"max_count": 20, "size": 64},
    ],
)
def test_count_answer_is_the_number_of_drawn_shapes_of_that_kind(config: dict) -> None:
    for example in vision_count_examples(30, 5, "train", **config):
        target = re.match(r"How many (\w+)s are in the image\?", text(example)).group(1)
        array = pixels(example)
        foreground = ~mask_of(array, WHITE)
        colours = {tuple(p) for p in array[foreground]}
        assert len(colours) == 1 and colours <= set(COLOURS.values())  # one fill, no anti-aliasing
        shapes = [shape_of(cells) for cells in components(foreground)]
        assert str(shapes.count(target)) == example.reference, (example.id, shapes, target)
        if not config.get("distractors"):
            assert set(shapes) == {target}


@pytest.mark.parametrize("config", [{}, {"colours": ["orange", "yellow"], "size": 16}, {"size": 200}])
def test_colour_answer_is_the_shape_s_colour(config: dict) -> None:
    by_rgb = {rgb: name for name, rgb in COLOURS.items()}
    for example in vision_colour_examples(40, 2, "eval", **config):
        array = pixels(example)
        rest = array[~mask_of(array, WHITE)]
        values, counts = np.unique(rest, axis=0, return_counts=True)
        assert by_rgb[tuple(values[counts.argmax()])] == example.reference
        assert example.reference in config.get("colours", COLOURS)
        assert example.reference in text(example)


@pytest.mark.parametrize("size", [32, 64, 300])
def test_position_answer_agrees_with_the_shapes_centroids(size: int) -> None:
    pattern = r"Is the (\w+) (\w+) left or right of the (\w+) (\w+)\? Answer left or right\."
    for example in vision_position_examples(40, 4, "train", size=size):
        subject, _, other, _ = re.match(pattern, text(example)).groups()
        array = pixels(example)
        xs = {c: np.nonzero(mask_of(array, COLOURS[c]))[1] for c in (subject, other)}
        drawn = "left" if xs[subject].mean() < xs[other].mean() else "right"
        assert drawn == example.reference, example.id
        (a, b) = sorted(xs.values(), key=lambda x: x.mean())
        width = max(a.max() - a.min(), b.max() - b.min()) + 1
        assert b.min() - a.max() - 1 >= width  # at least a shape width of background between them


def glyph(letter: str) -> np.ndarray:
    """``letter`` in PIL's default font without anti-aliasing, cropped to its ink."""
    image = Image.new("RGB", (40, 40), WHITE)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "1"
    draw.text((10, 10), letter, fill=(0, 0, 0), font=ImageFont.load_default())
    return crop(mask_of(np.asarray(image).astype(int), (0, 0, 0)))


def crop(mask: np.ndarray) -> np.ndarray:
    rows, cols = np.nonzero(mask)
    return mask[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]


@pytest.mark.parametrize("config", [{}, {"bars": 3}, {"bars": 4, "size": 48}, {"size": 160}])
def test_chart_answer_is_the_label_under_the_tallest_bar(config: dict) -> None:
    for example in vision_chart_examples(25, 6, "train", **config):
        array = pixels(example)
        bars = mask_of(array, BAR_COLOUR)
        columns = np.nonzero(bars.any(axis=0))[0]
        runs = np.split(columns, np.nonzero(np.diff(columns) > 1)[0] + 1)
        heights = [bars[:, run[len(run) // 2]].sum() for run in runs]
        assert len(runs) == len(re.findall(r"\b[A-D]\b", text(example).split("(")[1]))
        order = sorted(heights)
        assert order[-1] - order[-2] >= 4  # the tallest is clearly the tallest
        tallest = int(np.argmax(heights))
        baseline = np.nonzero(bars.any(axis=1))[0].max() + 1
        centres = [int(run.mean()) for run in runs]
        left = (centres[tallest - 1] + centres[tallest]) // 2 if tallest else 0
        right = (centres[tallest] + centres[tallest + 1]) // 2 if tallest + 1 < len(runs) else array.shape[1]
        label = crop(mask_of(array[baseline:, left:right], LABEL_COLOUR))
        assert label.shape == glyph(example.reference).shape and (label == glyph(example.reference)).all()


WRONG = {
    "vision_count": lambda ref: [str(int(ref) + 1), str(int(ref) - 1), ref + "0"],
    "vision_colour": lambda ref: [c for c in COLOURS if c != ref] + [ref.upper()],
    "vision_position": lambda ref: [
        {"left": "right", "right": "left"}[ref],
        "Left" if ref == "left" else "Right",
    ],
    "vision_chart": lambda ref: [x for x in "ABCD" if x != ref] + [ref.lower()],
}


@pytest.mark.parametrize("task", TASKS)
def test_exact_match_reward_accepts_the_answer_and_rejects_others(task: str) -> None:
    reward = get_reward(load_env_examples(task, 1, 0, "train", {})[0].verifier)
    assert reward is exact_match_reward
    for example in load_env_examples(task, 8, 0, "eval", {}):
        right = f"I look at the image.\n<answer>{example.reference}</answer>"
        assert exact_match_reward(right, example) == 1.0
        assert exact_match_reward(f"<answer> {example.reference} </answer>", example) == 1.0
        for wrong in WRONG[task](example.reference):
            assert exact_match_reward(f"<answer>{wrong}</answer>", example) == 0.0, wrong
        assert exact_match_reward("no answer given", example) == 0.0


@pytest.mark.parametrize(
    ("task", "config", "key"),
    [
        ("vision_count", {"max_cont": 3}, "max_cont"),
        ("vision_count", {"min_count": 4, "max_count": 2}, "max_count"),
        ("vision_count", {"min_count": 0}, "min_count"),
        ("vision_count", {"max_count": 21}, "max_count"),
        ("vision_count", {"size": 20}, "size"),
        ("vision_count", {"max_count": 9, "size": 29}, "size"),
        ("vision_count", {"size": 1025}, "size"),
        ("vision_count", {"shapes": ["hexagon"]}, "shapes"),
        ("vision_count", {"shapes": "circle"}, "shapes"),
        ("vision_count", {"distractors": "yes"}, "distractors"),
        ("vision_colour", {"colours": ["red", "pink"]}, "colours"),
        ("vision_colour", {"colours": []}, "colours"),
        ("vision_colour", {"size": 8}, "size"),
        ("vision_colour", {"colour": ["red"]}, "colour"),
        ("vision_position", {"size": 24}, "size"),
        ("vision_position", {"size": "64"}, "size"),
        ("vision_position", {"shapes": ["circle"]}, "shapes"),
        ("vision_chart", {"bars": 5}, "bars"),
        ("vision_chart", {"size": 40}, "size"),
        ("vision_chart", {"size": 4096}, "size"),
    ],
)
def test_bad_config_names_the_task_and_key(task: str, config: dict, key: str) -> None:
    with pytest.raises(RlvrError, match=rf"{task}.*'{key}'"):
        load_env_examples(task, 2, 0, "train", config)


def test_split_must_be_train_or_eval() -> None:
    with pytest.raises(RlvrError, match="vision_colour: split"):
        vision_colour_examples(1, 0, "test")


def test_size_that_just_fits_works() -> None:
    assert len(vision_count_examples(3, 0, "train", max_count=9, size=30)) == 3
    assert len(vision_position_examples(3, 0, "eval", size=32)) == 3


def test_render_grid_board_colours_each_cell() -> None:
    rows = ["SFFP", "FH#.", "FFXG"]
    image = render_grid_board(rows, cell=10)
    assert image.mode == "RGB" and image.size == (40, 30)
    array = np.asarray(image)
    for r, row in enumerate(rows):
        for c, char in enumerate(row):
            centre = tuple(int(v) for v in array[r * 10 + 4, c * 10 + 4])
            assert centre == BOARD_COLOURS.get(char, UNKNOWN_CELL), (r, c, char)
    assert len(set(BOARD_COLOURS.values()) | {UNKNOWN_CELL}) == len(BOARD_COLOURS) + 1
    assert render_grid_board(("S", "G"), cell=1).size == (1, 2)
    assert render_grid_board(rows).tobytes() == render_grid_board(list(rows)).tobytes()


@pytest.mark.parametrize("rows", [["SFF", "FH"], [], "SFFG", [""]])
def test_render_grid_board_refuses_ragged_or_empty_boards(rows: list[str]) -> None:
    with pytest.raises(ValueError, match="render_grid_board"):
        render_grid_board(rows)
