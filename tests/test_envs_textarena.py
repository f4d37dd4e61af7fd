"""TextArena's games through ``env.name: textarena``: a small single-player game made and registered
here, played by scripted players through rlvr's multi-turn episode loop and the collector."""

from __future__ import annotations

import random
import re

import pytest
from test_envs_games_wiring import PolicyEngine, play_episodes
from tiny import TINY_RUN

ta = pytest.importorskip("textarena")

from rlvr.collect.collector import Collector  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.envs import make_env  # noqa: E402
from rlvr.envs.textarena_game import TextArenaGame, textarena_examples  # noqa: E402
from rlvr.models import load_tokenizer  # noqa: E402


class TinyGuess(ta.Env):
    """Find a secret from 1 to 4 in 4 tries, guesses written as [n]; told higher or lower."""

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.state = ta.SinglePlayerState(num_players=num_players, seed=seed, max_turns=4)
        self.secret = random.randint(1, 4)
        self.state.reset(game_state={"secret": self.secret}, player_prompt_function=self._prompt)

    def _prompt(self, player_id: int, game_state: dict) -> str:
        return "Tiny guess: find my number from 1 to 4. Write your guess as [n]."

    def step(self, action: str):
        self.state.add_observation(
            from_id=0, to_id=-1, message=action, observation_type=ta.ObservationType.PLAYER_ACTION
        )
        found = re.search(r"\[(\d)\]", action)
        guess = int(found.group(1)) if found else 0
        if guess == self.secret:
            self.state.set_outcome(reward=1, reason="found")
        elif self.state.check_turn_limit():
            self.state.set_outcome(reward=0, reason="out of turns")
        else:
            hint = "higher" if guess < self.secret else "lower"
            self.state.add_observation(
                message=f"My number is {hint}.", observation_type=ta.ObservationType.GAME_MESSAGE
            )
        return self.state.step()


class Verdictless(TinyGuess):
    """Ends after one move without giving the player a reward."""

    def step(self, action: str):
        self.state.done = True
        return self.state.step()


for name, game in (("RlvrTinyGuess-v0", TinyGuess), ("RlvrVerdictless-v0", Verdictless)):
    if name not in ta.envs.registration.ENV_REGISTRY:
        ta.envs.registration.register_with_versions(id=name, entry_point=game, wrappers={"default": []})


def counting_player(messages: list[dict[str, str]]) -> str:
    """Guesses 1, 2, 3, 4 in turn: wins every game of TinyGuess within its 4 tries."""
    return f"I think it is [{sum(m['role'] == 'assistant' for m in messages) + 1}]."


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def _play(tok, env_id: str, policy, count: int = 3):
    examples = textarena_examples(count, 0, "eval")
    make = lambda e: make_env("textarena", {"env_id": env_id})  # noqa: E731
    return play_episodes(tok, PolicyEngine(tok, policy), examples, max_turns=6, make=make)


def test_a_textarena_game_is_played_turn_by_turn_with_its_own_reward(tok) -> None:
    state = random.getstate()
    groups, stats = _play(tok, "RlvrTinyGuess-v0", counting_player)
    assert random.getstate() == state  # the games' reseeding stays inside the adapter
    secrets = set()
    for group in groups:
        for t in group:
            turns = int(t.rewards["env/turns"])
            assert t.rewards["env/solved"] == 1.0 and t.turn_rewards == [0.0] * (turns - 1) + [1.0]
            assert [s.kind for s in t.segments] == ["sampled", "context"] * (turns - 1) + ["sampled"]
            text = tok.decode(t.prompt_ids + t.response_ids)
            # the game's replies carry its news, not an echo of the model's own move
            assert text.count("I think it is [1]") == 1 and ("higher" in text) == (turns > 1)
            secrets.add(turns)
    assert stats.counters.get("env_errors", 0.0) == 0.0 and len(secrets) > 1


def test_the_same_seed_gives_the_same_game_and_splits_differ() -> None:
    train, held_out = textarena_examples(20, 0, "train"), textarena_examples(20, 0, "eval")
    assert {e.metadata["seed"] % 2 for e in train} == {0} and {e.metadata["seed"] % 2 for e in held_out} == {
        1
    }
    first, again = (make_env("textarena", {"env_id": "RlvrTinyGuess-v0"}) for _ in range(2))
    rng = random.Random(0)
    for env in (first, again):
        env.reset(train[0], rng)
    assert first.game.secret == again.game.secret


def test_a_game_ending_without_a_verdict_is_an_error_not_a_zero(tok) -> None:
    groups, stats = _play(tok, "RlvrVerdictless-v0", counting_player, count=2)
    assert stats.counters["env_errors"] == 4.0
    assert all("without a reward" in t.errors["env"] for g in groups for t in g)


def test_the_game_is_chosen_by_the_config_never_by_a_data_row(tok) -> None:
    assert TextArenaGame.data_params == {}
    with pytest.raises(Exception, match="TextArena has no game"):
        TextArenaGame(env_id="NoSuchGame-v0")
    with pytest.raises(ValueError, match="task_config takes nothing"):
        textarena_examples(2, 0, "train", env_id="Chess-v0")
    # a row that tries to set the game is refused when the collector starts
    examples = textarena_examples(2, 0, "train")
    examples[0].metadata["env_params"] = {"env_id": "Chess-v0"}
    cfg = load_config(None, [*TINY_RUN, "env.name=textarena", "env.params={env_id: RlvrTinyGuess-v0}"])
    with pytest.raises(Exception, match="env_id"):
        Collector(cfg, PolicyEngine(tok, counting_player), tok, examples).close()
