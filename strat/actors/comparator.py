"""CoTComparator: the central comparison of every ego turn's reasoning with the truth."""

from __future__ import annotations

import ray

import strat  # noqa: F401
from strat.comparison import ComparisonWeights, agreement_scorer, score_episodes
from strat.records import Episode, ScoredEpisode


@ray.remote
class CoTComparator:
    """Scores finished episodes turn by turn, in one batch per call."""

    def __init__(self, weights: ComparisonWeights, agreement: str) -> None:
        if agreement != "token_f1":
            raise ValueError(f"comparison.agreement={agreement!r} needs its engine, which the comparator does not build yet")
        self.weights = weights
        self.agreement = agreement_scorer("token_f1")

    def ready(self) -> bool:
        return True

    def score(self, episodes: list[Episode]) -> list[ScoredEpisode]:
        return score_episodes(episodes, self.weights, self.agreement)
