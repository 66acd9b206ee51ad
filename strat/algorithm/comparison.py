"""Centralized CoT comparison: per-turn prediction, belief and agreement scores from reasoning and the truth."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import games
from games.base import BeliefValues, value_overlap
from strat.algorithm.reasoning import BELIEF_MARKER
from strat.algorithm.records import NO_SCORE, BeliefTarget, Episode, ScoredEpisode, Turn, TurnScore
from strat.algorithm.targets import BeliefTargetKind, PredictionTarget, belief_subjects

AgreementMethod = Literal["token_f1", "embedding", "judge"]
Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""A batch of texts -> one vector each, for agreement by cosine similarity; injected so nothing is loaded here."""
ChatMessages = list[dict[str, str]]
Generate = Callable[[list[ChatMessages]], list[str]]
"""A batch of chat prompts -> one completion each; the comparator backs it with the judge's engine."""

_PLAYER = re.compile(r"player[\s_]*(\d+)", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_JUDGE_SCORE = (
    re.compile(r"score(?:\s+of)?[^0-9a-z]{0,10}(\d{1,3}(?:\.\d+)?)", re.IGNORECASE),
    re.compile(r"(\d{1,3}(?:\.\d+)?)\s*/\s*10\b"),
    re.compile(r"^\s*(\d{1,3}(?:\.\d+)?)\s*$"),
)


@dataclass(frozen=True)
class ComparisonWeights:
    """Weights of the components in the combined score; maps onto `comparison.weights.*`."""

    predict: float = 1.0
    belief: float = 1.0
    agreement: float = 1.0

    def __post_init__(self) -> None:
        values = (self.predict, self.belief, self.agreement)
        if min(values) < 0 or sum(values) <= 0:
            raise ValueError(f"comparison weights {values} must be >= 0 with at least one positive")


@dataclass(frozen=True)
class AgreementPair:
    """What an ego turn expected the opponent to infer, and what the opponent inferred at its next turn."""

    episode_id: str
    turn_index: int
    game: str
    their_view: str
    opponent_past: str


AgreementScorer = Callable[[Sequence[AgreementPair]], list[float | None]]
"""A batch of pairs -> a score in [0, 1] each, or None where no score could be had."""


def normalise_action(text: str) -> str:
    """Lower-case with runs of non-alphanumerics as one space, so "Bet." matches "bet"."""
    return " ".join(_WORD.findall(text.lower()))


def prediction_accuracy(predicted: str | None, actual: str) -> float:
    """1 when `<predict>` names the opponent's actual next action (or "none" when none followed), else 0."""
    return float(predicted is not None and normalise_action(predicted) == normalise_action(actual))


def belief_text(past: str) -> str | None:
    """The guess after the last belief marker in `past`, to the end of its line; None without a marker."""
    start = past.lower().rfind(BELIEF_MARKER)
    if start < 0:
        return None
    return past[start + len(BELIEF_MARKER) :].split("\n", 1)[0]


def _player_number(agent: str) -> str | None:
    match = _PLAYER.fullmatch(agent)
    return match.group(1) if match else None


def _claim_about(guess: str, agent: str, single_opponent: bool) -> str:
    """The part of a belief line about `agent`, without player references (they contain digits)."""
    if single_opponent:
        return _PLAYER.sub(" ", guess)
    number = _player_number(agent)
    for segment in guess.split(";"):
        if any(match.group(1) == number for match in _PLAYER.finditer(segment)):
            return _PLAYER.sub(" ", segment)
    return ""


def belief_accuracy(past: str | None, truths: Mapping[str, str], extract: BeliefValues) -> float:
    """Mean over opponents of how well the belief line in `past` names each one's private information."""
    guess = belief_text(past) if past is not None else None
    if guess is None or not truths:
        return 0.0
    single = len(truths) == 1
    scores = [
        value_overlap(extract(_claim_about(guess, agent, single)), extract(truth)) for agent, truth in truths.items()
    ]
    return sum(scores) / len(scores)


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the bags of lower-case words of the two texts; 0 when either is empty."""
    predicted, actual = Counter(_WORD.findall(prediction.lower())), Counter(_WORD.findall(reference.lower()))
    shared = sum((predicted & actual).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / sum(predicted.values()), shared / sum(actual.values())
    return 2 * precision * recall / (precision + recall)


def cosine_agreement(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity clipped to [0, 1]: unrelated or opposite texts score 0."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if norm == 0 or not math.isfinite(norm):
        return 0.0
    return min(1.0, max(0.0, sum(x * y for x, y in zip(a, b, strict=True)) / norm))


def judge_messages(pair: AgreementPair) -> ChatMessages:
    """The judge's prompt for one pair: rate 0-10 how well the expectation anticipates the opponent's reading."""
    system = (
        f"You compare two texts from a game of {pair.game.replace('_', ' ')}. Text A is a player's expectation of "
        "how its opponent would read its move. Text B is what the opponent actually concluded at its next turn. "
        "Rate from 0 to 10 how well A anticipates B (0: unrelated or contradictory, 10: the same conclusion). "
        "Reply with only: Score: <0-10>"
    )
    user = f"Text A (expectation):\n{pair.their_view}\n\nText B (the opponent's reading):\n{pair.opponent_past}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_judge_score(text: str) -> float | None:
    """A judge's 0-10 score as a value in [0, 1]: "Score: 7", "7/10" or a bare number; None otherwise."""
    for pattern in _JUDGE_SCORE:
        matches = pattern.findall(text)
        if matches:
            value = float(matches[-1])
            return value / 10 if 0 <= value <= 10 else None
    return None


def token_f1_scorer(pairs: Sequence[AgreementPair]) -> list[float | None]:
    """Agreement by token F1."""
    return [token_f1(pair.their_view, pair.opponent_past) for pair in pairs]


def embedding_scorer(embed: Embed) -> AgreementScorer:
    """Agreement by cosine similarity of `embed`'s vectors, one batched call; an empty expectation scores 0."""

    def score(pairs: Sequence[AgreementPair]) -> list[float | None]:
        texts = [text for pair in pairs if pair.their_view for text in (pair.their_view, pair.opponent_past)]
        vectors = list(embed(texts)) if texts else []
        if len(vectors) != len(texts):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        remaining = iter(vectors)
        return [cosine_agreement(next(remaining), next(remaining)) if pair.their_view else 0.0 for pair in pairs]

    return score


def judge_scorer(generate: Generate) -> AgreementScorer:
    """Agreement by an LLM judge behind `generate`, one batched call; an unreadable verdict gives None."""

    def score(pairs: Sequence[AgreementPair]) -> list[float | None]:
        asked = [pair for pair in pairs if pair.their_view]
        verdicts = generate([judge_messages(pair) for pair in asked]) if asked else []
        if len(verdicts) != len(asked):
            raise ValueError(f"the judge returned {len(verdicts)} completions for {len(asked)} prompts")
        remaining = iter(verdicts)
        return [parse_judge_score(next(remaining)) if pair.their_view else 0.0 for pair in pairs]

    return score


def agreement_scorer(
    method: AgreementMethod, embed: Embed | None = None, generate: Generate | None = None
) -> AgreementScorer:
    """The scorer for `comparison.agreement`; `embedding` needs `embed`, `judge` needs `generate`."""
    if method == "token_f1":
        return token_f1_scorer
    if method == "embedding":
        if embed is None:
            raise ValueError("agreement='embedding' needs an embed function")
        return embedding_scorer(embed)
    if generate is None:
        raise ValueError("agreement='judge' needs a generate function backed by the judge's engine")
    return judge_scorer(generate)


def combine(
    predict: float | None, belief: float | None, agreement: float | None, weights: ComparisonWeights
) -> tuple[float, bool]:
    """Weighted mean of the components that were compared, and whether any was; NO_SCORE when none was."""
    parts = [
        (weight, value)
        for weight, value in ((weights.predict, predict), (weights.belief, belief), (weights.agreement, agreement))
        if value is not None and weight > 0
    ]
    if not parts:
        return NO_SCORE, False
    return sum(w * v for w, v in parts) / sum(w for w, _ in parts), True


def _next_other(episode: Episode, turn: Turn) -> Turn | None:
    """The first later turn of another agent: the one `<predict>` and `<their_view>` are about."""
    return next((t for t in episode.turns if t.turn_index > turn.turn_index and t.agent != turn.agent), None)


def _belief(episode: Episode, turn: Turn) -> float | None:
    extract = games.belief_values(episode.game)
    subjects = belief_subjects(episode, turn)
    if extract is None or not subjects or turn.response is None:
        return None
    truths = {agent: episode.private_info[agent] for agent in subjects}
    return belief_accuracy(turn.response.sections.past, truths, extract)


def _agreement_pair(episode: Episode, turn: Turn, following: Turn | None) -> AgreementPair | None:
    if turn.response is None or following is None or following.response is None:
        return None
    opponent_past = following.response.sections.past
    # An opponent that wrote no <past> gives nothing to compare against; that is not the ego's fault.
    if not opponent_past:
        return None
    return AgreementPair(
        episode.episode_id, turn.turn_index, episode.game, turn.response.sections.their_view or "", opponent_past
    )


def forced(following: Turn | None) -> bool:
    """Whether the move `<predict>` is about was forced: the ego's move ended the game ("none" followed), the next
    opponent had one legal action, or it is a scripted player whose rule left it one move (`Turn.certain`).
    Predicting the first two needs the rules only; scoring the third pays the policy for steering a fixed rule into
    states where it has one reply (Liar's dice against the truthful bidder: a bid of two of a face, which it cannot
    top and always calls, though the bid is usually false)."""
    return following is None or following.choices == 1 or following.certain


def policy_prediction(predicted: str | None, next_move: Sequence[tuple[str, float]]) -> float:
    """The probability the opponent's policy gives the move `<predict>` names (0 without a prediction): the expected
    prediction score when the move is drawn from that policy."""
    if predicted is None:
        return 0.0
    named = normalise_action(predicted)
    return sum(probability for name, probability in next_move if normalise_action(name) == named)


def posterior_belief(past: str | None, beliefs: Sequence[BeliefTarget], extract: BeliefValues) -> tuple[float, float]:
    """The belief line's expected score when each other agent's private information is drawn from its posterior,
    and its gap to the best belief (the most likely value's probability minus that score), means over the agents."""
    guess = belief_text(past) if past is not None else None
    single = len(beliefs) == 1
    scores, gaps = [], []
    for target in beliefs:
        claimed = extract(_claim_about(guess, target.agent, single)) if guess is not None else ()
        score = sum(probability * value_overlap(claimed, value.split()) for value, probability in target.values)
        scores.append(score)
        gaps.append(max(probability for _, probability in target.values) - score)
    return sum(scores) / len(scores), sum(gaps) / len(gaps)


@dataclass(frozen=True)
class _Components:
    """One ego turn's compared components, against the sampled truth and, where estimated, against targets."""

    predict: float | None = None
    belief: float | None = None
    predict_target: float | None = None
    belief_target: float | None = None
    belief_gap: float | None = None
    estimated: bool = False


def _components(episode: Episode, turn: Turn, following: Turn | None, neutral: bool) -> _Components:
    """Prediction and belief of a depth >= 1 turn, against the truth and against the episode's targets."""
    assert turn.response is not None
    predicted = turn.response.sections.predict
    targets = episode.targets_of(turn.turn_index)
    predict = predict_target = None
    if not neutral:
        predict = prediction_accuracy(predicted, following.action_name if following is not None else "none")
        if targets is not None and targets.next_move is not None:
            predict_target = policy_prediction(predicted, targets.next_move)
    belief = _belief(episode, turn)
    belief_target = gap = None
    extract = games.belief_values(episode.game)
    if (belief is not None and extract is not None and targets is not None and targets.beliefs
            and {target.agent for target in targets.beliefs} == set(belief_subjects(episode, turn))):
        belief_target, gap = posterior_belief(turn.response.sections.past, targets.beliefs, extract)
    return _Components(predict, belief, predict_target, belief_target, gap, targets is not None)


def score_episodes(
    episodes: Sequence[Episode],
    weights: ComparisonWeights,
    agreement: AgreementScorer = token_f1_scorer,
    skip_forced: bool = False,
    prediction_target: PredictionTarget = "sampled",
    belief_target: BeliefTargetKind = "truth",
) -> list[ScoredEpisode]:
    """Score every ego turn of `episodes` that has a parsed response; agreement pairs go to `agreement` in one batch.

    Components follow the depth each turn was asked for: depth 0 has none, depth 1 has prediction and belief,
    depth 2 adds agreement. A missing section where one was asked for scores 0.

    With `prediction_target` `policy`, a prediction scores the probability the opponent's estimated policy gives the
    predicted move; with `belief_target` `posterior`, a belief scores its expected value under the posterior over
    the opponents' private information (`strat.algorithm.targets`, carried by `Episode.targets`). A turn without
    such a target is scored on the sampled move or the true private information. Where targets were estimated, the
    turn also carries both scores (`TurnScore.sampled_score`, `target_score`), to compare them on the same turns.

    With `skip_forced`, a turn whose prediction is about a forced move (see `forced`) gets no process score at all:
    its prediction is not compared, and the turn is left out of the process statistics (its components other than
    the prediction are still reported). Scoring the prediction pays a policy for moves that leave the opponent no
    choice (Liar's dice's highest bid, after which "liar" is the only move); dropping only the prediction from the
    turn's mean would pay them too, wherever the remaining components average higher than the prediction does.
    """
    components: list[tuple[Episode, Turn, _Components, AgreementPair | None, bool]] = []
    for episode in episodes:
        for turn in episode.turns:
            if turn.agent not in episode.ego_agents or turn.response is None:
                continue
            depth = turn.response.depth
            following = _next_other(episode, turn)
            neutral = skip_forced and depth >= 1 and forced(following)
            parts = _components(episode, turn, following, neutral) if depth >= 1 else _Components()
            pair = _agreement_pair(episode, turn, following) if depth >= 2 else None
            components.append((episode, turn, parts, pair, neutral))
    pairs = [pair for *_, pair, _ in components if pair is not None]
    scored_pairs = agreement(pairs) if pairs else []
    if len(scored_pairs) != len(pairs):
        raise ValueError(f"the agreement scorer returned {len(scored_pairs)} scores for {len(pairs)} pairs")
    pair_scores = iter(scored_pairs)
    by_episode: dict[str, list[TurnScore]] = {episode.episode_id: [] for episode in episodes}
    for episode, turn, parts, pair, neutral in components:
        agree = next(pair_scores) if pair is not None else None
        use_predict = prediction_target == "policy" and parts.predict_target is not None
        use_belief = belief_target == "posterior" and parts.belief_target is not None
        predict = parts.predict_target if use_predict else parts.predict
        belief = parts.belief_target if use_belief else parts.belief
        score, comparable = (NO_SCORE, False) if neutral else combine(predict, belief, agree, weights)
        sampled = target = None
        if parts.estimated and not neutral:
            sampled = combine(parts.predict, parts.belief, agree, weights)[0]
            target = combine(_or(parts.predict_target, parts.predict), _or(parts.belief_target, parts.belief), agree,
                             weights)[0]
        by_episode[episode.episode_id].append(TurnScore(
            turn.agent, turn.turn_index, predict, belief, agree, score, comparable,
            on_target=int(use_predict) + int(use_belief), sampled_score=sampled, target_score=target,
            belief_gap=parts.belief_gap,
        ))
    return [ScoredEpisode(episode, tuple(by_episode[episode.episode_id])) for episode in episodes]


def _or(value: float | None, fallback: float | None) -> float | None:
    return fallback if value is None else value
