"""FrozenLake as a text game: walk from S to G on a grid without stepping into a hole (H).

The board is drawn from the example's seed (``metadata["seed"]``): ``size`` × ``size`` cells, start
in the top-left corner, goal in the bottom-right, ``holes`` holes placed at random and redrawn
until a path exists (breadth-first search), so every board is solvable and the same seed is always
the same board. Moves are deterministic (no slipping). Each turn the model writes
``<move>up</move>`` (or down, left, right; the turn ends where ``</move>`` completes) and the game
answers with the board, the player shown as ``P``. Walking into the edge leaves the player where it
was; a turn without a valid move is answered with the rules and counted (``invalid_actions``).
Reaching G ends the episode with reward 1; a hole ends it with 0; so does running out of moves
(``max_moves``, also bounded by ``env.max_turns``).

:func:`optimal_policy` (shortest path by BFS, reading only the rendered board) solves every board;
:func:`random_policy` moves at random. Both play through the same text interface as the model.
"""

from __future__ import annotations

import random
import re
from collections import deque

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_MOVE = re.compile(r"<move>\s*(\w+)\s*</move>", re.IGNORECASE)

RULES = (
    "You walk on a frozen lake drawn as a grid: S is the start, G the goal, H a hole, . safe ice, and P "
    "marks where you are. Reach G without stepping into a hole. Each turn, write exactly one move as "
    "<move>up</move>, <move>down</move>, <move>left</move> or <move>right</move>."
)

Board = tuple[str, ...]


def make_board(seed: int, size: int = 4, holes: int = 3) -> Board:
    """A solvable ``size`` × ``size`` board with ``holes`` holes, drawn from ``seed``."""
    if size < 2 or not 0 <= holes <= size * size - 2:
        raise ValueError(f"frozenlake: need size >= 2 and 0 <= holes <= size*size-2, got {size}, {holes}")
    rng = random.Random(f"rlvr-frozenlake:{seed}:{size}:{holes}")
    cells = [(r, c) for r in range(size) for c in range(size)][1:-1]
    while True:
        chosen = set(rng.sample(cells, holes))
        rows = tuple(
            "".join(
                "S"
                if (r, c) == (0, 0)
                else "G"
                if (r, c) == (size - 1, size - 1)
                else "H"
                if (r, c) in chosen
                else "."
                for c in range(size)
            )
            for r in range(size)
        )
        if shortest_path(rows, (0, 0)) is not None:
            return rows


def shortest_path(board: Board, start: tuple[int, int]) -> list[str] | None:
    """The moves of a shortest safe path from ``start`` to G, or None when there is none."""
    size = len(board)
    seen, queue = {start: []}, deque([start])
    while queue:
        r, c = queue.popleft()
        if board[r][c] == "G":
            return seen[(r, c)]
        for name, (dr, dc) in MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and board[nr][nc] != "H" and (nr, nc) not in seen:
                seen[(nr, nc)] = [*seen[(r, c)], name]
                queue.append((nr, nc))
    return None


def render(board: Board, at: tuple[int, int]) -> str:
    return "\n".join(
        " ".join("P" if (r, c) == at else cell for c, cell in enumerate(row)) for r, row in enumerate(board)
    )


def parse_board(text: str) -> tuple[Board, tuple[int, int]]:
    """The board and the player's cell from a rendered observation (the grid lines in ``text``)."""
    lines = [line.split() for line in text.splitlines()]
    grid = [cells for cells in lines if cells and all(len(x) == 1 and x in "SGH.P" for x in cells)]
    at = next((r, row.index("P")) for r, row in enumerate(grid) if "P" in row)
    # under P is S or safe ice (a hole or the goal would have ended the game): both are walkable
    return tuple("".join("." if x == "P" else x for x in row) for row in grid), at


def optimal_policy(messages: list[Message]) -> str:
    """A shortest path's next move, read from the last rendered board in the conversation."""
    board, at = parse_board(next(m["content"] for m in reversed(messages) if m["role"] != "assistant"))
    path = shortest_path(board, at)
    return f"<move>{path[0] if path else 'up'}</move>"


def random_policy(rng: random.Random):
    """A policy that moves uniformly at random (``messages -> text``)."""
    return lambda messages: f"<move>{rng.choice(list(MOVES))}</move>"


@register_env("frozenlake")
class FrozenLake(Environment):
    stop_strings = ("</move>",)

    def __init__(self, size: int = 4, holes: int = 3, max_moves: int = 12) -> None:
        self.size, self.holes, self.max_moves = size, holes, max_moves
        self.board: Board = ()
        self.at = (0, 0)
        self.moves = self.invalid = 0
        self.solved = False

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self.board = make_board(seed, self.size, self.holes)
        self.at, self.moves, self.invalid, self.solved = (0, 0), 0, 0, False
        return [
            {"role": "system", "content": RULES},
            {"role": "user", "content": f"{render(self.board, self.at)}\nYour move?"},
        ]

    def step(self, text: str) -> Step:
        found = _MOVE.findall(text)
        move = found[-1].lower() if found else None
        if move not in MOVES:
            self.invalid += 1
            info = {"invalid_actions": 1.0}
            if self.moves + self.invalid >= self.max_moves:
                return Step(done=True, info=info)
            return Step([{"role": "user", "content": f"Not a move. {RULES}"}], info=info)
        self.moves += 1
        dr, dc = MOVES[move]
        r, c = self.at[0] + dr, self.at[1] + dc
        if 0 <= r < self.size and 0 <= c < self.size:
            self.at = (r, c)
        cell = self.board[self.at[0]][self.at[1]]
        if cell == "G":
            self.solved = True
            return Step(reward=1.0, done=True, info={"moves": 1.0})
        if cell == "H" or self.moves + self.invalid >= self.max_moves:
            return Step(done=True, info={"moves": 1.0, "fell": float(cell == "H")})
        return Step(
            [{"role": "user", "content": f"{render(self.board, self.at)}\nYour move?"}], info={"moves": 1.0}
        )

    def outcome(self) -> dict[str, float]:
        return {"solved": float(self.solved), "moves": float(self.moves)}


def frozenlake_examples(count: int, seed: int, split: str = "train", **config) -> list[Example]:
    """``count`` boards; train boards come from even seeds, held-out ones from odd seeds, so the
    two splits never share a board."""
    if split not in ("train", "eval"):
        raise ValueError(f"frozenlake: split must be 'train' or 'eval', got {split!r}")
    FrozenLake(**config)  # unknown or bad parameters fail here, before any episode
    rng = random.Random(f"rlvr-frozenlake-split:{seed}:{split}")
    seeds = [2 * rng.randrange(2**30) + (split == "eval") for _ in range(count)]
    return [
        Example(
            id=f"frozenlake-{board_seed}",
            prompt=[{"role": "user", "content": "Reach the goal."}],
            reference=None,
            data_source="frozenlake",
            metadata={"env": "frozenlake", "env_params": dict(config), "seed": board_seed},
        )
        for board_seed in seeds
    ]
