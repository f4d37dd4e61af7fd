"""Image questions with verifiable answers, drawn on the fly (``data.task: vision_count`` …).

Each example has one image (``Example.images``, RGB, drawn with Pillow, no anti-aliasing, so every
pixel is the background or a fill colour) and a plain-text question asking for one word or number:

- ``vision_count``: N shapes of one kind scattered without overlap; "How many circles are in the
  image?" The answer is N ("3"). With ``distractors`` true, shapes of another kind (same colour) are
  added and must not be counted.
- ``vision_colour``: one shape in one of six colours; "What colour is the shape?" ("red").
- ``vision_position``: two shapes of different colours at least a shape width apart horizontally;
  "Is the red circle left or right of the blue square?" ("left" or "right").
- ``vision_chart``: a bar chart of 3 or 4 bars labelled A, B, C (D), their heights apart by a clear
  margin; "Which bar is the tallest?" (the letter).

Answers are checked by the ``exact_match`` reward (``Example.verifier``): the answer in
``<answer></answer>`` tags (or an "Answer:" line, or the last number) must equal the reference
exactly, case included; the question lists the words it accepts.

Train and held-out examples never share an image: a scene (its size and what is drawn where, not the
question asked about it) belongs to the held-out split when a CRC of its canonical JSON is 0 mod 5,
and each split keeps drawing from its seeded stream until a scene of its own comes up. The same
(task, seed, split, index, config) gives the same image, byte for byte.

:func:`render_grid_board` draws a character board (FrozenLake, a maze) as coloured cells, for
multi-turn environments that show their board as an image.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from rlvr.data.example import Example
from rlvr.data.prompts import ANSWER_TAG_INSTRUCTION, build_messages
from rlvr.errors import RlvrError

SHAPES = ("circle", "square", "triangle")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 220),
    "yellow": (240, 210, 20),
    "purple": (140, 50, 180),
    "orange": (250, 140, 20),
}
BACKGROUND = (255, 255, 255)
BAR_COLOUR = (70, 110, 200)
LABEL_COLOUR = (0, 0, 0)
AXIS_COLOUR = (150, 150, 150)
BAR_LABELS = "ABCD"
VERIFIER = "exact_match"  # rlvr.rewards.builtin.exact_match_reward: the reference, exactly
MIN_SIDE = 8  # pixels: the smallest shape drawn (smaller triangles and circles look alike)
MAX_SIZE = 1024
MAX_COUNT = 20
MAX_DISTRACTORS = 3
HELD_OUT_EVERY = 5  # one scene in five is held out
_ATTEMPTS = 1000
_CHART_MARGIN = 4
_CHART_LABEL_BAND = 14  # pixels under the baseline for the letters (the default font is 10 px)

# Options each task takes, with their defaults ("bars": None draws 3 or 4 bars at random).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "vision_count": {
        "min_count": 1,
        "max_count": 5,
        "size": 64,
        "shapes": list(SHAPES),
        "distractors": False,
    },
    "vision_colour": {"size": 64, "colours": list(COLOURS)},
    "vision_position": {"size": 64},
    "vision_chart": {"size": 96, "bars": None},
}

Scene = dict[str, Any]
_Made = tuple[Scene, str, str, dict[str, Any]]  # scene, question, answer, what else metadata holds


def _int_option(task: str, key: str, value: Any, low: int, high: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RlvrError(f"{task}: config key {key!r} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise RlvrError(f"{task}: config key {key!r} must be between {low} and {high}{why}, got {value}")
    return value


def _names_option(task: str, key: str, value: Any, allowed: Sequence[str]) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise RlvrError(f"{task}: config key {key!r} must be a non-empty list of names, got {value!r}")
    for name in value:
        if name not in allowed:
            raise RlvrError(
                f"{task}: config key {key!r} names unknown {name!r}; allowed: {', '.join(allowed)}"
            )
    if len(set(value)) != len(value):
        raise RlvrError(f"{task}: config key {key!r} names one more than once: {value!r}")
    return list(value)


def _options(task: str, config: dict[str, Any]) -> dict[str, Any]:
    """The task's options: ``config`` over the defaults, each checked (RlvrError names the key)."""
    defaults = _DEFAULTS[task]
    for key in config:
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise RlvrError(f"{task} has no config key {key!r}.{hint} Allowed keys: {', '.join(defaults)}.")
    opts = {**defaults, **config}
    if task == "vision_count":
        low = _int_option(task, "min_count", opts["min_count"], 1, MAX_COUNT)
        _int_option(task, "max_count", opts["max_count"], low, MAX_COUNT, " (and at least min_count)")
        opts["shapes"] = _names_option(task, "shapes", opts["shapes"], SHAPES)
        if not isinstance(opts["distractors"], bool):
            raise RlvrError(
                f"{task}: config key 'distractors' must be true or false, got {opts['distractors']!r}"
            )
        most = opts["max_count"] + (MAX_DISTRACTORS if opts["distractors"] else 0)
        least = (MIN_SIDE + 2) * math.ceil(math.sqrt(most))
        _int_option(task, "size", opts["size"], least, MAX_SIZE, f" to fit {most} shapes")
    elif task == "vision_colour":
        opts["colours"] = _names_option(task, "colours", opts["colours"], list(COLOURS))
        _int_option(task, "size", opts["size"], 2 * MIN_SIDE, MAX_SIZE, " to fit the shape")
    elif task == "vision_position":
        _int_option(task, "size", opts["size"], 4 * MIN_SIDE, MAX_SIZE, " to fit two shapes apart")
    else:
        if opts["bars"] is not None:
            _int_option(task, "bars", opts["bars"], 3, 4)
        _int_option(task, "size", opts["size"], 48, MAX_SIZE, " to fit the bars and their letters")
    return opts


def _shape(rng: random.Random, shape: str, colour: str, size: int, side: int, x: int) -> dict[str, Any]:
    return {"shape": shape, "colour": colour, "side": side, "x": x, "y": rng.randint(1, size - side - 1)}


def _scatter(rng: random.Random, size: int, kinds: list[str], colour: str) -> list[dict[str, Any]]:
    """One shape of each kind in its own cell of a grid, so that any two are 2+ pixels apart."""
    grid = math.ceil(math.sqrt(len(kinds)))
    cell = size // grid
    biggest = min(cell - 2, max(MIN_SIDE, size // 3))
    objects = []
    for kind, slot in zip(kinds, rng.sample(range(grid * grid), len(kinds)), strict=True):
        side = rng.randint(MIN_SIDE, biggest)
        x = (slot % grid) * cell + rng.randint(1, cell - side - 1)
        y = (slot // grid) * cell + rng.randint(1, cell - side - 1)
        objects.append({"shape": kind, "colour": colour, "side": side, "x": x, "y": y})
    return objects


def _count_scene(rng: random.Random, opts: dict[str, Any]) -> _Made:
    target = rng.choice(opts["shapes"])
    n = rng.randint(opts["min_count"], opts["max_count"])
    kinds = [target] * n
    if opts["distractors"]:
        kinds += [rng.choice([s for s in SHAPES if s != target])] * rng.randint(1, MAX_DISTRACTORS)
    objects = _scatter(rng, opts["size"], kinds, rng.choice(list(COLOURS)))
    question = f"How many {target}s are in the image? Answer with a number."
    return {"size": opts["size"], "objects": objects}, question, str(n), {"target": target, "count": n}


def _colour_scene(rng: random.Random, opts: dict[str, Any]) -> _Made:
    size = opts["size"]
    colour, shape = rng.choice(opts["colours"]), rng.choice(SHAPES)
    side = rng.randint(max(MIN_SIDE, size // 6), max(MIN_SIDE, size // 2))
    obj = _shape(rng, shape, colour, size, side, rng.randint(1, size - side - 1))
    question = f"What colour is the shape? Answer with one of: {', '.join(opts['colours'])}."
    return {"size": size, "objects": [obj]}, question, colour, {"colour": colour, "shape": shape}


def _position_scene(rng: random.Random, opts: dict[str, Any]) -> _Made:
    size = opts["size"]
    side = rng.randint(MIN_SIDE, max(MIN_SIDE, size // 5))
    left_x = rng.randint(1, size - 3 * side - 1)
    right_x = rng.randint(left_x + 2 * side, size - side - 1)  # a gap of at least one shape width
    colours = rng.sample(list(COLOURS), 2)
    left, right = (
        _shape(rng, rng.choice(SHAPES), c, size, side, x)
        for c, x in zip(colours, (left_x, right_x), strict=True)
    )
    subject, other = (left, right) if rng.random() < 0.5 else (right, left)
    answer = "left" if subject is left else "right"
    question = (
        f"Is the {subject['colour']} {subject['shape']} left or right of the {other['colour']} "
        f"{other['shape']}? Answer left or right."
    )
    about = {"subject": subject["colour"], "other": other["colour"]}
    return {"size": size, "objects": [left, right]}, question, answer, about


def _chart_scene(rng: random.Random, opts: dict[str, Any]) -> _Made:
    size = opts["size"]
    bars = opts["bars"] or rng.choice((3, 4))
    plot = size - _CHART_LABEL_BAND - _CHART_MARGIN  # the tallest a bar can be
    gap = max(4, plot // 6)  # any two heights differ by at least this
    offsets = sorted(rng.randint(0, plot - bars * gap) for _ in range(bars))
    heights = [gap + offset + i * gap for i, offset in enumerate(offsets)]
    rng.shuffle(heights)
    tallest = BAR_LABELS[heights.index(max(heights))]
    question = f"Which bar is the tallest? Answer with its letter ({', '.join(BAR_LABELS[:bars])})."
    return {"size": size, "bars": heights}, question, tallest, {"labels": list(BAR_LABELS[:bars])}


_MAKERS: dict[str, Callable[[random.Random, dict[str, Any]], _Made]] = {
    "vision_count": _count_scene,
    "vision_colour": _colour_scene,
    "vision_position": _position_scene,
    "vision_chart": _chart_scene,
}


def scene_key(scene: Scene) -> str:
    """The scene's canonical text: what is drawn, wherever it came from (objects in a fixed order)."""
    objects = sorted(scene.get("objects", []), key=lambda o: json.dumps(o, sort_keys=True))
    return json.dumps({**scene, "objects": objects}, sort_keys=True)


def is_held_out(scene: Scene) -> bool:
    """Whether ``scene`` belongs to the held-out split (a fixed fifth of all scenes, by CRC)."""
    return zlib.crc32(scene_key(scene).encode()) % HELD_OUT_EVERY == 0


@functools.cache
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default()


def _draw_chart(draw: ImageDraw.ImageDraw, size: int, heights: list[int]) -> None:
    baseline = size - _CHART_LABEL_BAND
    slot = (size - 2 * _CHART_MARGIN) // len(heights)
    width = max(4, slot * 3 // 5)
    draw.line([(_CHART_MARGIN, baseline), (size - _CHART_MARGIN - 1, baseline)], fill=AXIS_COLOUR)
    draw.fontmode = "1"  # no anti-aliasing: the letters are pure LABEL_COLOUR
    for i, height in enumerate(heights):
        x0 = _CHART_MARGIN + i * slot + (slot - width) // 2
        draw.rectangle((x0, baseline - height, x0 + width - 1, baseline - 1), fill=BAR_COLOUR)
        left, top, right, _ = draw.textbbox((0, 0), BAR_LABELS[i], font=_font())
        at = (x0 + (width - (right - left)) // 2 - left, baseline + 2 - top)
        draw.text(at, BAR_LABELS[i], fill=LABEL_COLOUR, font=_font())


def render_scene(scene: Scene) -> Image.Image:
    """Draw a scene (``Example.metadata["scene"]``) as the RGB image its example shows."""
    size = scene["size"]
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    if "bars" in scene:
        _draw_chart(draw, size, scene["bars"])
    for obj in scene.get("objects", []):
        x, y, s, fill = obj["x"], obj["y"], obj["side"], COLOURS[obj["colour"]]
        if obj["shape"] == "circle":
            draw.ellipse((x, y, x + s - 1, y + s - 1), fill=fill)
        elif obj["shape"] == "square":
            draw.rectangle((x, y, x + s - 1, y + s - 1), fill=fill)
        else:  # a triangle pointing up
            draw.polygon([(x, y + s - 1), (x + s - 1, y + s - 1), (x + (s - 1) / 2, y)], fill=fill)
    return image


def vision_examples(task: str, count: int, seed: int, split: str, **config: Any) -> list[Example]:
    """``count`` examples of ``task`` (one of :data:`VISION_TASKS`) for ``split`` ("train"/"eval")."""
    if task not in _MAKERS:
        raise RlvrError(f"unknown vision task {task!r}; known: {', '.join(_MAKERS)}")
    if split not in ("train", "eval"):
        raise RlvrError(f"{task}: split must be 'train' or 'eval', got {split!r}")
    opts = _options(task, config)
    examples = []
    for index in range(count):
        rng = random.Random(f"rlvr-{task}:{seed}:{split}:{index}")
        for _ in range(_ATTEMPTS):
            scene, question, answer, about = _MAKERS[task](rng, opts)
            if is_held_out(scene) == (split == "eval"):
                break
        else:
            raise RlvrError(
                f"{task}: drew no {split} scene in {_ATTEMPTS} tries; its config {config} allows too few"
            )
        examples.append(
            Example(
                id=f"{task}-{split}-{index}",
                prompt=build_messages(question, None, ANSWER_TAG_INSTRUCTION),
                reference=answer,
                data_source=task,
                verifier=VERIFIER,
                metadata={"task": task, "split": split, "scene": scene, **about},
                images=[render_scene(scene)],
            )
        )
    return examples


def vision_count_examples(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    """How many shapes of one kind: the answer is the number ("3"). Options: ``min_count`` (1),
    ``max_count`` (5, at most 20), ``size`` (64), ``shapes`` (all three), ``distractors`` (false)."""
    return vision_examples("vision_count", count, seed, split, **config)


def vision_colour_examples(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    """The colour of one shape: the answer is its colour word ("red"). Options: ``size`` (64),
    ``colours`` (all six of :data:`COLOURS`)."""
    return vision_examples("vision_colour", count, seed, split, **config)


def vision_position_examples(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    """Whether one shape is left or right of another: "left" or "right". Option: ``size`` (64)."""
    return vision_examples("vision_position", count, seed, split, **config)


def vision_chart_examples(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    """The tallest bar of a bar chart: its letter ("B"). Options: ``size`` (96), ``bars`` (3 or 4;
    unset, each chart has 3 or 4)."""
    return vision_examples("vision_chart", count, seed, split, **config)


VISION_TASKS: dict[str, Callable[..., list[Example]]] = {
    "vision_count": vision_count_examples,
    "vision_colour": vision_colour_examples,
    "vision_position": vision_position_examples,
    "vision_chart": vision_chart_examples,
}

# render_grid_board's cell colours: FrozenLake's start, frozen ice, hole, goal, the player; a maze's
# walls and floor. Any other character is UNKNOWN_CELL; a dark line separates the cells.
BOARD_COLOURS: dict[str, tuple[int, int, int]] = {
    "S": (80, 200, 120),
    "F": (200, 230, 250),
    "H": (30, 60, 140),
    "G": (250, 200, 40),
    "P": (220, 40, 40),
    "#": (110, 80, 50),
    ".": (245, 245, 235),
}
UNKNOWN_CELL = (128, 128, 128)
GRID_LINE = (20, 20, 20)


def render_grid_board(rows: Sequence[str], cell: int = 16) -> Image.Image:
    """A board of characters as an RGB image of ``cell`` × ``cell`` squares, one colour per character
    (:data:`BOARD_COLOURS`, else :data:`UNKNOWN_CELL`), a 1-pixel :data:`GRID_LINE` on each cell's
    right and bottom edge when ``cell`` is 4 or more. Raises ValueError for an empty board, rows of
    unequal length, or a cell size outside 1-128 (or an image over 4096 pixels a side)."""
    if isinstance(rows, str) or not rows or not rows[0]:
        raise ValueError(f"render_grid_board: give the board as a non-empty list of rows, got {rows!r}")
    width = len(rows[0])
    for r, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(
                f"render_grid_board: row {r} has {len(row)} cells but row 0 has {width}: {list(rows)!r}"
            )
    if isinstance(cell, bool) or not isinstance(cell, int) or not 1 <= cell <= 128:
        raise ValueError(f"render_grid_board: cell must be an integer from 1 to 128, got {cell!r}")
    if max(width, len(rows)) * cell > 4096:
        raise ValueError(f"render_grid_board: a {len(rows)} x {width} board of {cell}-pixel cells is too big")
    image = Image.new("RGB", (width * cell, len(rows) * cell), GRID_LINE)
    draw = ImageDraw.Draw(image)
    inner = cell - 1 if cell >= 4 else cell
    for r, row in enumerate(rows):
        for c, char in enumerate(row):
            x, y = c * cell, r * cell
            draw.rectangle((x, y, x + inner - 1, y + inner - 1), fill=BOARD_COLOURS.get(char, UNKNOWN_CELL))
    return image
