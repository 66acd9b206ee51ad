"""Exploitability of a policy, exact for policies that know their action distribution and estimated by
sampling for LLM policies (bias-corrected, with an interval bounded from both sides), computed by a
vectorised sequence-form best response; and the statistics of played games (return and rate intervals,
reasoning scores, payoff matrix, Elo). Pure logic: the policy is any sampler of actions."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

import games
from games.base import TextGameEnv
from strat.records import Episode, ScoredEpisode

ActionSampler = Callable[[Sequence[tuple[TextGameEnv, str]], int], list[list[int]]]
"""(env at a decision, agent to act) pairs and n -> n sampled action ids per pair (fallbacks included)."""
ActionProbs = Callable[[TextGameEnv, str], dict[int, float]]

EXPLOITABLE_GAMES = ("kuhn_poker", "leduc_poker")
Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


@dataclass(frozen=True)
class ExploitabilityEstimate:
    """A policy's exploitability with a 95% interval (equal bounds when exact).

    `value` is the bias-corrected estimate; `plug_in` is the exploitability of the empirical action
    frequencies, which is biased upward at small `samples_per_infoset`.
    """

    value: float
    ci_low: float
    ci_high: float
    samples_per_infoset: int
    infosets: int
    plug_in: float | None = None

    @property
    def ci_half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    @property
    def exact(self) -> bool:
        return self.samples_per_infoset == 0


# --- the game tree in sequence form ---------------------------------------------------------------


@dataclass(frozen=True)
class _SequenceForm:
    """A game's terminal histories and information sets, laid out for vectorised best responses.

    A policy is an array [batch, infoset, action]; index `infosets * actions` of its flattened view is a
    constant 1, used to pad decision paths.
    """

    keys: tuple[str, ...]
    """Information-state strings, the rows of a policy array."""
    num_actions: int
    num_players: int
    legal: np.ndarray
    """[infosets, actions] bool."""
    chance: np.ndarray
    """[terminals] probability of the chance outcomes on the way to each terminal."""
    utility: np.ndarray
    """[terminals, players]."""
    path: np.ndarray
    """[terminals, depth] flat (infoset * actions + action) index of each decision on the way, padded."""
    path_player: np.ndarray
    """[terminals, depth] the player of each decision, -1 on padding."""
    last_sequence: tuple[np.ndarray, ...]
    """Per player: [terminals] the player's last sequence before the terminal (0: none)."""
    levels: tuple[tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...], ...]
    """Per player, deepest first, its infosets at one sequence depth: (rows [k], sequence of each action
    [k, actions] (-1 where illegal), parent sequence [k])."""
    num_sequences: tuple[int, ...]
    """Per player, including the empty sequence 0."""

    @property
    def index(self) -> dict[str, int]:
        return {key: row for row, key in enumerate(self.keys)}


@lru_cache(maxsize=8)
def _sequence_form(game: str, options: tuple[tuple[str, object], ...]) -> _SequenceForm:
    spiel_game = games.make(game, **dict(options)).pyspiel_state.get_game()
    num_players, num_actions = spiel_game.num_players(), spiel_game.num_distinct_actions()
    rows: dict[str, int] = {}
    owner: list[int] = []
    legal_rows: list[list[int]] = []
    sequence_ids: list[dict[tuple[int, int], int]] = [{} for _ in range(num_players)]
    infoset_parent: dict[int, tuple[int, int]] = {}
    """row -> (parent sequence, sequence depth) of its player."""
    terminals: list[tuple[float, list[float], list[tuple[int, int]], list[int]]] = []

    def sequence_of(player: int, row: int, action: int) -> int:
        return sequence_ids[player].setdefault((row, action), len(sequence_ids[player]) + 1)

    # (state, chance reach, decisions so far as (flat index, player), each player's (last sequence, depth))
    stack = [(spiel_game.new_initial_state(), 1.0, [], [(0, 0)] * num_players)]
    while stack:
        state, reach, decisions, sequences = stack.pop()
        if state.is_terminal():
            terminals.append((reach, state.returns(), decisions, [s for s, _ in sequences]))
            continue
        if state.is_chance_node():
            for action, p in state.chance_outcomes():
                stack.append((state.child(action), reach * p, decisions, sequences))
            continue
        player = state.current_player()
        key = state.information_state_string(player)
        if key not in rows:
            rows[key] = len(rows)
            owner.append(player)
            legal_rows.append(state.legal_actions())
            infoset_parent[rows[key]] = sequences[player]
        row = rows[key]
        for action in state.legal_actions():
            moved = list(sequences)
            moved[player] = (sequence_of(player, row, action), sequences[player][1] + 1)
            stack.append((state.child(action), reach, [*decisions, (row * num_actions + action, player)], moved))

    pad = len(rows) * num_actions
    depth = max(len(d) for _, _, d, _ in terminals)
    path = np.full((len(terminals), depth), pad, dtype=np.int64)
    path_player = np.full((len(terminals), depth), -1, dtype=np.int64)
    for z, (_, _, decisions, _) in enumerate(terminals):
        for k, (flat, player) in enumerate(decisions):
            path[z, k], path_player[z, k] = flat, player
    legal = np.zeros((len(rows), num_actions), dtype=bool)
    for row, actions in enumerate(legal_rows):
        legal[row, actions] = True
    levels = []
    for player in range(num_players):
        mine = [row for row in range(len(rows)) if owner[row] == player]
        by_depth: dict[int, list[int]] = {}
        for row in mine:
            by_depth.setdefault(infoset_parent[row][1], []).append(row)
        player_levels = []
        for level in sorted(by_depth, reverse=True):
            members = by_depth[level]
            sequences = np.full((len(members), num_actions), -1, dtype=np.int64)
            for k, row in enumerate(members):
                for action in legal_rows[row]:
                    sequences[k, action] = sequence_ids[player][(row, action)]
            parents = np.array([infoset_parent[row][0] for row in members], dtype=np.int64)
            player_levels.append((np.array(members, dtype=np.int64), sequences, parents))
        levels.append(tuple(player_levels))
    return _SequenceForm(
        keys=tuple(rows),
        num_actions=num_actions,
        num_players=num_players,
        legal=legal,
        chance=np.array([reach for reach, _, _, _ in terminals]),
        utility=np.array([returns for _, returns, _, _ in terminals]),
        path=path,
        path_player=path_player,
        last_sequence=tuple(np.array([last[p] for *_, last in terminals]) for p in range(num_players)),
        levels=tuple(levels),
        num_sequences=tuple(len(ids) + 1 for ids in sequence_ids),
    )


def _expected_values(form: _SequenceForm, own: np.ndarray, others: np.ndarray) -> np.ndarray:
    """[batch, players]: each player's expected return when it plays `own` and everyone else plays `others`."""
    batch = own.shape[0]
    ones = np.ones((batch, 1))
    own_steps = np.concatenate([own.reshape(batch, -1), ones], axis=1)[:, form.path]
    other_steps = np.concatenate([others.reshape(batch, -1), ones], axis=1)[:, form.path]
    values = np.empty((batch, form.num_players))
    for player in range(form.num_players):
        reach = np.where(form.path_player == player, own_steps, other_steps).prod(axis=2)
        values[:, player] = (reach * form.chance * form.utility[:, player]).sum(axis=1)
    return values


def _best_responses(form: _SequenceForm, policies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each player's best-response value against the others' `policies` [batch, players], and the best
    responses as one pure strategy profile [batch, infoset, action] (each row belongs to one player)."""
    batch = policies.shape[0]
    steps = np.concatenate([policies.reshape(batch, -1), np.ones((batch, 1))], axis=1)[:, form.path]
    best_values = np.empty((batch, form.num_players))
    responses = np.zeros_like(policies)
    for player in range(form.num_players):
        others = np.where(form.path_player == player, 1.0, steps).prod(axis=2)
        values = np.zeros((batch, form.num_sequences[player] + 1))
        np.add.at(values, (slice(None), form.last_sequence[player]), others * form.chance * form.utility[:, player])
        values[:, -1] = -np.inf  # column -1 stands for illegal actions: never the best
        for rows, sequences, parents in form.levels[player]:
            action_values = values[:, sequences]
            best = action_values.argmax(axis=2)
            responses[np.arange(batch)[:, None], rows[None, :], best] = 1.0
            np.add.at(values, (slice(None), parents), np.take_along_axis(action_values, best[..., None], 2)[..., 0])
        best_values[:, player] = values[:, 0]
    return best_values, responses


def _exploitability_batch(form: _SequenceForm, policies: np.ndarray) -> np.ndarray:
    """Exploitability (NashConv / players, as OpenSpiel defines it) of each policy in [batch, infoset, action]."""
    best_values, _ = _best_responses(form, policies)
    return (best_values - _expected_values(form, policies, policies)).mean(axis=1)


def _cross_fitted_gain(form: _SequenceForm, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """What a best response fitted on one half of the samples gains on the other half, both ways, averaged.

    Each half's frequencies are unbiased for the policy's reach probabilities, and a fixed deviation gains
    at most the best response's gain, so the expectation is at most the true exploitability."""
    gains = []
    for fit, held_out in ((first, second), (second, first)):
        _, responses = _best_responses(form, fit)
        deviation = _expected_values(form, responses, held_out)
        gains.append((deviation - _expected_values(form, held_out, held_out)).mean(axis=1))
    return (gains[0] + gains[1]) / 2


def _policy_array(form: _SequenceForm, table: dict[str, dict[int, float]]) -> np.ndarray:
    array = np.zeros((len(form.keys), form.num_actions))
    for row, key in enumerate(form.keys):
        probs = table.get(key)
        if probs is None:
            raise KeyError(f"the policy has no action distribution for information state {key!r}")
        for action, p in probs.items():
            array[row, action] = p
        total = array[row].sum()
        if total <= 0 or not form.legal[row][array[row] > 0].all():
            raise ValueError(f"the distribution at information state {key!r} is not over legal actions: {probs}")
        array[row] /= total
    return array


def _options_key(options: dict[str, object] | None) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((options or {}).items()))


def exploitability_of_table(
    game: str, table: dict[str, dict[int, float]], options: dict[str, object] | None = None
) -> float:
    """Exploitability (OpenSpiel's definition) of a policy given as {info state: {action: prob}}."""
    form = _sequence_form(game, _options_key(options))
    return float(_exploitability_batch(form, _policy_array(form, table)[None])[0])


# --- exact and sampled exploitability ---------------------------------------------------------------


@lru_cache(maxsize=8)
def _decision_states(game: str, options: tuple[tuple[str, object], ...]) -> tuple[tuple[str, int, object], ...]:
    """One representative pyspiel state per information state: (info key, player, state)."""
    spiel_game = games.make(game, **dict(options)).pyspiel_state.get_game()
    found: dict[str, tuple[int, object]] = {}
    stack = [spiel_game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack.extend(state.child(action) for action, _ in state.chance_outcomes())
            continue
        player = state.current_player()
        key = state.information_state_string(player)
        found.setdefault(key, (player, state))
        stack.extend(state.child(action) for action in state.legal_actions())
    return tuple((key, player, state) for key, (player, state) in sorted(found.items()))


def _env_at(game: str, options: dict[str, object], state: object) -> tuple[TextGameEnv, str]:
    env = games.make(game, **options)
    env.reset(seed=0)
    env.load_state(state)
    return env, env.agent_selection


def _check_exploitable(game: str) -> None:
    if game not in EXPLOITABLE_GAMES:
        raise ValueError(f"exploitability is computed for {', '.join(EXPLOITABLE_GAMES)}, not {game!r}")


def exact_exploitability(game: str, action_probs: ActionProbs, options: dict[str, object] | None = None) -> float:
    """Exploitability of a policy that knows its action distribution (scripted opponents)."""
    _check_exploitable(game)
    options = options or {}
    table = {}
    for key, _, state in _decision_states(game, _options_key(options)):
        env, agent = _env_at(game, options, state)
        table[key] = action_probs(env, agent)
    return exploitability_of_table(game, table, options)


def exact_estimate(
    game: str, action_probs: ActionProbs, options: dict[str, object] | None = None
) -> ExploitabilityEstimate:
    """`exact_exploitability` as an estimate with equal bounds (samples_per_infoset 0 marks it exact)."""
    value = exact_exploitability(game, action_probs, options)
    infosets = len(_decision_states(game, _options_key(options)))
    return ExploitabilityEstimate(value, value, value, 0, infosets)


def estimate_exploitability(
    game: str,
    sampler: ActionSampler,
    samples_per_infoset: int,
    seed: int = 0,
    bootstrap: int = 200,
    options: dict[str, object] | None = None,
) -> ExploitabilityEstimate:
    """Exploitability of a policy known only through `samples_per_infoset` sampled moves at every
    information set, with a 95% interval that brackets the truth from both sides.

    The exploitability of the empirical frequencies (`plug_in`) is biased upward, since a best response
    also exploits the sampling noise (by Jensen, its expectation is at least the truth); near an
    equilibrium the bias is of the order of the noise itself. So the bounds come from two statistics
    biased in opposite directions: the upper bound is the plug-in plus 1.96 bootstrap standard errors,
    the lower bound the cross-fitted gain (a best response fitted on half of the samples, scored on the
    other half; its expectation is at most the truth) minus its bootstrap spread, resampled from
    frequencies smoothed by half a count per legal action so that a move never seen still varies.
    `value` is the plug-in less the bootstrap estimate of its bias. One sample per infoset gives no
    lower bound (0).
    """
    _check_exploitable(game)
    if samples_per_infoset < 1:
        raise ValueError(f"samples_per_infoset must be >= 1, got {samples_per_infoset}")
    options = options or {}
    key = _options_key(options)
    decisions = _decision_states(game, key)
    form = _sequence_form(game, key)
    drawn = sampler([_env_at(game, options, state) for _, _, state in decisions], samples_per_infoset)
    if len(drawn) != len(decisions):
        raise ValueError(f"the sampler returned {len(drawn)} rows for {len(decisions)} information sets")
    half = samples_per_infoset // 2
    halves = np.zeros((2, len(form.keys), form.num_actions))
    index = form.index
    for (info_key, _, _), actions in zip(decisions, drawn, strict=True):
        if len(actions) != samples_per_infoset:
            raise ValueError(f"the sampler returned {len(actions)} moves at {info_key!r}, not {samples_per_infoset}")
        row = index[info_key]
        for part, chosen in enumerate((actions[:half], actions[half:])):
            np.add.at(halves[part, row], np.asarray(chosen, dtype=np.int64), 1.0)
    counts = halves.sum(axis=0)
    if (counts[~form.legal] > 0).any():
        raise ValueError("the sampler returned an illegal action")
    plug_in = float(_exploitability_batch(form, counts[None] / samples_per_infoset)[0])
    if bootstrap < 2:
        return ExploitabilityEstimate(plug_in, plug_in, plug_in, samples_per_infoset, len(decisions), plug_in)
    rng = np.random.default_rng(seed)
    replicates = _in_chunks(_exploitability_batch, form, _resampled(counts, bootstrap, rng))
    high = plug_in + Z95 * float(replicates.std(ddof=1))
    low = 0.0
    if half > 0:
        first, second = halves[0] / half, halves[1] / (samples_per_infoset - half)
        gain = float(_cross_fitted_gain(form, first[None], second[None])[0])
        spread = _in_chunks(
            _cross_fitted_gain,
            form,
            _resampled(halves[0], bootstrap, rng, smoothing=0.5 * form.legal),
            _resampled(halves[1], bootstrap, rng, smoothing=0.5 * form.legal),
        )
        low = max(0.0, gain - float(np.percentile(spread, 97.5) - spread.mean()))
    value = min(high, max(low, 2 * plug_in - float(replicates.mean())))
    return ExploitabilityEstimate(value, low, high, samples_per_infoset, len(decisions), plug_in)


def _in_chunks(function: Callable[..., np.ndarray], form: _SequenceForm, *policies: np.ndarray) -> np.ndarray:
    """`function(form, *policies)` over slices of the batch: memory grows with batch x terminals x depth."""
    size = 32
    return np.concatenate(
        [function(form, *(p[start : start + size] for p in policies)) for start in range(0, len(policies[0]), size)]
    )


def _resampled(
    counts: np.ndarray, replicates: int, rng: np.random.Generator, smoothing: np.ndarray | float = 0.0
) -> np.ndarray:
    """[replicates, infoset, action] frequencies of each row's number of moves, redrawn from its (smoothed)
    empirical frequencies."""
    n = counts.sum(axis=1)
    weights = counts + smoothing
    out = np.empty((replicates, *counts.shape))
    for row in range(counts.shape[0]):
        out[:, row] = rng.multinomial(int(n[row]), weights[row] / weights[row].sum(), size=replicates) / n[row]
    return out


def scripted_sampler(action_probs: ActionProbs, seed: int = 0) -> ActionSampler:
    """A sampler that draws from a scripted policy's distribution, for testing the LLM sampling path."""
    rng = random.Random(seed)

    def sample(located: Sequence[tuple[TextGameEnv, str]], n: int) -> list[list[int]]:
        out = []
        for env, agent in located:
            probs = action_probs(env, agent)
            actions, weights = zip(*sorted(probs.items()), strict=True)
            out.append(rng.choices(actions, weights=weights, k=n))
        return out

    return sample


# --- intervals and ratings ------------------------------------------------------------------------


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
    turns = [
        turn for episode in episodes for turn in episode.turns
        if turn.agent in episode.ego_agents and turn.response is not None
    ]
    return rate_estimate(sum(turn.valid for turn in turns), len(turns)) if turns else None


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
