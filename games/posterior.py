"""The posterior over another player's private information given what one player knows and the others' policies.

A belief ("I think they hold the King") can be scored against this posterior instead of against the real deal: the
score is then what the belief is worth given everything the believer could know, not the luck of the deal. By Bayes,
the posterior of a deal is its chance probability times the product of the other players' action probabilities along
the history, over the deals consistent with the observer's information state (its own private information and the
public moves), normalised; the target's value is the marginal over the rest of the deal (in three-player Kuhn, the
third player's card and that player's moves). Exact: every chance outcome is enumerated, which suits the games whose
class sets `exact_posterior` (Kuhn poker, Leduc poker, Liar's dice with a few dice); see `MAX_DEALS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyspiel

from games.base import TextGameEnv, value_overlap
from games.openspiel_env import OpenSpielEnv

Policy = Callable[[TextGameEnv, str], Mapping[int, float]]
"""(env, agent) -> probability of each legal action of `agent` at the env's state: the shape of the scripted players'
policies (`games.opponents.Policy`, an opponent's `action_probs`, `games.equilibrium.policy`)."""

PolicyTable = Mapping[str, Mapping[int, float]]
"""OpenSpiel information-state string -> {action: probability}, as `games.equilibrium.policy_table` returns."""

MAX_DEALS = 200_000
"""Most chance-outcome sequences enumerated for one posterior. Kuhn poker has (n+1)! deals for n players, two-player
Leduc 120, Liar's dice 6^(2d) for d dice each (d = 3 is 46,656, d = 4 is over 1.6 million and refused): beyond this
the exact enumeration is too slow and `posterior` raises ValueError."""


def table_policy(table: PolicyTable) -> Policy:
    """A policy that looks the agent's information-state string up in `table` (a missing key raises KeyError)."""

    def action_probs(env: TextGameEnv, agent: str) -> Mapping[int, float]:
        return table[env.info_state_string(agent)]

    return action_probs


@dataclass(frozen=True)
class Posterior:
    """What `observer` may believe about `target`'s private information."""

    observer: str
    """The agent whose information the posterior conditions on."""
    target: str
    """The agent whose private information it is about."""
    probabilities: Mapping[str, float] = field(hash=False)
    """Each private value of `target` that the observer cannot rule out -> its posterior probability (summing to 1),
    in the order first met enumerating the deals (chance outcomes lowest first). A value is named as the game's
    `belief_values` reads it from text: "king" (card ranks lower-case), "6" (a die face); several dice as their faces
    sorted, space-separated ("3 5")."""
    explained: bool
    """Whether the policies give the history a positive probability under some consistent deal. When not (a
    deterministic policy that would never have played the moves seen), `probabilities` is the prior: the chance
    probabilities of the consistent deals alone."""

    def probability(self, value: str) -> float:
        """The posterior probability of `value` (a name as in `probabilities`; 0 for any other)."""
        return self.probabilities.get(value, 0.0)

    def most_likely(self) -> str:
        """The value of highest posterior probability; on a tie, the first in `probabilities`."""
        return max(self.probabilities, key=self.probabilities.__getitem__)

    def expected_score(self, claimed: Sequence[str]) -> float:
        """The expected belief score of a belief naming `claimed` (values as `belief_values` extracts them) when the
        truth is drawn from this posterior: for one named value, its posterior probability. The score of a belief
        against one truth is the comparator's value overlap, |claimed ∩ true| / max(|claimed|, |true|) as
        multisets, so a hedge ("queen or king") earns half of each value's probability."""
        return sum(probability * value_overlap(claimed, value.split()) for value, probability in self.probabilities.items())


def supports_posterior(env: TextGameEnv) -> bool:
    """Whether `posterior` can compute `env`'s posteriors (an OpenSpiel game whose class sets `exact_posterior`)."""
    return isinstance(env, OpenSpielEnv) and env.exact_posterior and env.belief_values is not None


def posterior(env: TextGameEnv, observer: str, target: str, policy: Policy | Mapping[str, Policy]) -> Posterior:
    """The posterior over `target`'s private information at `env`'s current state, given `observer`'s information.

    `policy` gives the action probabilities of the players other than `observer` (one policy for all of them, or one
    per agent name); it is evaluated at each of their moves so far under every consistent deal, on a scratch copy of
    `env` (so a policy may read the acting agent's private information from the env, as the scripted ones do). The
    observer's own moves are the same under every consistent deal and cancel out. `env` is not changed.
    """
    if not supports_posterior(env):
        raise ValueError(f"{env.spec.name}: no exact posterior over private information for this game")
    assert isinstance(env, OpenSpielEnv) and env.belief_values is not None
    seats = {agent: seat for seat, agent in enumerate(env.possible_agents)}
    if observer not in seats or target not in seats or observer == target:
        raise ValueError(f"observer {observer!r} and target {target!r} must be two different agents of {sorted(seats)}")
    policies = _policies(policy, [a for a in env.possible_agents if a != observer])
    state = env.pyspiel_state
    seen = state.information_state_string(seats[observer])
    moves = [(event.player, event.action) for event in state.full_history() if event.player >= 0]
    scratch = env.clone()
    prior: dict[str, float] = {}
    joint: dict[str, float] = {}
    for final, chance, decisions in _deals(state.get_game(), moves):
        if final.information_state_string(seats[observer]) != seen:
            continue
        scratch.load_state(final)
        value = " ".join(env.belief_values(scratch.private_info(target)))
        likelihood = 1.0
        for node, player, action in decisions:
            if player == seats[observer] or likelihood == 0.0:
                continue
            scratch.load_state(node)
            agent = env.possible_agents[player]
            likelihood *= policies[agent](scratch, agent).get(action, 0.0)
        prior[value] = prior.get(value, 0.0) + chance
        joint[value] = joint.get(value, 0.0) + chance * likelihood
    evidence = sum(joint.values())
    weights = joint if evidence > 0 else prior
    total = sum(weights.values())
    return Posterior(observer, target, {value: weight / total for value, weight in weights.items()}, evidence > 0)


def _policies(policy: Policy | Mapping[str, Policy], agents: list[str]) -> Mapping[str, Policy]:
    if not isinstance(policy, Mapping):
        return dict.fromkeys(agents, policy)
    missing = [agent for agent in agents if agent not in policy]
    if missing:
        raise ValueError(f"no policy for {missing}; the posterior needs one for every player but the observer")
    return policy


_Decision = tuple[pyspiel.State, int, int]
"""(state before a move, player, action)."""


def _deals(game: pyspiel.Game, moves: list[tuple[int, int]]) -> Iterator[tuple[pyspiel.State, float, list[_Decision]]]:
    """Every history that plays `moves` (player, action) with any chance outcomes: (its state, its chance
    probability, the decisions along it). Histories where a move is not that player's legal move are left out."""
    count = 0
    stack: list[tuple[pyspiel.State, float, int, list[_Decision]]] = [(game.new_initial_state(), 1.0, 0, [])]
    while stack:
        state, chance, index, decisions = stack.pop()
        if state.is_chance_node():
            for outcome, probability in reversed(state.chance_outcomes()):
                if probability > 0:
                    stack.append((state.child(outcome), chance * probability, index, decisions))
            continue
        if index == len(moves):
            count += 1
            if count > MAX_DEALS:
                raise ValueError(f"{game}: more than {MAX_DEALS} deals to enumerate for an exact posterior")
            yield state, chance, decisions
            continue
        player, action = moves[index]
        if state.is_terminal() or state.current_player() != player or action not in state.legal_actions():
            continue
        stack.append((state.child(action), chance, index + 1, [*decisions, (state, player, action)]))

