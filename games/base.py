"""The interface every Strat game environment implements: a PettingZoo AEC env with text."""

from __future__ import annotations

import abc
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import pyspiel
from pettingzoo import AECEnv

from games.parsing import ActionNameMatcher


@dataclass(frozen=True)
class GameSpec:
    """Static facts about a game as configured."""

    name: str
    """Registry name, e.g. "kuhn_poker"."""
    num_players: int
    """Number of agents, named "player_0" ... "player_{n-1}"."""
    return_range: tuple[float, float]
    """(worst, best) return any agent can get by legal play."""
    zero_sum: bool
    """Whether the agents' returns always sum to zero."""
    perfect_information: bool
    """Whether every agent sees the whole state."""
    exploitable: bool = False
    """Whether Strat computes this game's exploitability (a two-player zero-sum game with a sequence-form best
    response: Kuhn and Leduc poker for two players)."""


BeliefValues = Callable[[str], tuple[str, ...]]
"""Text -> the private-information values it names (card ranks, dice faces), for belief accuracy."""


def value_overlap(claimed: Sequence[str], true: Sequence[str]) -> float:
    """|claimed ∩ true| / max(|claimed|, |true|) as multisets: 1 for an exact claim, partial for a hedge, 0 when
    either is empty. The belief score of values `claimed` against the `true` ones."""
    if not claimed or not true:
        return 0.0
    shared = sum((Counter(claimed) & Counter(true)).values())
    return shared / max(len(claimed), len(true))


def agent_name(player: int) -> str:
    """The agent id of seat `player`."""
    return f"player_{player}"


class TextGameEnv(AECEnv, abc.ABC):
    """A PettingZoo AEC env that an LLM can play through text.

    Actions are integers in the AEC API and short names in text; `parse_action` maps model
    output back to an action id and never raises.
    """

    spec: GameSpec
    belief_values: ClassVar[BeliefValues | None] = None
    """How a belief about another player's private information is read from text, for the CoT comparison's
    belief accuracy; None in games where a belief names nothing comparable (no belief score)."""
    exact_posterior: ClassVar[bool] = False
    """Whether `games.posterior.posterior` enumerates this game's deals exactly for the posterior over a player's
    private information (an OpenSpiel game with `belief_values` and few enough deals)."""
    text_options: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Options that change only the text (how moves are named), not the game, each with its allowed values (the first
    is the default): the env reads its choices from `self.text`, the engine underneath never sees them, and a
    `tiny:<game>` model's tokenizer is trained on the text they make."""

    @abc.abstractmethod
    def rules(self) -> str:
        """The game's rules, for a prompt."""

    @abc.abstractmethod
    def observation_text(self, agent: str) -> str:
        """What `agent` sees now, as friendly text; never others' private information."""

    @abc.abstractmethod
    def history_text(self, agent: str) -> str:
        """The public moves so far from `agent`'s perspective, one per line ("" at the start)."""

    @abc.abstractmethod
    def legal_actions(self, agent: str | None = None) -> list[int]:
        """Legal action ids of `agent` (default: the agent to act); [] when it is not its turn."""

    @abc.abstractmethod
    def action_name(self, action: int, agent: str | None = None) -> str:
        """The text name of action id `action`."""

    @abc.abstractmethod
    def all_action_names(self) -> list[str]:
        """Every action name the game can ever use."""

    @abc.abstractmethod
    def private_info(self, agent: str) -> str:
        """Training-only truth of `agent`'s private information as short text ("" if none)."""

    @abc.abstractmethod
    def returns(self) -> dict[str, float]:
        """Each agent's return so far; the final returns once the game is over."""

    @abc.abstractmethod
    def info_state_string(self, agent: str) -> str:
        """OpenSpiel's information-state string of `agent` (a policy-table key)."""

    @property
    @abc.abstractmethod
    def pyspiel_state(self) -> pyspiel.State:
        """The underlying OpenSpiel state; read it, do not change it."""

    @abc.abstractmethod
    def clone(self) -> TextGameEnv:
        """An independent copy of this env, mid-game."""

    def guess_private_info(self, agent: str, seat: int, rng: random.Random) -> tuple[str, str] | None:
        """The warm start's templated belief: (why, guess) of what player `seat` holds, from what `agent` has seen;
        None in games without private information."""
        return None

    def move_reading(self, agent: str, action: int) -> str:
        """The warm start's templated `<their_view>`: how the others might read `agent` playing `action`, from
        public facts only."""
        if self.spec.perfect_information:
            return "they may read it as an attempt to build my own line or to block theirs"
        return "they will try to work out why I chose it"

    def finished(self) -> bool:
        """Whether the game is over for every agent (PettingZoo keeps finished agents until each steps None)."""
        return not self.agents or all(self.terminations[a] or self.truncations[a] for a in self.agents)

    def turns(self) -> Iterator[str]:
        """The agent to act at each turn until the game is over (`agent_iter` without the finished agents, which
        are stepped out on the way); the caller steps the agent it is given."""
        for agent in self.agent_iter():
            if self.terminations[agent] or self.truncations[agent]:
                self.step(None)
            else:
                yield agent

    def skip_finished(self) -> None:
        """Step past every finished agent whose turn it is (the AEC API's None step), so that the agent to act,
        if any, is one still playing."""
        while self.agents and (self.terminations[self.agent_selection] or self.truncations[self.agent_selection]):
            self.step(None)

    def legal_action_names(self, agent: str | None = None) -> list[str]:
        """Names of the legal actions of `agent` (default: the agent to act)."""
        return [self.action_name(action, agent) for action in self.legal_actions(agent)]

    def some_move_illegal(self) -> bool:
        """Whether the agent to act has fewer legal moves than the game has moves (a taken cell, a full column, a
        bid below the last): a decision where naming a legal move takes reading the state."""
        return len(self.legal_actions(self.agent_selection)) < len(self.all_action_names())

    def action_from_name(self, name: str, agent: str | None = None) -> int | None:
        """The legal action that `name` spells (up to case and spacing), else None."""
        return self._legal_action_named(self._matcher.exact(name), agent)

    def parse_action(self, text: str, agent: str | None = None) -> int | None:
        """The legal action that free text names, tolerating case, spacing and other words.

        None when the text names no action, several different ones, or an illegal one.
        """
        if not isinstance(text, str):
            return None
        name = self._matcher.exact(text) or self._matcher.find(text)
        return self._legal_action_named(name, agent)

    @property
    def _matcher(self) -> ActionNameMatcher:
        return _matcher_for(tuple(self.all_action_names()))

    def _legal_action_named(self, name: str | None, agent: str | None) -> int | None:
        if name is None:
            return None
        for action in self.legal_actions(agent):
            if self.action_name(action, agent) == name:
                return action
        return None


@lru_cache(maxsize=64)
def _matcher_for(names: tuple[str, ...]) -> ActionNameMatcher:
    return ActionNameMatcher(names)
