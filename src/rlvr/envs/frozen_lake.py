"""FrozenLake as a text game: walk from S to G on a grid without stepping into a hole (H).

The board is drawn from the example's seed (``metadata["seed"]``): ``size`` × ``size`` cells, start
in the top-left corner, goal in the bottom-right, ``holes`` holes placed at random and redrawn
until a path of at most ``max_moves`` moves exists (breadth-first search; :func:`make_board`), so
every board is solvable and the same seed is always the same board. Moves are deterministic (no
slipping). Each turn the model writes ``<move>up</move>`` (or down, left, right; case and spaces
inside the tag do not matter; the turn ends where ``</move>`` completes) and the game answers, as a
``user`` message, with the board (the player shown as ``P``) and the moves left. Walking into the
edge leaves the player where it was; a turn without a valid move is answered with the rules and the
board, counted (``invalid_actions``), and uses up a move. Reaching G ends the episode with reward 1;
a hole ends it with 0; so does running out of moves (``max_moves``, also bounded by
``env.max_turns``).

**Demonstration** (``demonstrate``, default on): the opening is the rules (system), then one example
game on the fixed 3 × 3 board :data:`DEMO_BOARD` (a training layout, never a held-out one) as real
chat turns, shown as the game shows boards and played along its shortest path by
:func:`optimal_policy` with the game's own ``max_moves``, then a user message that says the example
is over (:data:`EXAMPLE_OVER`) followed by the real board as the game without a demonstration opens.
With fewer than 4 ``max_moves`` (the example's path) the opening has no demonstration. The scripted
players read only what follows that message (:func:`real_game`).

**Shaped progress** (``progress_reward`` = p, default 0: off). Φ(cell) = max(0, 1 − d(cell) / d(S)),
d the shortest safe path's length to G (BFS): 0 at the start (and anywhere at least as far), 1 at
G. Each turn earns p × (Φ after − Φ before) on top of the game's reward, and a hole counts as Φ = 0
(the progress made is paid back). Walking back and forth nets nothing, so the shaping cannot be
collected without getting closer. An episode's total is therefore:

- reaching G: exactly 1 + p (however long the walk);
- running out of moves: p × Φ(where it stopped), in [0, p × (1 − 1/d(S))] (< p): more the closer;
- falling into a hole: exactly 0 (the turn that falls earns −p × Φ before it, never more than 0);
- invalid turns and walking into the edge earn 0; doing nothing but that earns 0.

Any win thus outscores any episode that does not win, and a policy that always wins stays optimal.
(Between policies that win only sometimes, the shaping may favour one that wins a little less often
but ends its failures close to G.)

:func:`optimal_policy` (shortest path by BFS, reading only the rendered board) solves every board;
:func:`random_policy` moves at random. Both play through the same text interface as the model.
"""

from __future__ import annotations

import functools
import random
import re
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.envs.game_split import split_seeds
from rlvr.envs.scripted import check_demonstrate, check_progress_reward, play_scripted
from rlvr.errors import RlvrError

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_MOVE = re.compile(r"<move>\s*(\w+)\s*</move>", re.IGNORECASE)
# starts the user message that ends the demonstration and shows the real board
EXAMPLE_OVER = "The example game is over."

RULES = (
    "You walk on a frozen lake drawn as a grid: S is the start, G the goal, H a hole, . safe ice, and P "
    "marks where you are. Reach G without stepping into a hole. Each turn, write exactly one move as "
    "<move>up</move>, <move>down</move>, <move>left</move> or <move>right</move>."
)

Board = tuple[str, ...]
# the demonstration's board: its only shortest path passes between holes (tests check it is not held out)
DEMO_BOARD: Board = ("S..", "H.H", "..G")


def make_board(seed: int, size: int = 4, holes: int = 3, max_moves: int | None = None) -> Board:
    """A ``size`` × ``size`` board with ``holes`` holes, drawn from ``seed``, whose shortest safe path
    from S to G takes at most ``max_moves`` moves (default ``4 * (size - 1)``).

    Holes are placed uniformly and redrawn until such a path exists (so a board may need a detour).
    When a few hundred draws find none (many holes on a small board), the holes are instead placed
    off a random staircase path from S to G, which always leaves that path open: generation never
    loops and never fails for valid parameters.
    """
    max_moves = check_params(size, holes, max_moves)
    rng = random.Random(f"rlvr-frozenlake:{seed}:{size}:{holes}")
    cells = [(r, c) for r in range(size) for c in range(size)][1:-1]
    for _ in range(_REJECTION_DRAWS):
        board = _draw(size, set(rng.sample(cells, holes)))
        path = shortest_path(board, (0, 0))
        if path is not None and len(path) <= max_moves:
            return board
    steps = ["down"] * (size - 1) + ["right"] * (size - 1)
    rng.shuffle(steps)
    r = c = 0
    walk = {(0, 0)}
    for step in steps:
        r, c = r + MOVES[step][0], c + MOVES[step][1]
        walk.add((r, c))
    return _draw(size, set(rng.sample([x for x in cells if x not in walk], holes)))


_REJECTION_DRAWS = 500


def check_params(size: int, holes: int, max_moves: int | None) -> int:
    """``max_moves`` (its default filled in) after checking that the parameters allow a game: a
    staircase path from S to G uses ``2 * size - 1`` cells, so at most ``(size - 1) ** 2`` holes fit
    beside it, and it takes ``2 * (size - 1)`` moves."""
    if size < 2 or not 0 <= holes <= (size - 1) ** 2:
        raise ValueError(
            f"frozenlake: need size >= 2 and 0 <= holes <= (size-1)**2, got size={size}, holes={holes}"
        )
    max_moves = 4 * (size - 1) if max_moves is None else max_moves
    if max_moves < 2 * (size - 1):
        raise ValueError(
            f"frozenlake: max_moves={max_moves} is too few to cross a {size}x{size} board "
            f"(at least {2 * (size - 1)})"
        )
    return max_moves


def _draw(size: int, holes: set[tuple[int, int]]) -> Board:
    def cell(r: int, c: int) -> str:
        if (r, c) == (0, 0):
            return "S"
        if (r, c) == (size - 1, size - 1):
            return "G"
        return "H" if (r, c) in holes else "."

    return tuple("".join(cell(r, c) for c in range(size)) for r in range(size))


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


def distances_to_goal(board: Board) -> dict[tuple[int, int], int]:
    """The length of the shortest safe path from each cell that has one to G (BFS from G)."""
    size = len(board)
    goal = (size - 1, size - 1)
    found, queue = {goal: 0}, deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and board[nr][nc] != "H" and (nr, nc) not in found:
                found[(nr, nc)] = found[(r, c)] + 1
                queue.append((nr, nc))
    return found


def render(board: Board, at: tuple[int, int]) -> str:
    return "\n".join(
        " ".join("P" if (r, c) == at else cell for c, cell in enumerate(row)) for r, row in enumerate(board)
    )


def parse_board(text: str) -> tuple[Board, tuple[int, int]] | None:
    """The board and the player's cell from a rendered observation (its grid lines), or None when
    ``text`` shows no board."""
    lines = [line.split() for line in text.splitlines()]
    grid = [cells for cells in lines if cells and all(len(x) == 1 and x in "SGH.P" for x in cells)]
    at = next(((r, row.index("P")) for r, row in enumerate(grid) if "P" in row), None)
    if at is None:
        return None
    # under P is S or safe ice (a hole or the goal would have ended the game): both are walkable
    return tuple("".join("." if x == "P" else x for x in row) for row in grid), at


def real_game(messages: list[Message]) -> list[Message]:
    """The messages of the game being played: from the user message that ends a demonstration
    (:data:`EXAMPLE_OVER`) on, or all of them when there was none."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and EXAMPLE_OVER in m["content"]]
    return messages[starts[-1] :] if starts else messages


def optimal_policy(messages: list[Message]) -> str:
    """A shortest path's next move, read from the newest board of the real game (not a
    demonstration's) shown in the conversation."""
    for message in reversed(real_game(messages)):
        if message["role"] != "assistant" and (found := parse_board(message["content"])) is not None:
            path = shortest_path(*found)
            return f"<move>{path[0] if path else 'up'}</move>"
    raise ValueError("frozenlake: no board in the conversation")


def random_policy(rng: random.Random) -> Callable[[list[Message]], str]:
    """A policy that moves uniformly at random (``messages -> text``)."""
    return lambda messages: f"<move>{rng.choice(list(MOVES))}</move>"


@register_env("frozenlake")
class FrozenLake(Environment):
    """One board (see the module docstring). ``max_moves`` (default ``4 * (size - 1)``) counts
    every turn, invalid ones included; boards are drawn so that it is enough for a shortest path.

    ``Step.info`` counts ``moves``, ``invalid_actions`` and ``fell`` (into a hole) for the run's
    totals; :meth:`outcome` has the episode's ``solved``, ``moves``, ``invalid_actions`` and
    ``progress`` (Φ where the episode ended, 0 after a hole, 1 at G; also when the shaping is off).
    """

    stop_strings = ("</move>",)
    expert = staticmethod(optimal_policy)  # the SFT demonstrations of sft.player: optimal
    # what a data row's env_params may set (rlvr.envs.data_params); bounds keep a board cheap to draw
    data_params = {
        "size": DataParam(int, 2, 16),
        "holes": DataParam(int, 0, 255),
        "max_moves": DataParam(int, 1, 1000),
        "demonstrate": DataParam(bool),
        "progress_reward": DataParam(float, 0.0, 1.0),
    }

    def __init__(
        self,
        size: int = 4,
        holes: int = 3,
        max_moves: int | None = None,
        demonstrate: bool = True,
        progress_reward: float = 0.0,
        board: str = "text",
    ) -> None:
        """``board``: ``text`` draws the board as characters in each message; ``image`` sends it as
        a picture (rlvr.data.vision_tasks.render_grid_board) for a vision-language policy."""
        if board not in ("text", "image"):
            raise RlvrError(f"frozenlake: board must be 'text' or 'image', not {board!r}")
        self.board_as = board
        self.size, self.holes = size, holes
        self.max_moves = check_params(size, holes, max_moves)
        self.demonstrate = check_demonstrate("frozenlake", demonstrate)
        self.progress_reward = check_progress_reward("frozenlake", progress_reward)
        self.board: Board = ()
        self.at = (0, 0)
        self.moves = self.invalid = 0
        self.solved = False
        self.distance: dict[tuple[int, int], int] = {}
        self.progress = 0.0

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self._start(make_board(seed, self.size, self.holes, self.max_moves))
        demo = demonstration(self.max_moves) if self.demonstrate else ()
        if not demo:
            return [{"role": "system", "content": RULES}, self._message()]
        *turns, over = demo
        start = self._message(f"{over['content']}\n")
        return [{"role": "system", "content": RULES}, *(dict(m) for m in turns), start]

    def _message(self, before: str = "") -> Message:
        """The user message showing the board: in its text, or as an image (``board: image``)."""
        if self.board_as == "text":
            return {"role": "user", "content": self._observation(before)}
        from rlvr.data.vision_tasks import render_grid_board

        rows = render(self.board, self.at).replace(" ", "").splitlines()
        left = self.max_moves - self.moves - self.invalid
        text = f"{before}The board is in the image. {left} moves left. Your move?"
        return {"role": "user", "content": text, "images": [render_grid_board(rows)]}

    def _start(self, board: Board) -> None:
        self.board, self.distance = board, distances_to_goal(board)
        self.at, self.moves, self.invalid, self.solved, self.progress = (0, 0), 0, 0, False, 0.0

    def _potential(self, at: tuple[int, int]) -> float:
        return max(0.0, 1.0 - self.distance[at] / self.distance[(0, 0)])

    def _observation(self, before: str = "") -> str:
        left = self.max_moves - self.moves - self.invalid
        return f"{before}{render(self.board, self.at)}\n{left} moves left. Your move?"

    def step(self, text: str) -> Step:
        if not self.board:
            raise RuntimeError("frozenlake: step() before reset()")
        found = _MOVE.findall(text)
        move = found[-1].lower() if found else None
        if move not in MOVES:
            self.invalid += 1
            info = {"invalid_actions": 1.0}
            if self.moves + self.invalid >= self.max_moves:
                return Step(done=True, info=info)
            return Step([self._message(f"Not a move. {RULES}\n")], info=info)
        self.moves += 1
        dr, dc = MOVES[move]
        r, c = self.at[0] + dr, self.at[1] + dc
        if 0 <= r < self.size and 0 <= c < self.size:
            self.at = (r, c)
        cell = self.board[self.at[0]][self.at[1]]
        before = self.progress
        self.progress = 0.0 if cell == "H" else self._potential(self.at)  # a hole pays the progress back
        shaped = self.progress_reward * (self.progress - before)
        if cell == "G":
            self.solved = True
            return Step(reward=1.0 + shaped, done=True, info={"moves": 1.0})
        if cell == "H" or self.moves + self.invalid >= self.max_moves:
            return Step(reward=shaped, done=True, info={"moves": 1.0, "fell": float(cell == "H")})
        return Step([self._message()], reward=shaped, info={"moves": 1.0})

    def state(self) -> str | None:
        """Where the player stands (the board is the group's own, the same for all its episodes)."""
        return f"{self.at[0]},{self.at[1]}" if self.board else None

    def outcome(self) -> dict[str, float]:
        return {
            "solved": float(self.solved),
            "moves": float(self.moves),
            "invalid_actions": float(self.invalid),
            "progress": self.progress,
        }


@functools.lru_cache(maxsize=64)
def demonstration(max_moves: int) -> tuple[Message, ...]:
    """The example game's turns after the system message, played on :data:`DEMO_BOARD` by the game
    itself with :func:`optimal_policy` (``max_moves`` as the real game's), and the message that
    ends it (the real board follows it); empty when ``max_moves`` is too few for its path."""
    holes = sum(row.count("H") for row in DEMO_BOARD)
    if max_moves < len(shortest_path(DEMO_BOARD, (0, 0)) or ()):
        return ()
    game = FrozenLake(len(DEMO_BOARD), holes, max_moves, demonstrate=False)
    game._start(DEMO_BOARD)
    system: Message = {"role": "system", "content": RULES}
    turns = play_scripted(game, system, {"role": "user", "content": game._observation()}, optimal_policy)
    if not game.solved:
        raise AssertionError("frozenlake: the demonstration does not reach G")
    return (*turns, {"role": "user", "content": f"You reached G. {EXAMPLE_OVER} Now your own lake:"})


def is_held_out(board: Board) -> bool:
    """Whether ``board`` belongs to the held-out split: a fixed fifth of all layouts, by a hash of
    the layout (the same on every machine and Python)."""
    return zlib.crc32("\n".join(board).encode()) % 5 == 0


def frozenlake_examples(count: int, seed: int, split: str = "train", **config: Any) -> list[Example]:
    """``count`` boards: training boards from even seeds, held-out ones from odd seeds, and a board
    is in one split only (:func:`is_held_out`), so a held-out board was never trained on."""
    env = FrozenLake(**config)  # unknown or bad parameters fail here, before any episode
    seeds = split_seeds(
        "frozenlake",
        count,
        seed,
        split,
        lambda s: is_held_out(make_board(s, env.size, env.holes, env.max_moves)),
    )
    return [
        Example(
            id=f"frozenlake-{board_seed}",
            prompt=[{"role": "user", "content": "Reach the goal."}],
            reference=None,
            data_source="frozenlake",
            verifier="environment",  # the game scores itself (rewards.builtin.environment_reward)
            metadata={"env": "frozenlake", "env_params": dict(config), "seed": board_seed},
        )
        for board_seed in seeds
    ]
