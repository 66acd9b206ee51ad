"""A rules corpus: short question/answer examples generated from a game's own engine, for supervised pretraining on
what a pretrained LLM would know about the game (which moves are legal, what a move does, what you hold, what the
others may hold) and nothing about strategy: no target is ever a move a player chose.

Each example is seen by one agent: the consumer shows the game's rules, the agent's observation and history, and the
question; the answer follows from those alone, never from information hidden from the agent. States are drawn by
playing the game from reset with each seat played by a player picked at random from a mix (uniform random and the
game's scripted players), at a decision point chosen uniformly among the game's decision points.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from games import heuristics
from games.base import TextGameEnv
from games.openspiel_env import OptionValue
from games.opponents import Opponent, Policy, PolicyOpponent, make_opponent, opponent_names, uniform_policy
from games.posterior import posterior, supports_posterior
from games.registry import make

Kind = Literal["legal_moves", "next_state", "own_info", "posterior"]
KINDS: tuple[Kind, ...] = ("legal_moves", "next_state", "own_info", "posterior")

LEGAL_MOVES_QUESTION = "Which moves are legal now?"
OWN_INFO_QUESTION = "What is your private information?"

MAX_DRAWS = 1000
"""Most states drawn for one example before giving up (draws are resampled when the example would be undefined:
see `next_state_example` and `posterior_example`); far more than any shipped game needs."""

_DOCUMENTED_PLAYERS = {"heuristic": heuristics.POLICIES, "contrarian": heuristics.CONTRARIAN,
                       "timid": heuristics.TIMID, "truthful": heuristics.TRUTHFUL}
"""The scripted players whose policy is a rule written in `games.heuristics`, whose docstring states it in words: the
players a posterior question can name and describe (the equilibrium, a CFR+ table, and minimax, a search, cannot be
stated in a sentence)."""

_UNMIXED = frozenset({"equilibrium"})
"""Players left out of the state-sampling mix: the Leduc equilibrium can cost a CFR+ solve of minutes on first use,
and uniform random play already reaches every state."""


@dataclass(frozen=True)
class RulesExample:
    """One supervised question about a game state and its answer, from one agent's point of view."""

    kind: Kind
    """What the question asks (see `KINDS`)."""
    observation: str
    """`env.observation_text(agent)` at the state, exactly as the game shows it."""
    history: str
    """`env.history_text(agent)` at the state, exactly as the game shows it."""
    question: str
    """The question, in plain English; it does not repeat the observation or the history."""
    answer: str
    """The supervised target."""


@dataclass(frozen=True, eq=False)
class DrawnExample:
    """An example with the state it was drawn at, for checks that re-derive its answer from the game."""

    example: RulesExample
    env: TextGameEnv
    """The env at the state of the example; read it, do not step it."""
    agent: str
    """The agent whose view the example shows."""


@dataclass(frozen=True)
class StatedPolicy:
    """A policy that a posterior question states for the players other than the observer."""

    name: str
    """"uniform", or the scripted player's name ("timid")."""
    wording: str
    """How the question states it, after "Suppose every other player"."""
    action_probs: Policy = field(compare=False)
    """(env, agent) -> probability of each legal action."""


def kinds_for(name: str, **options: OptionValue) -> tuple[Kind, ...]:
    """The kinds game `name` supports: own_info only where players have private information, posterior only where
    supports_posterior(env) is true; legal_moves and next_state everywhere."""
    env = make(name, **options)
    supported: set[Kind] = {"legal_moves", "next_state"}
    if any(env.private_info(agent) for agent in env.agents):
        supported.add("own_info")
    if supports_posterior(env):
        supported.add("posterior")
    return tuple(kind for kind in KINDS if kind in supported)


def stated_policies(name: str, **options: OptionValue) -> tuple[StatedPolicy, ...]:
    """The policies a posterior question of game `name` may state: uniform random, then each scripted player
    available for the game whose rule `games.heuristics` documents (its docstring is the question's description)."""
    policies = [StatedPolicy("uniform", "chooses uniformly at random among its legal moves", uniform_policy)]
    for player in opponent_names(name, **options):
        if player in _DOCUMENTED_PLAYERS:
            rule = _DOCUMENTED_PLAYERS[player][name]
            description = " ".join((inspect.getdoc(rule) or "").split()).rstrip(".")
            policies.append(StatedPolicy(player, f"plays as the {player} player: {description}", rule))
    return tuple(policies)


def rules_corpus(name: str, n_examples: int, seed: int = 0, kinds: Sequence[Kind] | None = None,
                 **options: OptionValue) -> list[RulesExample]:
    """n_examples examples of game `name`, deterministic for a seed, cycling through the (supported, requested) kinds
    in equal shares; kinds not supported by the game raise ValueError naming the game and the kind."""
    return [drawn.example for drawn in drawn_examples(name, n_examples, seed, kinds, **options)]


def drawn_examples(name: str, n_examples: int, seed: int = 0, kinds: Sequence[Kind] | None = None,
                   **options: OptionValue) -> Iterator[DrawnExample]:
    """The examples of `rules_corpus` (same arguments, same examples), each with the state it was drawn at."""
    supported = kinds_for(name, **options)
    chosen = tuple(supported if kinds is None else kinds)
    for kind in chosen:
        if kind not in supported:
            raise ValueError(f"game {name!r} with {options} does not support kind {kind!r}; supported: {supported}")
    if not chosen:
        raise ValueError(f"no kinds requested for game {name!r}; supported: {supported}")
    rng = random.Random(seed)
    env = make(name, **options)
    mix = [player for player in opponent_names(name, **options) if player not in _UNMIXED]
    policies = stated_policies(name, **options)

    def mix_player() -> Opponent:
        return make_opponent(rng.choice(mix), name, seed=rng.randrange(2**32), **options)

    for index in range(n_examples):
        kind = chosen[index % len(chosen)]
        for _ in range(MAX_DRAWS):
            if kind == "posterior":
                drawn = _drawn_posterior(env, rng, mix_player, rng.choice(policies))
            else:
                players = {agent: mix_player() for agent in env.possible_agents}
                drawn = _drawn(kind, rng.choice(_decisions(env, players, rng)), rng)
            if drawn is not None:
                yield drawn
                break
        else:
            raise RuntimeError(f"game {name!r}: no {kind!r} example in {MAX_DRAWS} drawn states")


def legal_moves_example(env: TextGameEnv, agent: str) -> RulesExample:
    """Which moves `agent`, the agent to act, may play: their names in the game's order, comma-separated."""
    return _example("legal_moves", env, agent, LEGAL_MOVES_QUESTION, ", ".join(env.legal_action_names(agent)))


def next_state_example(env: TextGameEnv, agent: str, action: int) -> RulesExample | None:
    """What `agent`, the agent to act, sees after it plays `action`: its observation, a blank line, its history. None
    when a chance outcome follows the move (Leduc's public card), which the agent could not foresee. A move that ends
    the game is a real example: the answer shows the final board, or that the hand is over."""
    after = env.clone()
    after.step(action)
    if _chance_events(after) != _chance_events(env):
        return None
    question = f"What will you see after you play {env.action_name(action, agent)}?"
    answer = f"{after.observation_text(agent)}\n\n{after.history_text(agent)}"
    return _example("next_state", env, agent, question, answer)


def own_info_example(env: TextGameEnv, agent: str) -> RulesExample | None:
    """`agent`'s private information, verbatim (any seated agent, its turn or not); None where it has none."""
    info = env.private_info(agent)
    return _example("own_info", env, agent, OWN_INFO_QUESTION, info) if info else None


def posterior_example(env: TextGameEnv, observer: str, target: str, stated: StatedPolicy) -> RulesExample | None:
    """How likely each private value of `target` is to `observer` when every player but the observer plays `stated`:
    each value the posterior allows, in its order, with its probability to 2 decimals ("Jack: 0.25, King: 0.75").
    None when the history has probability zero under `stated` (the posterior would not be conditioned on it)."""
    found = posterior(env, observer, target, stated.action_probs)
    if not found.explained:
        return None
    question = (f"Suppose every other player {stated.wording}. How likely is each possible value of player "
                f"{env.possible_agents.index(target)}'s private information?")
    answer = ", ".join(f"{_value_name(value)}: {p:.2f}" for value, p in found.probabilities.items())
    return _example("posterior", env, observer, question, answer)


def _drawn(kind: Kind, env: TextGameEnv, rng: random.Random) -> DrawnExample | None:
    """A legal_moves, next_state (a uniformly chosen legal move) or own_info (a uniformly chosen seated agent)
    example at `env`'s decision point; None (the caller draws again) where the example is undefined."""
    agent = env.agent_selection
    if kind == "legal_moves":
        example = legal_moves_example(env, agent)
    elif kind == "next_state":
        example = next_state_example(env, agent, rng.choice(env.legal_actions(agent)))
    else:
        agent = rng.choice(env.agents)
        example = own_info_example(env, agent)
    return None if example is None else DrawnExample(example, env, agent)


def _drawn_posterior(env: TextGameEnv, rng: random.Random, mix_player: Callable[[], Opponent],
                     stated: StatedPolicy) -> DrawnExample | None:
    """A posterior example under `stated`: the observer (a random seat, played by a mix player) at one of its decision
    points, chosen uniformly, in a game where every other seat plays `stated`, so that the history has positive
    probability under it; the target is another random seat."""
    observer = rng.choice(env.possible_agents)
    players = {agent: PolicyOpponent(stated.name, stated.action_probs, rng.randrange(2**32)) if agent != observer
               else mix_player() for agent in env.possible_agents}
    decisions = [state for state in _decisions(env, players, rng) if state.agent_selection == observer]
    if not decisions:
        return None
    state = rng.choice(decisions)
    target = rng.choice([agent for agent in env.possible_agents if agent != observer])
    example = posterior_example(state, observer, target, stated)
    return None if example is None else DrawnExample(example, state, observer)


def _decisions(env: TextGameEnv, players: dict[str, Opponent], rng: random.Random) -> list[TextGameEnv]:
    """A copy of `env` at every decision point of one game played from reset (a seed drawn from `rng`), each agent's
    moves chosen by its player; `env` ends the game over."""
    env.reset(seed=rng.randrange(2**32))
    states = []
    for agent in env.turns():
        states.append(env.clone())
        env.step(players[agent].act(env, agent))
    return states


def _chance_events(env: TextGameEnv) -> int:
    return sum(1 for event in env.pyspiel_state.full_history() if event.player < 0)


def _value_name(value: str) -> str:
    """A posterior value as the game writes it: `Posterior` names card ranks lower-case ("king"), the game's text
    capitalises them ("King"); dice faces ("3 5") are unchanged."""
    return value.capitalize() if value.isalpha() else value


def _example(kind: Kind, env: TextGameEnv, agent: str, question: str, answer: str) -> RulesExample:
    return RulesExample(kind, env.observation_text(agent), env.history_text(agent), question, answer)
