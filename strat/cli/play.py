"""`strat play`: a game in the terminal against a scripted opponent or a trained policy.

A trained policy (torch, an engine) is imported inside the verb: `strat --help` registers every verb."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated

import typer

import games
from games.base import TextGameEnv
from games.opponents import opponent_names
from games.play import play as play_game
from strat.errors import UserError
from strat.model import hub
from strat.play.rollout import LLMPlayer, derive_seed, llm_move


def play(
    game: Annotated[str, typer.Option(help="Game to play.")] = "kuhn_poker",
    opponent: Annotated[
        str,
        typer.Option(help="Scripted opponent (random, heuristic, equilibrium, minimax), a checkpoint or run dir, or a "
                          "Hub name org/name[@revision]."),
    ] = "random",
    seat: Annotated[int, typer.Option(help="Your seat (0 moves first).")] = 0,
    seed: Annotated[int | None, typer.Option(help="Seed of the deal and the opponent.")] = None,
    show_reasoning: Annotated[bool, typer.Option(help="Show a trained opponent's reasoning after each move.")] = False,
) -> None:
    """Play a game in the terminal against an opponent, seeing the text the model sees."""
    if game not in games.names():
        raise UserError(f"unknown game {game!r} (allowed: {', '.join(games.names())})")
    if opponent in opponent_names(game):
        play_game(game, opponent=opponent, seed=seed, human_seat=seat)
        return
    if not Path(opponent).exists() and hub.parse(opponent) is None:
        raise UserError(
            f"opponent {opponent!r} is neither a scripted opponent for {game} "
            f"({', '.join(opponent_names(game))}) nor a checkpoint or run directory, nor a Hub name org/name"
        )
    from strat.eval.policies import load_policy  # deferred for start-up cost (torch, engines)

    policy = load_policy(opponent, game)
    try:
        player = policy.player(seed if seed is not None else 0)
        bot = _LLMOpponent(player, policy.info.name, seed, show_reasoning) if isinstance(player, LLMPlayer) else player
        play_game(game, opponent=opponent, seed=seed, human_seat=seat, bot=bot)
    finally:
        policy.close()


class _LLMOpponent:
    """A trained policy behind the games' opponent interface, for `strat play`.

    A human's game is one game at the human's pace, so it is not run by the batched loop of training and
    evaluation (`strat.play.rollout.play_games`); what a turn is shares its code instead: each of the policy's
    moves is `llm_move`, read with the same parsing, fallback and penalty rules, and finished agents are stepped
    past by the game's own `turns()`."""

    def __init__(self, player: LLMPlayer, name: str, seed: int | None, show_reasoning: bool) -> None:
        self.player, self.name = player, name
        self.seed = seed if seed is not None else 0
        self.rng = random.Random(derive_seed(self.seed, "fallback"))
        self.show_reasoning = show_reasoning
        self.moves = 0

    def act(self, env: TextGameEnv, agent: str) -> int:
        turn = llm_move(self.player, env, self.rng, self.seed + self.moves)
        self.moves += 1
        if self.show_reasoning and turn.response is not None:
            sections = {k: v for k, v in vars(turn.response.sections).items() if v is not None}
            typer.echo(f"\n[{agent} reasoning]\n" + "\n".join(f"  {k}: {v}" for k, v in sections.items()))
        if not turn.valid:
            typer.echo(f"[{agent} wrote no legal action; it plays {turn.action_name} as the fallback]")
        return turn.action
