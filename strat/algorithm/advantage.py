"""Group-relative advantages: the outcome term, the process term from CoT scores, per-role statistics, combined by
the registered estimator `strat.algorithm.estimators` names (hybrid by default)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from strat.algorithm.baselines import history_key, history_outcome_terms, normalise, others_private_info
from strat.algorithm.estimators import advantage_estimator
from strat.algorithm.records import Episode, ScoredEpisode, TrainSample, Turn, TurnScore
from strat.algorithm.segments import BELIEF_SPAN

Baseline = Literal["group", "ema", "history"]
PenaltyScope = Literal["game", "turn"]
Credit = Literal["response", "segment"]
ProcessBaseline = Literal["group", "state"]
OutcomeScale = Literal["std", "none"]

SCORED_SECTIONS: dict[str, str] = {"predict": "predict", "belief": BELIEF_SPAN, "agreement": "their_view"}
"""Credit by segment: each comparison component (a `TurnScore` field) and the span of the section it scores."""
OUTCOME_SECTIONS: tuple[str, ...] = ("plan", "action")
"""Credit by segment: the sections whose tokens get the outcome term alone."""


@dataclass(frozen=True)
class AdvantageConfig:
    """How advantages are formed; maps onto `algorithm.*` in the experiment config."""

    mode: str = "hybrid"
    """The registered advantage estimator: `hybrid`, `outcome` (hybrid with lam = 0), `process` (the process term
    alone, unscaled), or one registered with `register_advantage`."""
    lam: float = 0.5
    """Weight of the process term in hybrid mode."""
    baseline: Baseline = "group"
    """`group`: normalise returns within the group; `ema`: subtract a per-(game, role) running mean (SPIRAL);
    `history`: a turn's return minus the mean return of its statistics group's turns at the same history (the same
    deal and the same moves so far), over the group's spread (`history_outcome_terms`): each move is compared with
    the other moves made where it was made, not with games that went elsewhere before it."""
    outcome_scale: OutcomeScale = "std"
    """`std`: the outcome term (under the `group` and `history` baselines) is divided by its statistics group's
    spread of returns (GRPO); `none`: it is not (the returns less their baseline, as Dr. GRPO has it). The std weighs
    each deal by how predictable its returns are, so a move that pays on average can get a negative expected
    update: facing a bet, a call loses a little more in the deals whose returns hardly vary (the bettor holds the
    King) and wins a lot in those whose returns vary (a bluff), and the first are scaled up."""
    ema_decay: float = 0.95
    eps: float = 1e-6
    per_role: bool = True
    """Separate statistics per seat, so that both self-play seats learn from their own perspective."""
    drop_zero_signal: bool = False
    """Leave out groups whose advantages are all zero (they give no gradient)."""
    penalty_scope: PenaltyScope = "game"
    """`game`: a format penalty replaces the return of the whole game for every turn of the seat that earned it
    (`Episode.outcome`), and the outcome term is normalised over the group's episodes; `turn`: it replaces the
    return of the turn that earned it alone, the seat's other turns keep the game's return
    (`Episode.turn_outcomes`), and the outcome term is normalised over the group's turns."""
    credit: Credit = "response"
    """`response`: every token of a turn's response gets the turn's advantage; `segment`: each scored section's
    tokens get their own component's process term, `<plan>` and `<action>` the outcome term alone
    (`segment_advantages`)."""
    component_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """The comparison's weights of the prediction, belief and agreement scores (`comparison.weights`): with credit by
    segment, each section's process term is scaled by its component's weight."""
    process_baseline: ProcessBaseline = "group"
    """What a turn's process score is compared with: `group`, the comparable turns of its statistics group (group,
    seat), whatever their positions; `state`, the step's comparable turns of the same seat in the same position as
    the central comparator sees it (the acting agent's `Turn.info_state` and the other agents' private information),
    so that a response is paid for reasoning better than the others in its position, not for reaching a position
    where the other agents are easy to read, nor for the deal (`state_process_terms`)."""

    def __post_init__(self) -> None:
        if self.credit not in ("response", "segment"):
            raise ValueError(f"unknown credit {self.credit!r} (allowed: response, segment)")
        if self.baseline not in ("group", "ema", "history"):
            raise ValueError(f"unknown baseline {self.baseline!r} (allowed: group, ema, history)")
        if self.process_baseline not in ("group", "state"):
            raise ValueError(f"unknown process_baseline {self.process_baseline!r} (allowed: group, state)")
        if self.outcome_scale not in ("std", "none"):
            raise ValueError(f"unknown outcome_scale {self.outcome_scale!r} (allowed: std, none)")


@dataclass(frozen=True)
class AdvantageStats:
    """Diagnostics of one advantage computation; a statistics group is (group, role) with per-role normalisation."""

    groups: int
    singleton_groups: int
    """Groups of one episode: no spread to normalise by, outcome term 0."""
    zero_spread_groups: int
    """Groups (size > 1) whose outcome returns are all equal."""
    zero_process_spread_groups: int
    """Groups with at least one comparable turn whose process scores are all equal."""
    zero_signal_groups: int
    """Groups whose advantages are all zero."""
    dropped_groups: int
    turns: int
    comparable_turns: int
    process_outcome_corr: float | None = None
    """Pearson's correlation of the outcome and the process term over the comparable turns of every group (None
    with fewer than two, or no spread): near 1 the process term repeats the outcome, near 0 it adds a signal of its
    own, below 0 it pulls against it."""
    segment_tokens_frac: float | None = None
    """Credit by segment: the share of the response tokens of turns with known spans that lie in a scored section
    (belief line, `<predict>`, `<their_view>`); None under response credit or with no such token."""
    unspanned_turns: int = 0
    """Credit by segment: turns whose section spans are unknown, which get the response's advantage on every token."""
    history_alone_turns: int | None = None
    """`baseline: history`: turns alone at their history in their statistics group, which keep the group's outcome
    term (None under the other baselines)."""


def zero_spread_group_ids(episodes: Sequence[Episode], penalty_scope: PenaltyScope = "game") -> list[str]:
    """Groups (of more than one episode) in which every learning seat got the same outcome in every episode (with
    `penalty_scope` `turn`: on every turn), in order of first appearance: their outcome term is zero, so they teach
    nothing about the moves."""
    outcomes: dict[str, dict[str, set[float]]] = {}
    sizes: dict[str, int] = {}
    for episode in episodes:
        sizes[episode.group_id] = sizes.get(episode.group_id, 0) + 1
        seats = outcomes.setdefault(episode.group_id, {})
        for agent in episode.ego_agents:
            seats.setdefault(agent, set()).update(_seat_returns(episode, agent, penalty_scope))
    return [
        group for group, seats in outcomes.items()
        if sizes[group] > 1 and all(len(values) == 1 for values in seats.values())
    ]


def _seat_returns(episode: Episode, agent: str, penalty_scope: PenaltyScope) -> tuple[float, ...]:
    """What `agent`'s side of `episode` learns from: its outcome (`game`) or its turns' outcomes (`turn`)."""
    return episode.turn_outcomes(agent) if penalty_scope == "turn" else (episode.outcome(agent),)


def replace_zero_spread_groups(
    episodes: Sequence[Episode], fresh: Sequence[Episode], penalty_scope: PenaltyScope = "game"
) -> tuple[list[Episode], int]:
    """`episodes` with zero-spread groups replaced, in order, by the groups of `fresh` that have spread; each
    replacement takes the place of the group it replaces. Returns the episodes and the number replaced."""
    flat = zero_spread_group_ids(episodes, penalty_scope)
    flat_fresh = set(zero_spread_group_ids(fresh, penalty_scope))
    useful: dict[str, list[Episode]] = {}
    for episode in fresh:
        if episode.group_id not in flat_fresh:
            useful.setdefault(episode.group_id, []).append(episode)
    swaps = dict(zip(flat, useful.values(), strict=False))
    placed: set[str] = set()
    out: list[Episode] = []
    for episode in episodes:
        if episode.group_id not in swaps:
            out.append(episode)
        elif episode.group_id not in placed:
            out.extend(swaps[episode.group_id])
            placed.add(episode.group_id)
    return out, len(swaps)


def group_advantages(
    returns: torch.Tensor,
    turn_episode: torch.Tensor,
    scores: torch.Tensor,
    comparable: torch.Tensor,
    mode: str,
    lam: float,
    eps: float,
    baseline: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-turn advantages of one statistics group: the `mode` estimator over `advantage_terms`."""
    outcome, process = advantage_terms(returns, turn_episode, scores, comparable, eps, baseline)
    return advantage_estimator(mode)(outcome, process, lam)


def advantage_terms(
    returns: torch.Tensor,
    turn_episode: torch.Tensor,
    scores: torch.Tensor,
    comparable: torch.Tensor,
    eps: float,
    baseline: torch.Tensor | None = None,
    scale: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The outcome and process terms [N] of one statistics group's ego turns.

    `returns` [G] per episode; `turn_episode` [N] the episode index of each ego turn; `scores`, `comparable` [N].
    The outcome term is `returns - baseline` ([G]) when a baseline is given, else group-normalised (centred alone
    without `scale`). Process statistics are over the comparable turns only; a turn with nothing to compare gets
    process term 0.
    """
    outcome = (returns - baseline if baseline is not None else normalise(returns, eps, scale))[turn_episode]
    process = torch.zeros_like(scores)
    process[comparable] = normalise(scores[comparable], eps)
    return outcome, process


TurnKey = tuple[str, str, int]
"""A turn of a step: (episode id, agent, turn index)."""
WHOLE = "score"
"""`state_process_terms`' key of the whole process score (beside the components of `SCORED_SECTIONS`)."""


def state_process_terms(
    episodes: Sequence[ScoredEpisode], per_role: bool, eps: float
) -> dict[str, dict[TurnKey, float]]:
    """The process terms with the state baseline (`process_baseline: state`), for every comparable ego turn of the
    step: the whole score (key `WHOLE`) and each component of `SCORED_SECTIONS` the turn was scored on, each
    normalised (`normalise`) over the step's turns that have it in the same game, seat (with `per_role`) and position:
    the acting agent's information state and the other agents' private information (`Episode.private_info`), the
    state the central comparator scores against. A turn whose information state is unknown ("") is compared with its
    statistics group's such turns instead; a turn alone in its position gets 0."""
    buckets: dict[str, dict[tuple[str, ...], list[tuple[TurnKey, float]]]] = {WHOLE: {}}
    buckets.update({component: {} for component in SCORED_SECTIONS})
    for scored in episodes:
        episode = scored.episode
        for agent in episode.ego_agents:
            role = agent if per_role else ""
            for turn in episode.turns_of(agent):
                score = scored.score_of(turn.turn_index)
                if score is None or not score.comparable:
                    continue
                others = others_private_info(episode, agent)
                where = ("state", episode.game, role, turn.info_state, others) if turn.info_state else \
                    ("group", episode.group_id, role)
                key = (episode.episode_id, agent, turn.turn_index)
                buckets[WHOLE].setdefault(where, []).append((key, score.score))
                for component in SCORED_SECTIONS:
                    value = getattr(score, component)
                    if value is not None:
                        buckets[component].setdefault(where, []).append((key, float(value)))
    terms: dict[str, dict[TurnKey, float]] = {}
    for name, by_place in buckets.items():
        terms[name] = {}
        for members in by_place.values():
            values = normalise(torch.tensor([value for _, value in members], dtype=torch.float64), eps)
            terms[name].update(zip((key for key, _ in members), values.tolist(), strict=True))
    return terms


def segment_advantages(
    turns: Sequence[Turn],
    turn_scores: Sequence[TurnScore | None],
    outcome: torch.Tensor,
    comparable: torch.Tensor,
    mode: str,
    lam: float,
    eps: float,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
    given_terms: dict[str, torch.Tensor] | None = None,
) -> list[list[float] | None]:
    """Per-token advantages of one statistics group's ego turns under credit by segment (`algorithm.credit:
    segment`); None for a turn whose section spans are unknown (it keeps the response's advantage).

    Each component (prediction, belief, agreement) is normalised (`normalise`) over the group's comparable turns
    that have it, 0 elsewhere, and scaled by its weight in `weights` (predict, belief, agreement): the process term of
    its section. Each token gets the `mode` estimator of its turn's outcome term `outcome` [N] and its own process
    term (hybrid: outcome + lam * term):
    - the belief line, `<predict>` and `<their_view>`: their component's term (0 where the turn has no score of it);
    - `<plan>` and `<action>`: 0, the outcome term alone, so a reasoning score never moves the move's tokens;
    - every other token (tags, `<think>`, the rest of `<past>`, whitespace, text outside any tag): the sum of the
      terms of the components the turn was scored on whose section the response lacks (a missing `<predict>` scores
      0, and its term lands where the section should have been written), else 0: the outcome term alone.
    A token that lies in two spans takes the later span's value (the belief line over the rest of `<past>`).
    With `outcome` (or lam = 0) every token gets the outcome term, as under response credit; with `process` the
    scored sections get their terms and every other token 0 (nothing learns from the outcome). `given_terms` ([N] per
    component, before its weight) replaces the group normalisation (the state baseline, `state_process_terms`).
    """
    estimator = advantage_estimator(mode)
    zero = torch.zeros_like(outcome)
    flags = comparable.tolist()
    terms: dict[str, torch.Tensor] = {}
    scored: dict[str, list[bool]] = {}
    for component, weight in zip(SCORED_SECTIONS, weights, strict=True):
        values = [None if score is None else getattr(score, component) for score in turn_scores]
        mask = [bool(flag) and value is not None for flag, value in zip(flags, values, strict=True)]
        raw = torch.tensor([0.0 if value is None else float(value) for value in values], dtype=torch.float64)
        chosen = torch.tensor(mask, dtype=torch.bool)
        if given_terms is not None:
            term = torch.where(chosen, given_terms[component], torch.zeros_like(raw))
        else:
            term = torch.zeros_like(raw)
            term[chosen] = normalise(raw[chosen], eps)
        terms[component], scored[component] = weight * term, mask
    missing = zero.clone()
    for row, turn in enumerate(turns):
        held = {name for name, _, _ in turn.section_spans or ()}
        for component, section in SCORED_SECTIONS.items():
            if scored[component][row] and section not in held:
                missing[row] += terms[component][row]
    by_section = {section: estimator(outcome, terms[component], lam).tolist()
                  for component, section in SCORED_SECTIONS.items()}
    plain = estimator(outcome, zero, lam).tolist()
    rest = estimator(outcome, missing, lam).tolist()
    out: list[list[float] | None] = []
    for row, turn in enumerate(turns):
        if turn.section_spans is None:
            out.append(None)
            continue
        values = [rest[row]] * len(turn.response_token_ids)
        for name, start, end in turn.section_spans:
            if name in OUTCOME_SECTIONS:
                value = plain[row]
            elif name in by_section:
                value = by_section[name][row]
            else:
                continue
            values[start:end] = [value] * len(values[start:end])
        out.append(values)
    return out


def _scored_tokens(turn: Turn) -> int:
    """How many of `turn`'s response tokens lie in a scored section's span."""
    sections = set(SCORED_SECTIONS.values())
    limit = len(turn.response_token_ids)
    return len({index for name, start, end in turn.section_spans or () if name in sections
                for index in range(start, min(end, limit))})


def correlation(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's correlation of paired values; None with fewer than two pairs or no spread in either."""
    if len(x) < 2:
        return None
    a, b = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    a, b = a - a.mean(), b - b.mean()
    scale = float(torch.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum()) / scale if scale > 0 else None


class RoleBaseline:
    """SPIRAL-style running-mean baseline per (game, role); the first batch initialises it."""

    def __init__(self, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay {decay} is outside [0, 1)")
        self.decay = decay
        self._values: dict[tuple[str, str], float] = {}

    def value(self, game: str, role: str) -> float | None:
        """The current baseline, None before the first update."""
        return self._values.get((game, role))

    def update(self, game: str, role: str, mean_return: float) -> None:
        """Move the baseline toward this batch's mean return."""
        previous = self._values.get((game, role))
        self._values[(game, role)] = (
            mean_return if previous is None else self.decay * previous + (1.0 - self.decay) * mean_return
        )

    def state_dict(self) -> dict[str, float]:
        """Checkpointable state, keyed `game/role`."""
        return {f"{game}/{role}": value for (game, role), value in self._values.items()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore from `state_dict()`."""
        self._values = {tuple(key.split("/", 1)): value for key, value in state.items()}  # type: ignore[misc]


def compute_advantages(
    episodes: Sequence[ScoredEpisode],
    config: AdvantageConfig,
    baseline: RoleBaseline | None = None,
) -> tuple[list[TrainSample], AdvantageStats]:
    """Advantages for every ego turn of `episodes`, as training samples, with diagnostics.

    Episodes sharing a `group_id` form a group; with `per_role` each ego seat of the group is a separate
    statistics group. `baseline` is required for `config.baseline == "ema"` and is updated in place afterwards.
    """
    if config.baseline == "ema" and baseline is None:
        raise ValueError("baseline='ema' needs a RoleBaseline")
    ema = baseline if config.baseline == "ema" else None
    buckets: dict[tuple[str, str], list[tuple[ScoredEpisode, str]]] = {}
    role_returns: dict[tuple[str, str], list[float]] = {}
    for scored in episodes:
        episode = scored.episode
        for agent in episode.ego_agents:
            buckets.setdefault((episode.group_id, agent if config.per_role else ""), []).append((scored, agent))
            role_returns.setdefault((episode.game, agent), []).extend(
                _seat_returns(episode, agent, config.penalty_scope)
            )
    role_means = {key: sum(values) / len(values) for key, values in role_returns.items()}
    if ema is not None:
        for (game, role), mean in role_means.items():
            if ema.value(game, role) is None:
                ema.update(game, role, mean)

    by_state = state_process_terms(episodes, config.per_role, config.eps) if config.process_baseline == "state" \
        else None
    samples: list[TrainSample] = []
    singleton = zero_spread = zero_process = zero_signal_groups = dropped = total_turns = comparable_turns = 0
    spanned_tokens = scored_tokens = unspanned = alone = 0
    outcome_terms: list[float] = []
    process_terms: list[float] = []
    for members in buckets.values():
        turns = [
            (index, scored, turn)
            for index, (scored, agent) in enumerate(members)
            for turn in scored.episode.turns_of(agent)
        ]
        turn_scores = [scored.score_of(turn.turn_index) for _, scored, turn in turns]
        turn_episode = torch.tensor([index for index, _, _ in turns], dtype=torch.long)
        # One return per member (`game`), or per turn (`turn`: the penalty on the turn that earned it).
        returns = torch.tensor(
            [value for scored, agent in members
             for value in _seat_returns(scored.episode, agent, config.penalty_scope)],
            dtype=torch.float64,
        )
        scores = torch.tensor([s.score if s is not None else 0.0 for s in turn_scores], dtype=torch.float64)
        comparable = torch.tensor([s is not None and s.comparable for s in turn_scores], dtype=torch.bool)
        member_baseline = None
        if ema is not None:
            member_baseline = torch.tensor(
                [ema.value(scored.episode.game, agent) for scored, agent in members], dtype=torch.float64
            )
        if config.penalty_scope == "turn":
            member_baseline = None if member_baseline is None else member_baseline[turn_episode]
            turn_episode = torch.arange(len(turns))
        outcome, process = advantage_terms(
            returns,
            turn_episode,
            scores,
            comparable,
            config.eps,
            member_baseline,
            config.outcome_scale == "std",
        )
        if config.baseline == "history":
            histories = [history_key(scored.episode, turn) for _, scored, turn in turns]
            outcome = history_outcome_terms(returns, turn_episode, histories, config.eps, config.outcome_scale == "std")
            counts = Counter(history for history in histories if history is not None)
            alone += sum(1 for history in histories if history is not None and counts[history] == 1)
        given: dict[str, torch.Tensor] | None = None
        if by_state is not None:
            keys = [(scored.episode.episode_id, turn.agent, turn.turn_index) for _, scored, turn in turns]
            given = {name: torch.tensor([values.get(key, 0.0) for key in keys], dtype=torch.float64)
                     for name, values in by_state.items()}
            process = given.pop(WHOLE)
        advantages = advantage_estimator(config.mode)(outcome, process, config.lam)
        per_token: list[list[float] | None] = [None] * len(turns)
        if config.credit == "segment":
            per_token = segment_advantages([turn for _, _, turn in turns], turn_scores, outcome, comparable,
                                           config.mode, config.lam, config.eps, config.component_weights, given)
            for _, _, turn in turns:
                if turn.section_spans is None:
                    unspanned += 1
                else:
                    spanned_tokens += len(turn.response_token_ids)
                    scored_tokens += _scored_tokens(turn)
        outcome_terms.extend(outcome[comparable].tolist())
        process_terms.extend(process[comparable].tolist())
        singleton += int(len(members) == 1)
        zero_spread += int(len(members) > 1 and returns.numel() > 0 and bool(torch.all(returns == returns[0])))
        zero_process += int(bool(comparable.any()) and bool(torch.all(scores[comparable] == scores[comparable][0])))
        total_turns += len(turns)
        comparable_turns += int(comparable.sum())
        if bool(torch.all(advantages == 0)) and all(v == 0 for values in per_token for v in values or ()):
            zero_signal_groups += 1
            if config.drop_zero_signal:
                dropped += 1
                continue
        samples.extend(
            TrainSample(
                group_id=scored.episode.group_id,
                episode_id=scored.episode.episode_id,
                agent=turn.agent,
                turn_index=turn.turn_index,
                prompt_token_ids=turn.prompt_token_ids,
                response_token_ids=turn.response_token_ids,
                behaviour_logprobs=turn.behaviour_logprobs,
                advantage=float(advantage),
                token_advantages=_token_advantages(values, float(advantage)),
                allowed_token_ids=turn.allowed_token_ids,
            )
            for (_, scored, turn), advantage, values in zip(turns, advantages, per_token, strict=True)
        )
    if ema is not None:
        for (game, role), mean in role_means.items():
            ema.update(game, role, mean)
    stats = AdvantageStats(
        groups=len(buckets),
        singleton_groups=singleton,
        zero_spread_groups=zero_spread,
        zero_process_spread_groups=zero_process,
        zero_signal_groups=zero_signal_groups,
        dropped_groups=dropped,
        turns=total_turns,
        comparable_turns=comparable_turns,
        process_outcome_corr=correlation(outcome_terms, process_terms),
        segment_tokens_frac=scored_tokens / spanned_tokens if spanned_tokens else None,
        unspanned_turns=unspanned,
        history_alone_turns=alone if config.baseline == "history" else None,
    )
    return samples, stats


def _token_advantages(values: list[float] | None, advantage: float) -> tuple[float, ...]:
    """A sample's per-token advantages: empty where every token would have `advantage` anyway (response credit,
    unknown spans, or a turn whose tokens all get the outcome term alone as the response does)."""
    if values is None or all(value == advantage for value in values):
        return ()
    return tuple(values)
