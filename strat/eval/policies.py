"""Policies that play a game, scripted or an LLM from a checkpoint, behind one interface, and tables of them
played against each other through the rollout's game loop (`strat.play.rollout.play_games`): scripted seats
move at once, and every pending decision of an LLM in a round goes to it in one batch."""

from __future__ import annotations

import dataclasses
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

import games
from games.base import TextGameEnv
from games.opponents import Opponent, make_opponent, opponent_names
from strat.algorithm.records import Episode
from strat.config import ExperimentConfig
from strat.config_loading import from_dict
from strat.engines import build_engine
from strat.engines.base import Generation, SamplingParams
from strat.errors import ConfigError
from strat.eval import sidecar
from strat.eval.exploitability import (
    ActionSampler,
    ExploitabilityEstimate,
    estimate_exploitability,
    exact_estimate,
    scripted_sampler,
)
from strat.model import checkpoint as checkpoints
from strat.model import hub
from strat.play.rollout import (
    Encode,
    Generate,
    LiveGame,
    LLMPlayer,
    RolloutRunner,
    RolloutSettings,
    derive_seed,
    play_games,
)
from strat.play.settings import engine_settings, rollout_settings


@dataclass(frozen=True)
class PolicyInfo:
    """What a report says about a policy: its name, kind, and for an LLM where it came from and its format."""

    name: str
    kind: str
    """`scripted` or `llm`."""
    checkpoint: str | None = None
    step: int | None = None
    run_dir: str | None = None
    backend: str | None = None
    depth: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    format_penalty: float | None = None


@dataclass(frozen=True)
class ReasoningOverrides:
    """What `strat eval` sets over an LLM's reasoning format and sampling; None keeps its run's (or, for a bare
    model directory, the config's default)."""

    depth: int | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None


class Policy(ABC):
    """A player for any seat of one game."""

    info: PolicyInfo
    game: str
    game_options: dict[str, object]
    samples_per_infoset: int = 16
    """Samples per information set of a sampled exploitability when none is asked for (an LLM from a run: the
    run's `eval.samples_per_infoset`)."""

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def is_llm(self) -> bool:
        return self.info.kind == "llm"

    @abstractmethod
    def player(self, seed: int) -> Opponent | LLMPlayer:
        """Who plays this policy's seats at one table: a scripted opponent seeded by `seed`, or the LLM."""

    @abstractmethod
    def exploitability(self, samples_per_infoset: int, seed: int, bootstrap: int) -> ExploitabilityEstimate:
        """The policy's exploitability in its game (Kuhn and Leduc poker)."""

    @abstractmethod
    def sampler(self, seed: int) -> ActionSampler:
        """The policy's moves at given decisions, `n` at each (an LLM in its reasoning format, its invalid output
        counted as the fallback it plays)."""

    def close(self) -> None:
        """Free what the policy holds (an LLM's engine)."""


class ScriptedPolicy(Policy):
    """A scripted player of `games.opponents`; it knows its action distribution, so its exploitability is exact."""

    def __init__(self, name: str, game: str, game_options: dict[str, object] | None = None) -> None:
        self.game, self.game_options = game, dict(game_options or {})
        self.info = PolicyInfo(name=name, kind="scripted")
        self._opponent = make_opponent(name, game, seed=0, **self.game_options)

    def action_probs(self, env: TextGameEnv, agent: str) -> dict[int, float]:
        return self._opponent.action_probs(env, agent)

    def player(self, seed: int) -> Opponent:
        return make_opponent(self.info.name, self.game, seed=seed, **self.game_options)

    def exploitability(self, samples_per_infoset: int, seed: int, bootstrap: int) -> ExploitabilityEstimate:
        return exact_estimate(self.game, self.action_probs, self.game_options)

    def sampler(self, seed: int) -> ActionSampler:
        return scripted_sampler(self.action_probs, seed)


class LLMPolicy(Policy):
    """An LLM playing in its run's reasoning format; exploitability is sampled through the rollout path."""

    def __init__(
        self,
        info: PolicyInfo,
        settings: RolloutSettings,
        encode: Encode,
        generate: Generate,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.info, self.settings = info, settings
        self.game, self.game_options = settings.game, dict(settings.game_options)
        self.encode, self.generate = encode, generate
        self._close = close

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Path, config: ExperimentConfig, backend: str = "hf", name: str | None = None,
        step: int | None = None, run_dir: Path | None = None, max_batch: int = 256,
    ) -> LLMPolicy:
        """The model in `checkpoint` on a `backend` engine, in the format of its run's `config` (its move decoded
        among the legal moves only where its run's was, `reasoning.constrain_action`)."""
        settings = rollout_settings(config)
        engine = build_engine(backend, checkpoint, engine_settings(config))
        info = PolicyInfo(
            name=name or checkpoint.name,
            kind="llm",
            checkpoint=str(checkpoint),
            step=step,
            run_dir=str(run_dir) if run_dir is not None else None,
            backend=backend,
            depth=settings.depth,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_tokens,
            format_penalty=settings.format_penalty,
        )
        policy = cls(info, settings, engine.encode_chat, chunked(engine.generate, max_batch), engine.close)
        policy.samples_per_infoset = config.eval.samples_per_infoset
        return policy

    def player(self, seed: int) -> LLMPlayer:
        return LLMPlayer(self.settings, self.encode, self.generate)

    def exploitability(self, samples_per_infoset: int, seed: int, bootstrap: int) -> ExploitabilityEstimate:
        return estimate_exploitability(
            self.game, self.sampler(seed), samples_per_infoset, seed=seed, bootstrap=bootstrap,
            options=self.game_options,
        )

    def sampler(self, seed: int) -> ActionSampler:
        runner = RolloutRunner(self.settings, self.encode, self.generate)
        return lambda located, n: runner.sample_actions(located, n, seed)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def chunked(generate: Generate, max_batch: int) -> Generate:
    """`generate` in batches of at most `max_batch` prompts; each chunk samples from its own seed."""

    def run(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if len(prompts) <= max_batch:
            return generate(prompts, params)
        out: list[Generation] = []
        for chunk, start in enumerate(range(0, len(prompts), max_batch)):
            seed = derive_seed(params.seed, chunk) if params.seed is not None else None
            out.extend(generate(prompts[start : start + max_batch], dataclasses.replace(params, seed=seed)))
        return out

    return run


# --- loading a policy from the command line ------------------------------------------------------


def load_policy(
    spec: str,
    game: str | None,
    game_options: dict[str, object] | None = None,
    backend: str = "hf",
    overrides: ReasoningOverrides | None = None,
) -> Policy:
    """A policy from a scripted name, a checkpoint directory, a run directory (its latest checkpoint) or a Hugging
    Face Hub name (`org/name[@revision]`, from the cache or downloaded).

    An LLM plays in its run's reasoning format (`config.yaml` next to `checkpoints/`) with `overrides` and
    `game_options` set over it; the run's game is used when `game` is None, and a different `game` is an error.
    A bare model directory exported by `strat export` plays in the format it carries (`strat.json` and the
    sampling of `generation_config.json`) in the same way; any other starts from the config's defaults.
    """
    hub_name = hub.parse(spec)
    path = hub.local_dir(spec, "--policy") if hub_name is not None else Path(spec).expanduser()
    if not path.is_dir():
        if path.exists() or "/" in spec or spec.startswith((".", "~")):
            what = "that path is a file, not a" if path.exists() else "no run or model directory exists at that path"
            raise ConfigError(f"--policy={spec!r}: {what}{' run or model directory' if path.exists() else ''} (a run"
                              " directory holds config.yaml and checkpoints/, a model directory config.json)")
        if game is None:
            raise ConfigError(
                f"--policy={spec!r}: a scripted policy needs --game (allowed: {', '.join(games.names())})"
            )
        _check_game(game)
        try:
            games.spec(game, **(game_options or {}))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"--game-option: {err}") from None
        allowed = opponent_names(game, **(game_options or {}))
        if spec not in allowed:
            raise ConfigError(
                f"--policy={spec!r}: not a checkpoint or run directory, nor a scripted policy for {game} "
                f"(scripted: {', '.join(allowed)})"
            )
        return ScriptedPolicy(spec, game, game_options)
    found = checkpoint_play_config(path, game, game_options, overrides or ReasoningOverrides())
    name = f"{hub_name.repo_id}@{found.checkpoint.name}" if hub_name is not None else found.name
    return LLMPolicy.from_checkpoint(found.checkpoint, found.config, backend=backend, name=name, step=found.step,
                                     run_dir=found.run_dir)


@dataclass(frozen=True)
class CheckpointPlay:
    """A model directory and how it plays: its run's config (or an exported model's, or the defaults) with the
    model pointed at it; `carries_format` says whether that reasoning format came with the model."""

    checkpoint: Path
    config: ExperimentConfig
    step: int | None
    run_dir: Path | None
    carries_format: bool

    @property
    def name(self) -> str:
        """`run@step` for a run's checkpoint, else the directory's name."""
        if self.run_dir is not None and self.step is not None:
            return f"{self.run_dir.name}@{self.step}"
        return self.checkpoint.name


def checkpoint_play_config(path: Path, game: str | None, game_options: dict[str, object] | None = None,
                           overrides: ReasoningOverrides | None = None, key: str = "--policy") -> CheckpointPlay:
    """A run, checkpoint or model directory resolved (`resolve_checkpoint`) with the config it plays in
    (`load_policy`'s rules); errors name `key`."""
    checkpoint, step, run_dir = resolve_checkpoint(path, key)
    exported = sidecar.read(checkpoint) if run_dir is None else None
    config = _run_config(checkpoint, run_dir, exported, game, game_options, overrides or ReasoningOverrides())
    if exported is not None and step is None:
        step = exported.step
    carries = exported is not None or (run_dir is not None and (run_dir / "config.yaml").is_file())
    return CheckpointPlay(checkpoint, config, step, run_dir, carries)


def resolve_checkpoint(path: Path, key: str = "--policy") -> tuple[Path, int | None, Path | None]:
    """(model directory, step, run directory) for a run directory, a checkpoint or a bare model directory. A checkpoint
    is verified against its manifest first: a damaged one is refused in one line (naming `key`)."""
    if (path / "checkpoints").is_dir() or ((path / "config.yaml").is_file() and not (path / "config.json").is_file()):
        latest = checkpoints.latest(path)
        if latest is None:
            raise ConfigError(f"{key}={str(path)!r}: the run directory has no complete checkpoint yet")
        checkpoints.require_verified(latest)
        return latest.path, latest.step, path
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{key}={str(path)!r}: not a run directory (config.yaml, checkpoints/) "
            "nor a model directory (config.json)"
        )
    step = None
    if path.name.startswith("step_") and path.name[len("step_") :].isdigit():
        if not (path / checkpoints.COMPLETE).is_file():
            raise ConfigError(
                f"{key}={str(path)!r}: the checkpoint is incomplete (no {checkpoints.COMPLETE} marker)"
            )
        step = int(path.name[len("step_") :])
        checkpoints.require_verified(checkpoints.Checkpoint(path, step))
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    return path, step, run_dir


def _run_config(
    checkpoint: Path,
    run_dir: Path | None,
    exported: sidecar.PlaySettings | None,
    game: str | None,
    game_options: dict[str, object] | None,
    overrides: ReasoningOverrides,
) -> ExperimentConfig:
    """The run's resolved config (for an exported model, the settings it carries; else the defaults) with the
    model pointed at `checkpoint`, the given game options merged over the run's, and `overrides` over its
    reasoning."""
    tree: dict = {}
    saved = run_dir / "config.yaml" if run_dir is not None else None
    if saved is not None and saved.is_file():
        tree = yaml.safe_load(saved.read_text()) or {}
    elif exported is not None:
        tree = exported.config_tree()
        tree["reasoning"].update(sidecar.generation_defaults(checkpoint))
        saved = checkpoint / sidecar.SIDECAR
    tree.setdefault("model", {})["path"] = str(checkpoint)
    game_tree = tree.setdefault("game", {})
    if game is not None:
        _check_game(game)
        trained = game_tree.get("name")
        if saved is not None and trained not in (None, game):
            raise ConfigError(
                f"--game={game!r}: the model was trained on {trained} ({saved}); evaluate it on {trained}"
            )
        game_tree["name"] = game
    if game_options:
        game_tree["options"] = {**(game_tree.get("options") or {}), **game_options}
    if saved is None and game_tree.get("name"):
        # A bare model (a Hub name, a model directory) carries no training settings; the default format penalty is
        # Kuhn poker's and would be refused for a game with larger losses: one below the game's worst legal return.
        try:
            worst = games.spec(game_tree["name"], **(game_tree.get("options") or {})).return_range[0]
        except (TypeError, ValueError):  # bad options: the config's validation names them below
            worst = None
        if worst is not None:
            tree.setdefault("algorithm", {}).setdefault("format_penalty", worst - 1.0)
    reasoning = tree.setdefault("reasoning", {})
    for key, value in dataclasses.asdict(overrides).items():
        if value is not None:
            reasoning[key] = value
    return from_dict(tree)


def _check_game(game: str) -> None:
    if game not in games.names():
        raise ConfigError(f"--game={game!r}: unknown game (allowed: {', '.join(games.names())})")


# --- playing games ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """One game to play: its deal, the policy (an index) in each seat, and the seats being evaluated."""

    episode_id: str
    label: str
    """The matchup, kept as the episode's group id (e.g. "ckpt vs random")."""
    deal_seed: int
    seats: tuple[int, ...]
    ego_seats: tuple[int, ...]


def play_tables(
    game: str, game_options: dict[str, object], policies: Sequence[Policy], tables: Sequence[Table], seed: int
) -> list[Episode]:
    """Play every table to the end through the rollout's game loop, each turn keeping what its agent saw.

    Each table has its own streams (a scripted policy's opponent, an LLM's fallback moves), seeded by `seed` and
    the table's deal and seating (not the policies' names), so a table's game never depends on the others; an LLM's samples depend on its batch, as in training.
    """
    in_flight = []
    for table in tables:
        # The table's streams are keyed by its deal and seating, not by its label: a policy's name (a run, an
        # exported copy of it) must not change its games.
        stream = f"{table.deal_seed}/{table.seats}/{table.ego_seats}"
        env = games.make(game, **game_options)
        env.reset(seed=table.deal_seed)
        agents = tuple(env.possible_agents)
        seated = dict(zip(agents, table.seats, strict=True))
        scripted = {}
        for index in sorted(set(table.seats)):
            player = policies[index].player(derive_seed(seed, stream, index, "opponent") % (2**31))
            if not isinstance(player, LLMPlayer):
                scripted.update({agent: player for agent, seat in seated.items() if seat == index})
        in_flight.append(
            LiveGame(
                env=env,
                game=game,
                episode_id=table.episode_id,
                group_id=table.label,
                seed=table.deal_seed,
                ego=tuple(agents[seat] for seat in table.ego_seats),
                players={agent: str(index) for agent, index in seated.items() if agent not in scripted},
                scripted=scripted,
                rng=random.Random(derive_seed(seed, stream, "fallback")),
            )
        )
    llms = {str(index): player for index, policy in enumerate(policies) if isinstance(player := policy.player(0), LLMPlayer)}
    return play_games(in_flight, llms, seed, observe=True)


def seat_rotations(
    label: str, policy: int, opponent: int, num_players: int, num_games: int, seed: int
) -> list[Table]:
    """Tables for `policy` against `opponent` in every other seat: each deal is played once with `policy` in
    each seat (so seat advantage cancels), `num_games` rounded up to whole rotations."""
    deals = -(-num_games // num_players)
    tables = []
    for deal in range(deals):
        deal_seed = derive_seed(seed, "deal", deal) % (2**31)
        for seat in range(num_players):
            seats = tuple(policy if s == seat else opponent for s in range(num_players))
            tables.append(Table(f"{label}/d{deal}s{seat}", label, deal_seed, seats, (seat,)))
    return tables


