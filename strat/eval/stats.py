"""Statistics of played games: return and rate intervals, format validity, reasoning scores, the payoff
matrix of a head-to-head and Elo ratings. Pure logic over episodes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strat.algorithm.records import Episode, ScoredEpisode, Turn

Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its normal 95% interval."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return float("nan"), float("nan")
    half = Z95 * array.std(ddof=1) / np.sqrt(array.size) if array.size > 1 else float("inf")
    return float(array.mean()), float(half)


def wilson_interval(successes: float, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate; honest near 0 and 1, where the normal one collapses."""
    if trials <= 0:
        return float("nan"), float("nan")
    rate = successes / trials
    denominator = 1 + Z95**2 / trials
    centre = (rate + Z95**2 / (2 * trials)) / denominator
    half = Z95 * math.sqrt(rate * (1 - rate) / trials + Z95**2 / (4 * trials**2)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Estimate:
    """A mean or a rate with its 95% interval, from `n` observations."""

    value: float
    low: float
    high: float
    n: int


def mean_estimate(values: Sequence[float]) -> Estimate:
    """The mean of `values` with its normal 95% interval."""
    mean, half = mean_interval(values)
    return Estimate(mean, mean - half, mean + half, len(values))


def rate_estimate(successes: float, trials: int) -> Estimate:
    """A rate with its Wilson 95% interval."""
    low, high = wilson_interval(successes, trials)
    return Estimate(successes / trials if trials else float("nan"), low, high, trials)


ELO_SCALE = 400 / math.log(10)
"""Elo points per unit of log-odds."""
ELO_MEAN = 1500.0


def elo_ratings(scores: np.ndarray, games_played: np.ndarray, prior_draws: float = 1.0) -> np.ndarray:
    """Bradley-Terry ratings on the Elo scale (mean 1500) from `scores[i, j]` (wins of i over j plus half its
    draws) in `games_played[i, j]` games. `prior_draws` virtual draws per played pair keep an unbeaten
    policy's rating finite."""
    played = games_played > 0
    won = np.where(played, scores + prior_draws / 2, 0.0)
    total = np.where(played, games_played + prior_draws, 0.0)
    strength = np.zeros(len(scores))
    # Minorise-maximise updates (Hunter 2004): each one raises the likelihood; a few hundred converge.
    for _ in range(500):
        gamma = np.exp(strength)
        denominator = (total / (gamma[:, None] + gamma[None, :])).sum(axis=1)
        updated = np.log(np.maximum(won.sum(axis=1), 1e-12) / np.maximum(denominator, 1e-12))
        updated -= updated.mean()
        if np.abs(updated - strength).max() < 1e-10:
            strength = updated
            break
        strength = updated
    return ELO_MEAN + ELO_SCALE * strength


def elo_with_intervals(
    outcomes: np.ndarray, seed: int = 0, bootstrap: int = 200, prior_draws: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elo ratings and their 95% bootstrap bounds from `outcomes[i, j] = (wins, draws, losses)` of i against j.

    Replicates redraw each pair's games from its win/draw/loss frequencies with the prior's virtual draw
    added, so that a pair with only wins still varies."""
    outcomes = np.asarray(outcomes, dtype=np.float64)
    games_played = outcomes.sum(axis=2)
    ratings = elo_ratings(outcomes[..., 0] + outcomes[..., 1] / 2, games_played, prior_draws)
    rng = np.random.default_rng(seed)
    replicates = []
    pairs = [(i, j) for i in range(len(outcomes)) for j in range(i + 1, len(outcomes)) if games_played[i, j] > 0]
    for _ in range(bootstrap):
        scores = np.zeros_like(games_played)
        for i, j in pairs:
            smoothed = outcomes[i, j] + (0.0, prior_draws, 0.0)
            wins, draws, losses = rng.multinomial(int(games_played[i, j]), smoothed / smoothed.sum())
            scores[i, j], scores[j, i] = wins + draws / 2, losses + draws / 2
        replicates.append(elo_ratings(scores, games_played, prior_draws))
    if not replicates:
        return ratings, ratings.copy(), ratings.copy()
    low, high = np.percentile(np.array(replicates), [2.5, 97.5], axis=0)
    return ratings, low, high


# --- results of played games ----------------------------------------------------------------------


@dataclass(frozen=True)
class MatchResult:
    """How the evaluated policy did against one opponent, over both (all) seats."""

    opponent: str
    games: int
    mean_return: Estimate
    """Game return (fallback moves included); the interval is over deals, each deal's seats averaged."""
    win: Estimate
    draw: Estimate
    loss: Estimate
    seat_returns: tuple[Estimate, ...]
    """Mean return with the policy in seat 0, 1, ..."""


@dataclass(frozen=True)
class CotResult:
    """The centralized comparator's scores of the policy's reasoning against the true opponent and state."""

    predict: Estimate | None
    """`<predict>` named the opponent's actual next action."""
    belief: Estimate | None
    """`<past>`'s belief named the opponent's private information."""
    agreement: Estimate | None
    score: Estimate | None
    """The combined per-turn score (comparable turns only)."""


@dataclass(frozen=True)
class HeadToHead:
    """Every pair of policies played in both seats: mean returns, win/draw/loss counts and Elo ratings."""

    policies: tuple[str, ...]
    payoff: tuple[tuple[Estimate | None, ...], ...]
    """[i][j]: mean return of policy i against policy j (None on the diagonal)."""
    outcomes: tuple[tuple[tuple[int, int, int], ...], ...]
    """[i][j]: (wins, draws, losses) of policy i against policy j in duplicate matches: one deal played
    in both seats, won by the higher total return. Elo is fitted to these, so that a poker policy is rated
    by what it wins, not by how many hands."""
    elo: tuple[Estimate, ...]
    games_per_pair: int


def _outcome(episode: Episode, agent: str) -> int:
    """1 win, 0 draw, -1 loss: the agent's return against the best of the others."""
    mine = episode.returns[agent]
    best_other = max(value for other, value in episode.returns.items() if other != agent)
    return (mine > best_other) - (mine < best_other)


def outcome_counts(episodes: Sequence[Episode]) -> tuple[int, int, int]:
    """(wins, draws, losses) of each episode's (single) ego agent."""
    outcomes = [_outcome(episode, episode.ego_agents[0]) for episode in episodes]
    return outcomes.count(1), outcomes.count(0), outcomes.count(-1)


def duplicate_outcomes(episodes: Sequence[Episode]) -> tuple[int, int, int]:
    """(wins, draws, losses) of the ego agent over deals: its total return over a deal's seat rotation
    against the best total of any other seat (2-player: the opponent's)."""
    totals: dict[int, dict[int, float]] = {}
    for episode in episodes:
        (ego,) = episode.ego_agents
        deal = totals.setdefault(episode.seed, {})
        for seat, agent in enumerate(episode.agents):
            # Seats are keyed relative to the ego seat, so that "ego" and "the others" add up across rotations.
            offset = (seat - episode.agents.index(ego)) % len(episode.agents)
            deal[offset] = deal.get(offset, 0.0) + episode.returns[agent]
    signs = [(deal[0] > max(v for k, v in deal.items() if k)) - (deal[0] < max(v for k, v in deal.items() if k))
             for deal in totals.values()]
    return signs.count(1), signs.count(0), signs.count(-1)


def match_result(opponent: str, episodes: Sequence[Episode]) -> MatchResult:
    """Return and win/draw/loss rates of each episode's (single) ego agent, with 95% intervals."""
    by_deal: dict[int, list[float]] = {}
    by_seat: dict[int, list[float]] = {}
    for episode in episodes:
        (agent,) = episode.ego_agents
        value = episode.returns[agent]
        by_deal.setdefault(episode.seed, []).append(value)
        by_seat.setdefault(episode.agents.index(agent), []).append(value)
    deal_means = mean_estimate([float(np.mean(values)) for values in by_deal.values()])
    n = len(episodes)
    wins, draws, losses = outcome_counts(episodes)
    return MatchResult(
        opponent=opponent,
        games=n,
        mean_return=dataclasses.replace(deal_means, n=n),
        win=rate_estimate(wins, n),
        draw=rate_estimate(draws, n),
        loss=rate_estimate(losses, n),
        seat_returns=tuple(mean_estimate(by_seat[seat]) for seat in sorted(by_seat)),
    )


def validity(episodes: Sequence[Episode]) -> Estimate | None:
    """The share of the ego agents' LLM turns whose response named a legal action; None without LLM turns."""
    turns = _ego_llm_turns(episodes)
    return rate_estimate(sum(turn.valid for turn in turns), len(turns)) if turns else None


def truncation(episodes: Sequence[Episode]) -> Estimate | None:
    """The share of the ego agents' LLM turns whose response stopped at the token limit; None without LLM turns."""
    turns = _ego_llm_turns(episodes)
    return rate_estimate(sum(turn.truncated for turn in turns), len(turns)) if turns else None


def _ego_llm_turns(episodes: Sequence[Episode]) -> list[Turn]:
    return [
        turn for episode in episodes for turn in episode.turns
        if turn.agent in episode.ego_agents and turn.response is not None
    ]


def cot_result(scored: Sequence[ScoredEpisode]) -> CotResult | None:
    """Means of the comparator's per-turn scores over `scored`; None when no turn was scored."""
    scores = [score for item in scored for score in item.scores]
    if not scores:
        return None

    def component(values: list[float]) -> Estimate | None:
        # Scores lie in [0, 1], where the variance is at most mean * (1 - mean): the Wilson interval of the
        # mean is then conservative, and stays honest when every score is 0 or 1.
        return rate_estimate(sum(values), len(values)) if values else None

    return CotResult(
        predict=component([s.predict for s in scores if s.predict is not None]),
        belief=component([s.belief for s in scores if s.belief is not None]),
        agreement=component([s.agreement for s in scores if s.agreement is not None]),
        score=component([s.score for s in scores if s.comparable]),
    )


def head_to_head_result(
    names: Sequence[str], episodes: dict[tuple[int, int], Sequence[Episode]], seed: int = 0, bootstrap: int = 200
) -> HeadToHead:
    """The payoff matrix and Elo ratings of two-player games; `episodes[(i, j)]` has policy i as ego."""
    k = len(names)
    payoff: list[list[Estimate | None]] = [[None] * k for _ in range(k)]
    outcomes = np.zeros((k, k, 3), dtype=np.int64)
    for (i, j), played in episodes.items():
        for row, column, seen in ((i, j, played), (j, i, [_other_side(e) for e in played])):
            payoff[row][column] = match_result(names[column], seen).mean_return
            outcomes[row, column] += duplicate_outcomes(seen)
    ratings, low, high = elo_with_intervals(outcomes, seed=seed, bootstrap=bootstrap)
    games = {len(played) for played in episodes.values()}
    return HeadToHead(
        policies=tuple(names),
        payoff=tuple(tuple(row) for row in payoff),
        outcomes=tuple(tuple(tuple(int(x) for x in cell) for cell in row) for row in outcomes),
        elo=tuple(Estimate(float(r), float(lo), float(hi), int(outcomes[i].sum())) for i, (r, lo, hi) in enumerate(
            zip(ratings, low, high, strict=True))),
        games_per_pair=max(games) if games else 0,
    )


def _other_side(episode: Episode) -> Episode:
    (ego,) = episode.ego_agents
    (other,) = (agent for agent in episode.agents if agent != ego)
    return dataclasses.replace(episode, ego_agents=(other,))
