"""Playing groups of games with the LLM policy: many games stepped at once, every pending
LLM decision of a round sent to the policy in one batch. No Ray here: the rollout worker
actor wraps this, and tests drive it with an in-process engine."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import games
from games.base import TextGameEnv
from games.opponents import Opponent, make_opponent
from strat.algorithm.reasoning import build_messages, decide, misstates_private_info, parse_response
from strat.algorithm.records import Episode, Turn
from strat.engines.base import Generation, SamplingParams

Generate = Callable[[list[list[int]], SamplingParams], list[Generation]]
"""A policy: token-id prompts and sampling params in, one generation per prompt out."""
Encode = Callable[[list[dict[str, str]]], list[int]]
"""Chat messages to prompt token ids in the model's template."""


def derive_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from (run seed, step, worker, ...): streams never depend on scheduling."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class OpponentChoice:
    """Who the learning policy plays in a group: itself, a scripted opponent, or a frozen snapshot."""

    kind: str
    """`self`, `scripted` or `snapshot`."""
    name: str | None = None
    weight: float = 1.0


@dataclass(frozen=True)
class RolloutSettings:
    """What a rollout needs from the experiment config."""

    game: str
    game_options: dict[str, object] = field(default_factory=dict)
    depth: int = 2
    format_penalty: float = -3.0
    penalize_malformed: bool = True
    """Also penalise responses whose action is legal but whose sections break the format."""
    penalize_misstated: bool = True
    """Also penalise responses that restate the player's own private information wrongly."""
    group_size: int = 8
    max_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    opponents: tuple[OpponentChoice, ...] = (OpponentChoice("self"),)


@dataclass
class _Game:
    """One game in flight and who plays each seat."""

    env: TextGameEnv
    episode_id: str
    group_id: str
    seed: int
    ego: tuple[str, ...]
    players: dict[str, str]
    """agent -> `policy`, `snapshot` or `scripted`."""
    scripted: Opponent | None
    rng: random.Random
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class GroupPlan:
    """The seed, opponent and ego seat of one group, fixed before any game is played."""

    group_id: str
    seed: int
    opponent: OpponentChoice
    ego_seat: int


def plan_groups(
    settings: RolloutSettings, run_seed: int, step: int, worker: int, num_groups: int, resample_round: int = 0
) -> list[GroupPlan]:
    """Choose each group's deal seed, opponent (weighted mixture) and ego seat, reproducibly.

    `resample_round` > 0 plans the extra groups that replace zero-spread ones: new ids and deal seeds."""
    if resample_round:
        return [
            dataclasses.replace(
                plan,
                group_id=f"s{step}-w{worker}-r{resample_round}-g{index}",
                seed=derive_seed(run_seed, step, worker, index, "resample", resample_round) % (2**31),
            )
            for index, plan in enumerate(plan_groups(settings, derive_seed(run_seed, "resample", resample_round),
                                                     step, worker, num_groups))
        ]
    rng = random.Random(derive_seed(run_seed, step, worker, "plan"))
    weights = [choice.weight for choice in settings.opponents]
    num_players = games.spec(settings.game, **settings.game_options).num_players
    plans = []
    for index in range(num_groups):
        opponent = rng.choices(settings.opponents, weights=weights)[0]
        plans.append(
            GroupPlan(
                group_id=f"s{step}-w{worker}-g{index}",
                seed=derive_seed(run_seed, step, worker, index, "deal") % (2**31),
                opponent=opponent,
                ego_seat=(step + index) % num_players,
            )
        )
    return plans


class RolloutRunner:
    """Plays planned groups to the end and returns finished episodes, groups kept together."""

    def __init__(
        self,
        settings: RolloutSettings,
        encode: Encode,
        policy: Generate,
        snapshot: Generate | None = None,
    ) -> None:
        self.settings = settings
        self.encode = encode
        self.policy = policy
        self.snapshot = snapshot

    def run(self, plans: Sequence[GroupPlan], sampling_seed: int) -> list[Episode]:
        """Play `group_size` games per plan; every round batches all pending LLM decisions."""
        in_flight = [game for plan in plans for game in self._start_group(plan)]
        round_index = 0
        while True:
            pending: dict[str, list[_Game]] = {"policy": [], "snapshot": []}
            for game in in_flight:
                self._play_scripted(game)
                if not game.env.finished():
                    pending[game.players[game.env.agent_selection]].append(game)
            if not pending["policy"] and not pending["snapshot"]:
                break
            for role, generate in (("policy", self.policy), ("snapshot", self.snapshot)):
                if pending[role]:
                    assert generate is not None, "a snapshot opponent was planned without a snapshot policy"
                    self._decide_batch(pending[role], generate, derive_seed(sampling_seed, round_index, role))
            round_index += 1
        return [self._episode(game) for game in in_flight]

    def sample_actions(self, located: Sequence[tuple[TextGameEnv, str]], n: int, seed: int) -> list[list[int]]:
        """`n` moves of the policy at each (env, agent) in its reasoning format; invalid output
        counts as the fallback it triggers. One batched generation for all of them."""
        settings = self.settings
        prompts = [self.encode(build_messages(env, agent, settings.depth)) for env, agent in located]
        params = SamplingParams(
            max_tokens=settings.max_tokens, temperature=settings.temperature, top_p=settings.top_p, seed=seed
        )
        generations = self.policy([prompt for prompt in prompts for _ in range(n)], params)
        rng = random.Random(derive_seed(seed, "fallback"))
        actions: list[list[int]] = []
        for index, (env, agent) in enumerate(located):
            drawn = []
            for generation in generations[index * n : (index + 1) * n]:
                parsed = parse_response(generation.text, settings.depth)
                drawn.append(decide(parsed, env, agent, rng, settings.format_penalty).action)
            actions.append(drawn)
        return actions

    def _start_group(self, plan: GroupPlan) -> list[_Game]:
        settings = self.settings
        started = []
        for member in range(settings.group_size):
            env = games.make(settings.game, **settings.game_options)
            env.reset(seed=plan.seed)
            agents = tuple(env.possible_agents)
            ego_agent = agents[plan.ego_seat % len(agents)]
            if plan.opponent.kind == "self":
                players = {agent: "policy" for agent in agents}
                ego = agents
            else:
                other = "snapshot" if plan.opponent.kind == "snapshot" else "scripted"
                players = {agent: ("policy" if agent == ego_agent else other) for agent in agents}
                ego = (ego_agent,)
            scripted = None
            if plan.opponent.kind == "scripted":
                scripted = make_opponent(
                    plan.opponent.name or "random", settings.game,
                    seed=derive_seed(plan.seed, member, "opponent") % (2**31), **settings.game_options,
                )
            started.append(
                _Game(
                    env=env,
                    episode_id=f"{plan.group_id}-e{member}",
                    group_id=plan.group_id,
                    seed=plan.seed,
                    ego=ego,
                    players=players,
                    scripted=scripted,
                    rng=random.Random(derive_seed(plan.seed, member, "fallback")),
                )
            )
        return started

    def _play_scripted(self, game: _Game) -> None:
        env = game.env
        while not game.env.finished() and game.players[env.agent_selection] == "scripted":
            agent = env.agent_selection
            action = game.scripted.act(env, agent)
            game.turns.append(
                Turn(
                    episode_id=game.episode_id,
                    agent=agent,
                    turn_index=len(game.turns),
                    action=action,
                    action_name=env.action_name(action, agent),
                )
            )
            env.step(action)
            env.skip_finished()

    def _decide_batch(self, batch: list[_Game], generate: Generate, seed: int) -> None:
        settings = self.settings
        prompts = []
        for game in batch:
            agent = game.env.agent_selection
            prompts.append(self.encode(build_messages(game.env, agent, settings.depth)))
        params = SamplingParams(
            max_tokens=settings.max_tokens, temperature=settings.temperature, top_p=settings.top_p, seed=seed
        )
        generations = generate(prompts, params)
        for game, prompt, generation in zip(batch, prompts, generations, strict=True):
            env, agent = game.env, game.env.agent_selection
            parsed = parse_response(generation.text, settings.depth)
            decision = decide(parsed, env, agent, game.rng, settings.format_penalty)
            penalty = decision.penalty
            if penalty is None and settings.penalize_malformed and not parsed.format_valid:
                # A legal move in a broken format still plays, but must not pay: otherwise the
                # reasoning sections decay once they stop mattering to the return.
                penalty = settings.format_penalty
            misstated = misstates_private_info(generation.text, env.private_info(agent))
            if penalty is None and settings.penalize_misstated and misstated:
                penalty = settings.format_penalty
            game.turns.append(
                Turn(
                    episode_id=game.episode_id,
                    agent=agent,
                    turn_index=len(game.turns),
                    action=decision.action,
                    action_name=decision.action_name,
                    valid=decision.valid,
                    fallback_used=decision.fallback_used,
                    penalty=penalty,
                    misstated=misstated,
                    response=parsed,
                    response_text=generation.text,
                    prompt_token_ids=tuple(prompt),
                    response_token_ids=tuple(generation.token_ids),
                    behaviour_logprobs=tuple(generation.logprobs),
                )
            )
            env.step(decision.action)
            env.skip_finished()

    def _episode(self, game: _Game) -> Episode:
        env = game.env
        agents = tuple(env.possible_agents)
        return Episode(
            episode_id=game.episode_id,
            group_id=game.group_id,
            seed=game.seed,
            game=self.settings.game,
            agents=agents,
            ego_agents=game.ego,
            turns=tuple(game.turns),
            returns={agent: float(value) for agent, value in env.returns().items()},
            private_info={agent: env.private_info(agent) for agent in agents},
        )


@dataclass(frozen=True)
class VersusGames:
    """The policy's games against one scripted opponent, one entry per game, in order."""

    returns: list[float]
    """The policy's game returns (not format penalties)."""
    wins: list[bool]
    """Whether the policy's return beat every other player's."""
    draws: list[bool] | None
    """Whether it tied the best other return (tic-tac-toe's full board, a split pot); None in a general-sum game
    (bargaining), where equal returns are no draw."""


def evaluate_vs(runner: RolloutRunner, opponent: str, num_games: int, seed: int) -> VersusGames:
    """Returns, wins and draws of the policy against a scripted opponent, seats alternating."""
    settings = dataclasses.replace(runner.settings, group_size=1, opponents=(OpponentChoice("scripted", opponent),))
    spec = games.spec(settings.game, **settings.game_options)
    plans = [
        GroupPlan(group_id=f"eval-{index}", seed=derive_seed(seed, index, "deal") % (2**31),
                  opponent=settings.opponents[0], ego_seat=index % spec.num_players)
        for index in range(num_games)
    ]
    episodes = RolloutRunner(settings, runner.encode, runner.policy).run(plans, derive_seed(seed, "sampling"))
    returns, wins, draws = [], [], []
    for episode in episodes:
        ego = episode.ego_agents[0]
        best_other = max(v for a, v in episode.returns.items() if a != ego)
        returns.append(episode.returns[ego])
        wins.append(episode.returns[ego] > best_other)
        draws.append(episode.returns[ego] == best_other)
    return VersusGames(returns, wins, draws if spec.zero_sum else None)
