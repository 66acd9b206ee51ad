"""Playing groups of games with the LLM policy: many games stepped at once, every pending
LLM decision of a round sent to the policy in one batch. `play_games` is the one game loop: evaluation
(`strat.eval`) plays its tables through it too. No Ray here: the rollout worker actor wraps this, and
tests drive it with an in-process engine."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import games
from games.base import TextGameEnv
from games.opponents import Opponent, make_opponent
from strat.algorithm.reasoning import build_messages, decide, misstates_private_info, parse_response, user_prompt
from strat.algorithm.records import Episode, Turn
from strat.algorithm.targets import SCRIPTED, Sampler, TargetEstimator, TargetSettings
from strat.config import OpponentConfig
from strat.engines.base import Generation, SamplingParams
from strat.play.exploiter import EXPLOITER, MoveTable, exploiter_opponent

Generate = Callable[[list[list[int]], SamplingParams], list[Generation]]
"""A policy: token-id prompts and sampling params in, one generation per prompt out."""
Encode = Callable[[list[dict[str, str]]], list[int]]
"""Chat messages to prompt token ids in the model's template."""
Spans = Callable[[Sequence[int], str], tuple[tuple[str, int, int], ...]]
"""A response's token ids and text to its section spans (`Turn.section_spans`), e.g. `TokenOffsets.spans`."""

OBSERVATION_DEPTH = 2
"""The prompt depth whose user message is a turn's recorded observation (it names the private information)."""
POLICY_SEAT = "policy:"
"""Prefix of a fixed policy's seats in `Episode.seats` and of its player's key in the game loop (`policy:<name>`)."""


LEAGUE_SEAT = "league"
"""The league opponent's seats in `Episode.seats` and its player's key in the game loop (it plays on the snapshot's
engine, loaded with the step's member)."""


def policy_seat(name: str) -> str:
    """The seat name of the job's policy `name` (a `{kind: policy, name: ...}` opponent)."""
    return f"{POLICY_SEAT}{name}"


def derive_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from (run seed, step, worker, ...): streams never depend on scheduling."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class SampledMoves:
    """What an LLM sampler returns: n moves per decision (fallbacks included) and whether each response named a legal
    action itself."""

    actions: list[list[int]]
    valid: list[list[bool]]


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
    opponents: tuple[OpponentConfig, ...] = (OpponentConfig(kind="self"),)
    """`game.opponents`: the config's own records, weighted."""
    seeded: bool = True
    """Per-request seeds for the games' responses (`run.deterministic_rollouts`); False samples without them."""
    targets: TargetSettings = field(default_factory=TargetSettings)
    """Which score targets a rollout estimates on the weights that played it (`comparison.*_target`)."""
    constrain_action: bool = False
    """`reasoning.constrain_action`: once a response opens `<action>`, only a legal move's name may follow."""
    ego_seat: int | None = None
    """`game.seats`: the first policy's seat in every group; None: it alternates by group and step."""


@dataclass(frozen=True)
class LLMPlayer:
    """An LLM in seats of a game: how its prompts are encoded and generated, and the settings (reasoning depth,
    sampling, format penalty rules) its responses are read with."""

    settings: RolloutSettings
    encode: Encode
    generate: Generate
    spans: Spans | None = None
    """Where each response's sections lie in its tokens (for credit by segment); None leaves them unknown."""


@dataclass
class LiveGame:
    """One game in flight and who plays each seat: an LLM player by key, or a scripted opponent."""

    env: TextGameEnv
    game: str
    episode_id: str
    group_id: str
    seed: int
    ego: tuple[str, ...]
    players: dict[str, str]
    """agent -> key of the LLM player in its seat; agents in `scripted` are absent."""
    scripted: dict[str, Opponent]
    """agent -> the scripted opponent in its seat (one object may hold several seats)."""
    rng: random.Random
    """The fallback moves' stream of this game: a game's moves never depend on which others are in flight."""
    turns: list[Turn] = field(default_factory=list)

    def play(self, turn: Turn) -> None:
        """Record `turn` and play its action, stepping past agents that are done."""
        self.turns.append(turn)
        self.env.step(turn.action)
        self.env.skip_finished()

    def episode(self) -> Episode:
        """The finished game as a record."""
        env, agents = self.env, tuple(self.env.possible_agents)
        return Episode(
            episode_id=self.episode_id,
            group_id=self.group_id,
            seed=self.seed,
            game=self.game,
            agents=agents,
            ego_agents=self.ego,
            turns=tuple(self.turns),
            returns={agent: float(value) for agent, value in env.returns().items()},
            private_info={agent: env.private_info(agent) for agent in agents},
            seats={agent: (f"{SCRIPTED}{self.scripted[agent].name}" if agent in self.scripted
                           else self.players.get(agent, "")) for agent in agents},
        )


@dataclass(frozen=True)
class GroupPlan:
    """The seed, opponent and ego seat of one group, fixed before any game is played."""

    group_id: str
    seed: int
    opponent: OpponentConfig
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
                ego_seat=(step + index) % num_players if settings.ego_seat is None else settings.ego_seat,
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
        spans: Spans | None = None,
        fixed: Mapping[str, LLMPlayer] | None = None,
    ) -> None:
        self.settings = settings
        self.encode = encode
        self.policy = policy
        self.snapshot = snapshot
        self.spans = spans
        self.fixed: dict[str, LLMPlayer] = dict(fixed or {})
        """The job's fixed policies by name (`{kind: policy, name: ...}` opponents), each with its own encoding,
        engine and reasoning format."""

    def players(self) -> dict[str, LLMPlayer]:
        """Every LLM player of the rollout by key: the trained policy, the snapshot (and the league, which plays on
        the snapshot's engine: its member of the step), each fixed policy's seat."""
        players = {"policy": LLMPlayer(self.settings, self.encode, self.policy, self.spans)}
        if self.snapshot is not None:
            past = LLMPlayer(self.settings, self.encode, self.snapshot, self.spans)
            players["snapshot"] = past
            if any(opponent.kind == "league" for opponent in self.settings.opponents):
                players[LEAGUE_SEAT] = past
        for name, player in self.fixed.items():
            players[policy_seat(name)] = player
        return players

    def run(self, plans: Sequence[GroupPlan], sampling_seed: int, exploited: MoveTable | None = None) -> list[Episode]:
        """Play `group_size` games per plan; every round batches all pending LLM decisions. With score targets
        asked for, they are estimated at the end, on the same weights (`strat.algorithm.targets`). An exploiter
        (`{kind: exploiter}`) plays the best response to `exploited`, the policy's moves as the driver has counted
        them (`strat.play.exploiter.Exploiter`); none given: to a uniform player."""
        answer = (exploiter_opponent(self.settings.game, self.settings.game_options, exploited or {})
                  if any(plan.opponent.kind == EXPLOITER for plan in plans) else None)
        players = self.players()
        exploiter = {EXPLOITER: answer} if answer is not None else {}
        episodes = play_games([game for plan in plans for game in self._start_group(plan, answer)], players,
                              sampling_seed)
        if not self.settings.targets.wanted:
            return episodes
        estimator = TargetEstimator(self.settings.targets, self.settings.game_options, self._samplers(players),
                                    scripted=exploiter)
        episodes, _ = estimator.estimate(episodes, derive_seed(sampling_seed, "targets"))
        return episodes

    def _samplers(self, players: Mapping[str, LLMPlayer]) -> dict[str, Sampler]:
        """One fresh move per location from each LLM seat (the fallback's move where the output has none)."""

        def sampler(player: LLMPlayer) -> Sampler:
            return lambda located, seed: [moves[0] for moves in self.sample_actions(located, 1, seed, player).actions]

        return {key: sampler(player) for key, player in players.items()}

    def sample_actions(self, located: Sequence[tuple[TextGameEnv, str]], n: int, seed: int,
                       player: LLMPlayer | None = None) -> SampledMoves:
        """`n` moves of the policy (or of `player`) at each (env, agent) in its reasoning format; invalid output
        counts as the fallback it triggers, and is marked invalid. One batched generation for all of them."""
        settings = self.settings if player is None else player.settings
        encode = self.encode if player is None else player.encode
        generate = self.policy if player is None else player.generate
        prompts = [encode(build_messages(env, agent, settings.depth)) for env, agent in located]
        params = SamplingParams(
            max_tokens=settings.max_tokens, temperature=settings.temperature, top_p=settings.top_p, seed=seed,
            actions=tuple(moves for moves in legal_moves(settings, located) for _ in range(n)),
        )
        generations = generate([prompt for prompt in prompts for _ in range(n)], params)
        rng = random.Random(derive_seed(seed, "fallback"))
        actions: list[list[int]] = []
        valid: list[list[bool]] = []
        for index, (env, agent) in enumerate(located):
            decisions = [decide(parse_response(generation.text, settings.depth), env, agent, rng,
                                settings.format_penalty) for generation in generations[index * n : (index + 1) * n]]
            actions.append([decision.action for decision in decisions])
            valid.append([decision.valid for decision in decisions])
        return SampledMoves(actions, valid)

    def _start_group(self, plan: GroupPlan, exploiter: Opponent | None = None) -> list[LiveGame]:
        settings = self.settings
        started = []
        for member in range(settings.group_size):
            env = games.make(settings.game, **settings.game_options)
            env.reset(seed=plan.seed)
            agents = tuple(env.possible_agents)
            ego_agent = agents[plan.ego_seat % len(agents)]
            ego = agents if plan.opponent.kind == "self" else (ego_agent,)
            scripted: dict[str, Opponent] = {}
            if plan.opponent.kind == "scripted":
                opponent = make_opponent(
                    plan.opponent.name or "random", settings.game,
                    seed=derive_seed(plan.seed, member, "opponent") % (2**31), **settings.game_options,
                )
                scripted = {agent: opponent for agent in agents if agent not in ego}
            elif plan.opponent.kind == EXPLOITER:
                if exploiter is None:
                    raise ValueError(f"{plan.group_id}: an exploiter opponent, and no best response to play")
                scripted = {agent: exploiter for agent in agents if agent not in ego}
            other = {"snapshot": "snapshot", "league": LEAGUE_SEAT,
                     "policy": policy_seat(plan.opponent.name or "")}.get(plan.opponent.kind, "policy")
            if other.startswith(POLICY_SEAT) and plan.opponent.name not in self.fixed:
                raise ValueError(f"{plan.group_id}: no fixed policy {plan.opponent.name!r} in this rollout"
                                 f" (fixed: {', '.join(self.fixed) or 'none'})")
            players = {agent: ("policy" if agent in ego else other) for agent in agents if agent not in scripted}
            started.append(
                LiveGame(
                    env=env,
                    game=settings.game,
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


def play_games(
    in_flight: Sequence[LiveGame], players: Mapping[str, LLMPlayer], sampling_seed: int, observe: bool = False
) -> list[Episode]:
    """Play every game to the end: the one game loop of training and evaluation. Scripted seats move at once; each
    round then sends every LLM player (in the order of `players`) all of its pending decisions in one batch.

    With `observe`, each turn keeps in `prompt_text` what its agent saw (the user message of a depth-2 prompt:
    observation with its private information, history, legal actions), for transcripts."""
    round_index = 0
    while True:
        pending: dict[str, list[LiveGame]] = {key: [] for key in players}
        for game in in_flight:
            _play_scripted(game, observe)
            if not game.env.finished():
                key = game.players[game.env.agent_selection]
                if key not in pending:
                    raise ValueError(f"{game.episode_id}: no LLM player {key!r} (players: {', '.join(players)})")
                pending[key].append(game)
        if not any(pending.values()):
            break
        for key, player in players.items():
            if pending[key]:
                batch = pending[key]
                for game, turn in zip(batch, llm_turns(player, batch, derive_seed(sampling_seed, round_index, key),
                                                       observe), strict=True):
                    game.play(turn)
        round_index += 1
    return [game.episode() for game in in_flight]


def llm_turns(player: LLMPlayer, batch: Sequence[LiveGame], seed: int, observe: bool = False) -> list[Turn]:
    """The LLM's turn at each game's agent to act, decided in one batched generation; nothing is played yet.

    A response with no legal action plays the fallback from the game's own stream and earns the format penalty;
    with the settings' rules, so does a legal move in a broken format or with misstated private information."""
    settings = player.settings
    located = [(game.env, game.env.agent_selection) for game in batch]
    prompts = [player.encode(build_messages(env, agent, settings.depth)) for env, agent in located]
    params = SamplingParams(max_tokens=settings.max_tokens, temperature=settings.temperature, top_p=settings.top_p,
                            seed=seed if settings.seeded else None, actions=legal_moves(settings, located))
    generations = player.generate(prompts, params)
    turns = []
    for game, (env, agent), prompt, generation in zip(batch, located, prompts, generations, strict=True):
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
        turns.append(
            Turn(
                episode_id=game.episode_id,
                agent=agent,
                turn_index=len(game.turns),
                action=decision.action,
                action_name=decision.action_name,
                choices=len(env.legal_actions(agent)),
                valid=decision.valid,
                fallback_used=decision.fallback_used,
                penalty=penalty,
                misstated=misstated,
                truncated=generation.finish_reason == "length",
                response=parsed,
                prompt_text=user_prompt(env, agent, OBSERVATION_DEPTH) if observe else "",
                response_text=generation.text,
                prompt_token_ids=tuple(prompt),
                response_token_ids=tuple(generation.token_ids),
                behaviour_logprobs=tuple(generation.logprobs),
                allowed_token_ids=generation.allowed_token_ids,
                info_state=env.info_state_string(agent),
                section_spans=None if player.spans is None else player.spans(generation.token_ids, generation.text),
            )
        )
    return turns


def legal_moves(settings: RolloutSettings, located: Sequence[tuple[TextGameEnv, str]]) -> tuple[tuple[str, ...], ...]:
    """Each prompt's legal moves by name when the move is constrained (`RolloutSettings.constrain_action`), else
    none."""
    if not settings.constrain_action:
        return ()
    return tuple(tuple(env.legal_action_names(agent)) for env, agent in located)


def llm_move(player: LLMPlayer, env: TextGameEnv, rng: random.Random, seed: int) -> Turn:
    """The LLM's turn at `env`'s agent to act in a game played outside the loop (`strat play`), read by the
    same rules as `llm_turns`, with fallbacks from `rng`; nothing is played yet."""
    game = LiveGame(env, player.settings.game, "", "", seed, ego=(), players={}, scripted={}, rng=rng)
    return llm_turns(player, [game], seed)[0]


def _play_scripted(game: LiveGame, observe: bool) -> None:
    env = game.env
    while not env.finished() and env.agent_selection in game.scripted:
        agent = env.agent_selection
        observation = user_prompt(env, agent, OBSERVATION_DEPTH) if observe else ""
        player = game.scripted[agent]
        probs = player.action_probs(env, agent)
        action = player.act(env, agent)
        game.play(
            Turn(
                episode_id=game.episode_id,
                agent=agent,
                turn_index=len(game.turns),
                action=action,
                action_name=env.action_name(action, agent),
                choices=len(env.legal_actions(agent)),
                certain=probs.get(action, 0.0) >= 1.0 - 1e-9,
                prompt_text=observation,
                info_state=env.info_state_string(agent),
            )
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
    """Returns, wins and draws of the policy against a scripted opponent, or one of the runner's fixed policies
    (`policy:<name>`), seats alternating."""
    kind, name = ("policy", opponent[len(POLICY_SEAT):]) if opponent.startswith(POLICY_SEAT) else ("scripted", opponent)
    settings = dataclasses.replace(runner.settings, group_size=1, opponents=(OpponentConfig(kind=kind, name=name),))
    spec = games.spec(settings.game, **settings.game_options)
    plans = [
        GroupPlan(group_id=f"eval-{index}", seed=derive_seed(seed, index, "deal") % (2**31),
                  opponent=settings.opponents[0], ego_seat=index % spec.num_players)
        for index in range(num_games)
    ]
    episodes = RolloutRunner(settings, runner.encode, runner.policy, fixed=runner.fixed).run(
        plans, derive_seed(seed, "sampling"))
    returns, wins, draws = [], [], []
    for episode in episodes:
        ego = episode.ego_agents[0]
        best_other = max(v for a, v in episode.returns.items() if a != ego)
        returns.append(episode.returns[ego])
        wins.append(episode.returns[ego] > best_other)
        draws.append(episode.returns[ego] == best_other)
    return VersusGames(returns, wins, draws if spec.zero_sum else None)
