"""PettingZoo AEC adapter over an OpenSpiel (pyspiel) game; each game adds its text."""

from __future__ import annotations

import abc
import copy
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pyspiel
from gymnasium import spaces
from open_spiel.python.observation import make_observation

from games.base import GameSpec, TextGameEnv, agent_name

OptionValue = int | float | str | bool
_TEXT_OPTIONS: dict[str, frozenset[str]] = {}
"""Each game's text options (`TextGameEnv.text_options`) by game name, which `load_game` keeps from pyspiel."""

_CHANCE = int(pyspiel.PlayerId.CHANCE)
_TERMINAL = int(pyspiel.PlayerId.TERMINAL)


@dataclass(frozen=True)
class _Config:
    """One loaded game and everything derived from it, shared by all envs of that config."""

    game: pyspiel.Game
    spec: GameSpec
    action_names: tuple[str, ...]
    uses_info_state_tensor: bool
    observation_size: int


class OpenSpielEnv(TextGameEnv):
    """A pyspiel game as an AEC env: chance nodes are sampled with the env's seeded RNG.

    Subclasses name the game (`game_name`) and write its text: `rules`, `observation_text`,
    `private_info`, `_action_names` and optionally `_move_text` / `_chance_text`.
    """

    game_name: ClassVar[str]
    fixed_options: ClassVar[dict[str, OptionValue]] = {}
    """pyspiel options whose other values the text does not describe, with their only value."""
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "is_parallelizable": False}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = getattr(cls, "game_name", None)
        if isinstance(name, str):
            _TEXT_OPTIONS[name] = frozenset(cls.text_options)

    def __init__(self, render_mode: str | None = None, **options: OptionValue) -> None:
        super().__init__()
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'ansi'")
        self.render_mode = render_mode
        self.text: dict[str, str] = {}
        """The value of each text option (`text_options`), taken out of `options` before pyspiel sees them."""
        for key, allowed in self.text_options.items():
            self.text[key] = options.pop(key, allowed[0])
            if self.text[key] not in allowed:
                raise ValueError(f"{self.game_name}: option {key}={self.text[key]!r} is not supported; "
                                 f"allowed: {list(allowed)}")
        for key, value in self.fixed_options.items():
            if options.get(key, value) != value:
                raise ValueError(
                    f"{self.game_name}: option {key}={options[key]!r} is not supported; "
                    f"allowed: {value!r}"
                )
        config = self._config = _configure(type(self), tuple(sorted(options.items())))
        self.spec = config.spec
        self.possible_agents = [agent_name(p) for p in range(self.spec.num_players)]
        self._seats = {agent: p for p, agent in enumerate(self.possible_agents)}
        # Spaces per agent and per env, so that seeding one never changes another's samples.
        self.observation_spaces = {
            agent: self._observation_space() for agent in self.possible_agents
        }
        self.action_spaces = {
            agent: spaces.Discrete(len(config.action_names)) for agent in self.possible_agents
        }
        # Writes tensors straight into a numpy buffer: ~5x faster than the list-returning calls.
        perfect_recall = pyspiel.IIGObservationType(perfect_recall=True)
        self._observer = make_observation(
            config.game, perfect_recall if config.uses_info_state_tensor else None
        )
        self._rng = random.Random()
        self.reset()

    @classmethod
    @abc.abstractmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        """Text name of every action id of `game`, indexed by id."""

    @classmethod
    def _exploitable(cls, game: pyspiel.Game) -> bool:
        """Whether Strat computes the exploitability of `game` as configured (GameSpec.exploitable)."""
        return False

    def moves_of(self, seat: int) -> list[int]:
        """The actions player `seat` has taken so far (public in every game here)."""
        return [event.action for event in self._state.full_history() if event.player == seat]

    def _observation_space(self) -> spaces.Dict:
        return spaces.Dict(
            {
                "observation": spaces.Box(
                    -np.inf, np.inf, shape=(self._config.observation_size,), dtype=np.float32
                ),
                "action_mask": spaces.Box(
                    0, 1, shape=(len(self._config.action_names),), dtype=np.int8
                ),
            }
        )

    # --- AEC API -------------------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self._rng.seed(seed)
        self._start(self._config.game.new_initial_state())

    def step(self, action: int | None) -> None:
        if self._current == _TERMINAL:  # every agent still here has finished
            self._remove_finished(action)
            return
        agent = self.agent_selection
        if action is None or action not in self._legal:
            raise ValueError(
                f"{self.spec.name}: action {action!r} is not legal for {agent}; "
                f"legal actions: {dict(zip(self._legal, self.legal_action_names()))}"
            )
        self._state.apply_action(int(action))
        self._advance()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """`agent`'s information-state tensor (observation tensor in perfect-information games)
        and legal-action mask (all zero when it is not its turn), as pyspiel computes them."""
        player = self._seats[agent]
        self._observer.set_from(self._state, player)
        mask = bytearray(len(self._config.action_names))
        if player == self._current:
            for action in self._legal:
                mask[action] = 1
        return {
            "observation": self._observer.tensor.copy(),
            "action_mask": np.frombuffer(mask, dtype=np.int8),
        }

    def render(self) -> str | None:
        """The full state as text (including private information); only for render_mode='ansi'."""
        return str(self._state) if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Nothing to release."""

    # --- text and training interface ------------------------------------------------------

    @property
    def pyspiel_state(self) -> pyspiel.State:
        """The underlying pyspiel state; read it, do not change it."""
        return self._state

    def legal_actions(self, agent: str | None = None) -> list[int]:
        if agent is not None and self._seats[agent] != self._current:
            return []
        return list(self._legal)

    def action_name(self, action: int, agent: str | None = None) -> str:
        return self._config.action_names[action]

    def all_action_names(self) -> list[str]:
        return list(self._config.action_names)

    def history_text(self, agent: str) -> str:
        viewer = self._seats[agent]
        events = self._events()
        lines = []
        chance_index = 0
        for i, (player, action) in enumerate(events):
            if player == _CHANCE:
                lines.append(self._chance_text(chance_index, action, viewer))
                chance_index += 1
            else:
                lines.append(self._move_sentence(events, i, viewer))
        return "\n".join(line for line in lines if line)

    def returns(self) -> dict[str, float]:
        return dict(zip(self.possible_agents, self._state.returns()))

    def info_state_string(self, agent: str) -> str:
        return self._state.information_state_string(self._seats[agent])

    def clone(self) -> OpenSpielEnv:
        other = copy.copy(self)
        other._state = self._state.clone()
        other._rng = random.Random()
        other._rng.setstate(self._rng.getstate())
        other._legal = list(self._legal)
        other.agents = list(self.agents)
        for name in ("rewards", "_cumulative_rewards", "terminations", "truncations"):
            setattr(other, name, dict(getattr(self, name)))
        other.infos = {agent: dict(info) for agent, info in self.infos.items()}
        return other

    def load_state(self, state: pyspiel.State) -> None:
        """Restart this env at a copy of `state`, as if play had reached it."""
        self._start(state.clone())

    # --- text hooks for subclasses --------------------------------------------------------

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        """What a player did, as a past-tense phrase ("bet", "played b2").

        `earlier` holds the (player, action) events before this move, chance included.
        """
        return f"played {self.action_name(action)}"

    def _chance_text(self, index: int, outcome: int, viewer: int) -> str:
        """The `index`-th chance outcome as `viewer` may see it; "" when it is private."""
        return ""

    def _who(self, player: int, viewer: int) -> str:
        """How `viewer` refers to `player`."""
        if player == viewer:
            return "You"
        if self.spec.num_players == 2:
            return "Your opponent"
        return f"Player {player}"

    def _events(self) -> list[tuple[int, int]]:
        """(player, action) for every event so far, chance included."""
        return [(event.player, event.action) for event in self._state.full_history()]

    def _move_sentence(self, events: list[tuple[int, int]], index: int, viewer: int) -> str:
        player, action = events[index]
        return f"{self._who(player, viewer)} {self._move_text(action, events[:index])}."

    def _moves_since_last_turn(self, viewer: int) -> list[str]:
        """Sentences for the other players' moves since `viewer` last acted."""
        events = self._events()
        recent: list[str] = []
        for index in range(len(events) - 1, -1, -1):
            player = events[index][0]
            if player == viewer:
                break
            if player != _CHANCE:
                recent.append(self._move_sentence(events, index, viewer))
        return recent[::-1]

    # --- internals ------------------------------------------------------------------------

    def _start(self, state: pyspiel.State) -> None:
        self._state = state
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self.agent_selection = self.agents[0]
        self._advance()

    def _advance(self) -> None:
        """Resolve chance nodes, then publish the next agent, or the returns at the end.

        Rewards come only at the end (OpenSpiel's terminal reward model, checked on load).
        """
        state = self._state
        player = state.current_player()
        while player == _CHANCE:
            state.apply_action(self._sample(state.chance_outcomes()))
            player = state.current_player()
        self._current = player
        if player == _TERMINAL:
            self._legal = []
            self.rewards = dict(zip(self.possible_agents, state.returns()))
            self._accumulate_rewards()
            self.terminations = dict.fromkeys(self.agents, True)
        else:
            self._legal = state.legal_actions()
            self.agent_selection = self.possible_agents[player]

    def _remove_finished(self, action: None) -> None:
        """Step of an agent whose game is over: it leaves, and the next finished agent is up."""
        if action is not None:
            raise ValueError(f"{self.agent_selection} has finished; its only valid action is None")
        agent = self.agent_selection
        for table in (self.terminations, self.truncations, self._cumulative_rewards, self.infos):
            del table[agent]
        self.agents.remove(agent)
        # The final rewards were already accumulated when the game ended.
        self.rewards = dict.fromkeys(self.agents, 0.0)
        if self.agents:
            self.agent_selection = self.agents[0]

    def _sample(self, outcomes: list[tuple[int, float]]) -> int:
        threshold = self._rng.random()
        for action, probability in outcomes:
            threshold -= probability
            if threshold < 0:
                return action
        return outcomes[-1][0]


@lru_cache(maxsize=None)
def _configure(cls: type[OpenSpielEnv], options: tuple[tuple[str, OptionValue], ...]) -> _Config:
    game = load_game(cls.game_name, dict(options))
    game_type = game.get_type()
    information = pyspiel.GameType.Information
    if game_type.reward_model != pyspiel.GameType.RewardModel.TERMINAL:
        raise ValueError(f"{cls.game_name}: only games with terminal rewards are supported")
    spec = GameSpec(
        name=cls.game_name,
        num_players=game.num_players(),
        return_range=(game.min_utility(), game.max_utility()),
        zero_sum=game_type.utility == pyspiel.GameType.Utility.ZERO_SUM,
        perfect_information=game_type.information == information.PERFECT_INFORMATION,
        exploitable=cls._exploitable(game),
    )
    uses_info = game_type.provides_information_state_tensor
    return _Config(
        game=game,
        spec=spec,
        action_names=tuple(cls._action_names(game)),
        uses_info_state_tensor=uses_info,
        observation_size=(
            game.information_state_tensor_size() if uses_info else game.observation_tensor_size()
        ),
    )


def load_game(name: str, options: dict[str, OptionValue]) -> pyspiel.Game:
    """Load pyspiel game `name` with `options`, less the game's text options; unknown or bad options raise
    ValueError."""
    text = _TEXT_OPTIONS.get(name, frozenset())
    options = {key: value for key, value in options.items() if key not in text}
    allowed = pyspiel.load_game(name).get_parameters()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown option(s) {unknown}; allowed options: {sorted({*allowed, *text})}")
    try:
        return pyspiel.load_game(name, options)
    except pyspiel.SpielError as error:
        raise ValueError(f"{name}: invalid options {options}: {error}") from error
