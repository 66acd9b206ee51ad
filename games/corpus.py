"""The text a game shows, gathered over random play (the tiny model's tokenizer corpus)."""

from __future__ import annotations

import random

from games.registry import make


def text_corpus(
    name: str, n_games: int = 200, seed: int = 0, **options: int | float | str | bool
) -> list[str]:
    """Distinct texts of game `name` over `n_games` random games, in first-seen order.

    Rules, every action name, and per decision each agent's observation, history, legal
    action names and private information; deterministic for a given `seed`.
    """
    env = make(name, **options)
    rng = random.Random(seed)
    texts = dict.fromkeys([env.rules(), *env.all_action_names()])
    for game in range(n_games):
        env.reset(seed=seed * 1_000_003 + game)
        for _ in env.turns():
            for seat in env.agents:
                seen = [env.observation_text(seat), env.history_text(seat), env.private_info(seat)]
                texts.update(dict.fromkeys(seen))
            texts.update(dict.fromkeys(env.legal_action_names()))
            env.step(rng.choice(env.legal_actions()))
        for seat in env.possible_agents:
            texts.update(dict.fromkeys([env.observation_text(seat), env.history_text(seat)]))
    texts.pop("", None)
    return list(texts)
