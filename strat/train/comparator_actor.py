"""CoTComparator: the central comparison of every ego turn's reasoning with the truth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from strat.algorithm.comparison import (
    AgreementScorer,
    ChatMessages,
    ComparisonWeights,
    agreement_scorer,
    score_episodes,
)
from strat.algorithm.records import Episode, ScoredEpisode
from strat.algorithm.targets import BeliefTargetKind, PredictionTarget
from strat.engines import Engine, build_engine
from strat.train.agreement_models import JUDGE_SAMPLING, AgreementSettings, TextEmbedder, chat_completions


class Comparator:
    """Scores finished episodes turn by turn, in one batch per call; owns the judge's engine or the embedder."""

    def __init__(
        self,
        weights: ComparisonWeights,
        settings: AgreementSettings = AgreementSettings(),
        agents: Sequence[Any] = (),
        skip_forced: bool = False,
        prediction_target: PredictionTarget = "sampled",
        belief_target: BeliefTargetKind = "truth",
    ) -> None:
        self.weights = weights
        self.skip_forced = skip_forced
        self.prediction_target: PredictionTarget = prediction_target
        self.belief_target: BeliefTargetKind = belief_target
        self.agents = list(agents)
        self.engine: Engine | None = None
        self.agreement = self._scorer(settings)

    def _scorer(self, settings: AgreementSettings) -> AgreementScorer:
        if settings.method == "token_f1":
            return agreement_scorer("token_f1")
        if settings.method == "judge" and settings.judge_engine == "policy":
            if not self.agents:
                raise ValueError("comparison.judge_engine=policy: the comparator got no agent actors to judge with")
            return agreement_scorer("judge", generate=self._policy_verdicts)
        if settings.model_dir is None:
            key = "judge_model" if settings.method == "judge" else "embedding_model"
            raise ValueError(f"comparison.agreement={settings.method}: comparison.{key} names no model directory")
        if settings.method == "embedding":
            import torch  # here: the default token-F1 comparator never needs it

            return agreement_scorer("embedding", embed=TextEmbedder(
                settings.model_dir, device="cuda" if torch.cuda.is_available() else "cpu"
            ))
        engine = self.engine = build_engine(settings.backend, settings.model_dir, settings.engine)
        max_model_len = settings.engine.max_model_len
        return agreement_scorer(
            "judge", generate=lambda batch: chat_completions(engine, batch, JUDGE_SAMPLING, max_model_len)
        )

    def _policy_verdicts(self, conversations: list[ChatMessages]) -> list[str]:
        """Greedy verdicts of the policy's agent actors, the batch split evenly among them."""
        if not conversations:
            return []
        share = -(-len(conversations) // len(self.agents))
        chunks = [conversations[start : start + share] for start in range(0, len(conversations), share)]
        calls = [agent.complete_chat.remote(chunk, JUDGE_SAMPLING) for agent, chunk in zip(self.agents, chunks)]
        return [text for texts in ray.get(calls) for text in texts]

    def ready(self) -> bool:
        return True

    def set_agents(self, agents: Sequence[Any]) -> None:
        """Point the policy judge at restarted agent actors (the driver replaces one that died)."""
        self.agents = list(agents)

    def score(self, episodes: list[Episode]) -> list[ScoredEpisode]:
        return score_episodes(episodes, self.weights, self.agreement, self.skip_forced, self.prediction_target,
                              self.belief_target)


# The actor the trainer starts; `Comparator` is the same class in-process.
CoTComparator = ray.remote(Comparator)
