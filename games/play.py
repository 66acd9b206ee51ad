"""Play a game in the terminal against a scripted opponent, seeing the text the model sees."""

from __future__ import annotations

import random
from collections.abc import Callable

from games.base import TextGameEnv, agent_name
from games.opponents import Opponent, make_opponent
from games.registry import make


def play(
    game: str,
    opponent: str = "random",
    seed: int | None = None,
    human_seat: int = 0,
    input_fn: Callable[[str], str] = input,
    output_fn: Callable[[str], None] = print,
    bot: Opponent | None = None,
    **options: int | float | str | bool,
) -> dict[str, float]:
    """Play one game of `game` as seat `human_seat`; every other seat is `opponent` (or `bot`, when given,
    with `opponent` as its display name).

    Shows the rules, then at each of your turns the observation, history and legal actions,
    asking again until the input names a legal action. Returns the final returns.
    """
    env = make(game, **options)
    if not 0 <= human_seat < env.spec.num_players:
        raise ValueError(
            f"human_seat {human_seat} is not a seat of {game}; "
            f"allowed: 0 to {env.spec.num_players - 1}"
        )
    opponent_seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
    if bot is None:
        bot = make_opponent(opponent, game, seed=opponent_seed, **options)
    human = agent_name(human_seat)
    env.reset(seed=seed)
    output_fn(f"{env.rules()}\n\nYou are {human}; the other seats are played by '{opponent}'.")
    for agent in env.turns():
        if agent == human:
            env.step(_ask(env, human, input_fn, output_fn))
        else:
            env.step(bot.act(env, agent))
    _show_result(env, human, output_fn)
    return env.returns()


def _ask(
    env: TextGameEnv, human: str, input_fn: Callable[[str], str], output_fn: Callable[[str], None]
) -> int:
    legal = ", ".join(env.legal_action_names(human))
    history = env.history_text(human) or "(no moves yet)"
    output_fn(f"\n{env.observation_text(human)}\nHistory:\n{history}\nLegal actions: {legal}")
    while True:
        action = env.parse_action(input_fn("Your action: "), human)
        if action is not None:
            return action
        output_fn(f"That is not a legal action. Choose one of: {legal}")


def _show_result(env: TextGameEnv, human: str, output_fn: Callable[[str], None]) -> None:
    returns = env.returns()
    lines = [f"\n{env.observation_text(human)}", f"History:\n{env.history_text(human)}"]
    for agent in env.possible_agents:
        private = env.private_info(agent)
        if agent != human and private:
            lines.append(f"{agent} held: {private}")
    lines.append(f"Your return: {returns[human]:+g}")
    lines.append("Returns: " + ", ".join(f"{agent} {value:+g}" for agent, value in returns.items()))
    output_fn("\n".join(lines))
