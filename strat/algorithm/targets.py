"""Score targets estimated on the weights that played: the other agents' policy at the information states a turn's
score needs, and the posterior over their private information that policy implies.

A prediction scored against the one move that followed, and a belief scored against the one card that was dealt,
are mostly luck: when the card cannot be inferred, the best belief's expected score is chance. With targets, a
prediction scores the probability that the opponent's policy gives the predicted move
(`comparison.prediction_target: policy`), and a belief the posterior probability of the value it names given the
public history and that policy (`comparison.belief_target: posterior`, `games.posterior`).

The policy table is estimated at the end of a rollout, on the weights that played it:

1. from the rollout's own turns at each information state, leaving out the scored episode's own turns
   (leave-one-out: the move a prediction is scored on never counts towards its own target);
2. then, for states seen fewer than `min_visits` times, from fresh samples of the same player at that state, within a
   budget of `samples` generations per rollout;
3. scripted players' turns use their exact action probabilities.

What could not be estimated falls back to the sampled move and the true private information, and the share of
components scored on targets is reported (`cot/target_coverage`). Pure logic: the sampling is injected.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import games
from games.base import TextGameEnv
from games.opponents import Opponent, make_opponent
from games.posterior import Policy, posterior, supports_posterior
from strat.algorithm.records import BeliefTarget, Episode, Turn, TurnTargets

PredictionTarget = Literal["sampled", "policy"]
BeliefTargetKind = Literal["truth", "posterior"]

SCRIPTED = "scripted:"
"""Prefix of a scripted player's seat name in `Episode.seats` (`scripted:heuristic`)."""

Sampler = Callable[[Sequence[tuple[TextGameEnv, str]], int], list[int]]
"""(env, agent) locations and a seed -> one sampled action of the player at each location (repeat a location to
sample it several times), in one batched generation."""

_Key = tuple[str, str]
"""(seat name, information-state string)."""


@dataclass(frozen=True)
class TargetSettings:
    """Which targets to estimate, and the sampling budget; maps onto `comparison.*`."""

    prediction: PredictionTarget = "sampled"
    belief: BeliefTargetKind = "truth"
    min_visits: int = 8
    """Turns at a state below which fresh samples are drawn (`comparison.policy_min_visits`)."""
    samples: int = 256
    """Most fresh generations per rollout (`comparison.policy_samples`); 0 estimates from the rollout's turns only."""
    diagnose: bool = False
    """Estimate targets even when neither setting uses them, to report how old and new scores compare."""

    def __post_init__(self) -> None:
        if self.min_visits < 1 or self.samples < 0:
            raise ValueError(f"policy_min_visits {self.min_visits} must be >= 1 and policy_samples {self.samples} >= 0")

    @property
    def wanted(self) -> bool:
        """Whether a rollout estimates targets at all."""
        return self.prediction == "policy" or self.belief == "posterior" or self.diagnose


@dataclass(frozen=True)
class TargetReport:
    """What one estimation cost: the table's states, how many fresh samples it drew, and the states it could not
    cover."""

    states: int
    sampled: int
    uncovered: int


class _Missing(Exception):
    """A policy-table entry with no turns and no samples."""


@dataclass
class _Table:
    """Action counts per (seat, information state), with each episode's own contribution kept for leave-one-out."""

    counts: dict[_Key, Counter[int]] = dataclasses.field(default_factory=dict)
    by_episode: dict[str, dict[_Key, Counter[int]]] = dataclasses.field(default_factory=dict)
    sampled: dict[_Key, Counter[int]] = dataclasses.field(default_factory=dict)

    def add(self, episode_id: str, key: _Key, action: int) -> None:
        self.counts.setdefault(key, Counter())[action] += 1
        self.by_episode.setdefault(episode_id, {}).setdefault(key, Counter())[action] += 1

    def visits(self, key: _Key) -> int:
        return sum(self.counts.get(key, Counter()).values()) + sum(self.sampled.get(key, Counter()).values())

    def probabilities(self, key: _Key, leave_out: str) -> dict[int, float]:
        """The estimated policy at `key` without episode `leave_out`'s turns; raises _Missing with nothing left."""
        counts = self.counts.get(key, Counter()) - self.by_episode.get(leave_out, {}).get(key, Counter())
        counts = counts + self.sampled.get(key, Counter())
        total = sum(counts.values())
        if total == 0:
            raise _Missing(key)
        return {action: count / total for action, count in counts.items()}


def replay(episode: Episode, options: Mapping[str, object]) -> list[TextGameEnv]:
    """The game's state before each of `episode`'s turns, replayed from its seed and moves (a copy per turn)."""
    env = games.make(episode.game, **options)
    env.reset(seed=episode.seed)
    states = []
    for turn in episode.turns:
        if env.finished() or env.agent_selection != turn.agent:
            raise ValueError(f"{episode.episode_id}: replaying turn {turn.turn_index} found "
                             f"{'the game over' if env.finished() else env.agent_selection} instead of {turn.agent}")
        states.append(env.clone())
        env.step(turn.action)
        env.skip_finished()
    return states


def _next_other(episode: Episode, turn: Turn) -> Turn | None:
    return next((t for t in episode.turns if t.turn_index > turn.turn_index and t.agent != turn.agent), None)


def _scored(episode: Episode, turn: Turn) -> bool:
    """Whether the comparison scores a prediction or a belief of `turn` (an ego turn with reasoning depth >= 1)."""
    return turn.agent in episode.ego_agents and turn.response is not None and turn.response.depth >= 1


def belief_subjects(episode: Episode, turn: Turn) -> list[str]:
    """The other agents whose private information the belief of `turn` is scored on: those with private
    information, and only once another agent has acted (before, there is nothing to infer from). The comparison
    scores beliefs on these, and the posteriors are made for these."""
    if not any(t.turn_index < turn.turn_index and t.agent != turn.agent for t in episode.turns):
        return []
    return [agent for agent, info in episode.private_info.items() if agent != turn.agent and info]


class TargetEstimator:
    """Estimates `TurnTargets` for a rollout's episodes; `samplers` draw fresh moves per LLM seat name."""

    def __init__(self, settings: TargetSettings, options: Mapping[str, object],
                 samplers: Mapping[str, Sampler], scripted: Mapping[str, Opponent] | None = None) -> None:
        self.settings = settings
        self.options = dict(options)
        self.samplers = samplers
        self._scripted: dict[str, Opponent] = dict(scripted or {})
        """Scripted players by name: those given (the ones `games` cannot make by name, e.g. the exploiter that
        played), and the others made by name on first use."""

    def estimate(self, episodes: Sequence[Episode], seed: int) -> tuple[list[Episode], TargetReport]:
        """`episodes` with their `targets` filled in, and what the estimation cost."""
        table = _Table()
        for episode in episodes:
            for turn in episode.turns:
                seat = episode.seats.get(turn.agent, "")
                if seat and not seat.startswith(SCRIPTED) and turn.info_state:
                    table.add(episode.episode_id, (seat, turn.info_state), turn.action)
        states = {episode.episode_id: replay(episode, self.options) for episode in episodes}
        needed = self._needed(episodes, states)
        sampled = self._sample(table, needed, seed)
        out = [dataclasses.replace(episode, targets=self._targets(episode, states[episode.episode_id], table))
               for episode in episodes]
        uncovered = sum(1 for key in needed if table.visits(key) == 0)
        return out, TargetReport(len(table.counts.keys() | needed.keys()), sampled, uncovered)

    def _policy(self, episode: Episode, table: _Table,
                record: dict[_Key, tuple[TextGameEnv, str]] | None = None) -> Policy:
        """The action probabilities of the agents of `episode` at any state: scripted seats exactly, LLM seats from
        `table` without this episode's turns; with `record`, uniform instead, noting each LLM state asked for."""

        def action_probs(env: TextGameEnv, agent: str) -> Mapping[int, float]:
            seat = episode.seats.get(agent, "")
            if seat.startswith(SCRIPTED):
                name = seat[len(SCRIPTED):]
                if name not in self._scripted:
                    self._scripted[name] = make_opponent(name, episode.game, **self.options)
                return self._scripted[name].action_probs(env, agent)
            if not seat:
                raise _Missing(agent)
            key = (seat, env.info_state_string(agent))
            if record is not None:
                record.setdefault(key, (env.clone(), agent))
                legal = env.legal_actions(agent)
                return dict.fromkeys(legal, 1.0 / len(legal))
            return table.probabilities(key, episode.episode_id)

        return action_probs

    def _needed(self, episodes: Sequence[Episode],
                states: Mapping[str, list[TextGameEnv]]) -> dict[_Key, tuple[TextGameEnv, str]]:
        """Every LLM (seat, state) a target asks for, with a state to sample it at."""
        needed: dict[_Key, tuple[TextGameEnv, str]] = {}
        for episode in episodes:
            replayed = states[episode.episode_id]
            recorder = self._policy(episode, _Table(), needed)
            for turn in episode.turns:
                if not _scored(episode, turn):
                    continue
                following = _next_other(episode, turn)
                if following is not None:
                    recorder(replayed[following.turn_index], following.agent)
                env = replayed[turn.turn_index]
                if self.settings.belief == "posterior" or self.settings.diagnose:
                    for other in belief_subjects(episode, turn) if supports_posterior(env) else []:
                        try:
                            posterior(env, turn.agent, other, recorder)
                        except (_Missing, ValueError):
                            continue
        return needed

    def _sample(self, table: _Table, needed: Mapping[_Key, tuple[TextGameEnv, str]], seed: int) -> int:
        """Fresh moves at the needed states seen fewer than `min_visits` times, fewest first, within the budget."""
        budget, short = self.settings.samples, []
        for key in sorted(needed, key=lambda k: (table.visits(k), k)):
            missing = self.settings.min_visits - table.visits(key)
            if missing <= 0 or key[0] not in self.samplers:
                continue
            take = min(missing, budget)
            if take <= 0:
                break
            short.append((key, take))
            budget -= take
        drawn = 0
        for seat in sorted({key[0] for key, _ in short}):
            located = [needed[key] for key, take in short if key[0] == seat for _ in range(take)]
            keys = [key for key, take in short if key[0] == seat for _ in range(take)]
            actions = self.samplers[seat](located, seed)
            if len(actions) != len(located):
                raise ValueError(f"the {seat} sampler returned {len(actions)} moves for {len(located)} states")
            for key, action in zip(keys, actions, strict=True):
                table.sampled.setdefault(key, Counter())[action] += 1
            drawn += len(actions)
        return drawn

    def _targets(self, episode: Episode, replayed: list[TextGameEnv], table: _Table) -> tuple[TurnTargets, ...]:
        policy = self._policy(episode, table)
        out = []
        for turn in episode.turns:
            if not _scored(episode, turn):
                continue
            following = _next_other(episode, turn)
            out.append(TurnTargets(turn.turn_index, self._next_move(following, replayed, policy),
                                   self._beliefs(episode, turn, replayed[turn.turn_index], policy)))
        return tuple(out)

    @staticmethod
    def _next_move(following: Turn | None, replayed: list[TextGameEnv],
                   policy: Policy) -> tuple[tuple[str, float], ...] | None:
        if following is None:
            return (("none", 1.0),)
        env = replayed[following.turn_index]
        try:
            probs = policy(env, following.agent)
        except _Missing:
            return None
        names: dict[str, float] = {}
        for action, probability in probs.items():
            name = env.action_name(action, following.agent)
            names[name] = names.get(name, 0.0) + probability
        return tuple(names.items())

    def _beliefs(self, episode: Episode, turn: Turn, env: TextGameEnv, policy: Policy) -> tuple[BeliefTarget, ...]:
        if not (self.settings.belief == "posterior" or self.settings.diagnose) or not supports_posterior(env):
            return ()
        out = []
        for other in belief_subjects(episode, turn):
            try:
                found = posterior(env, turn.agent, other, policy)
            except (_Missing, ValueError):
                return ()  # all or nothing: a belief about several players is scored on one target
            out.append(BeliefTarget(other, tuple(found.probabilities.items())))
        return tuple(out)
