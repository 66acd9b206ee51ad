"""Two training steps as the trainer runs them, in-process (hf engine, no Ray): the shipped configs' smoke tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.records import ScoredEpisode, TrainSample
from strat.config import ExperimentConfig
from strat.engines import build_engine
from strat.play.rollout import RolloutRunner, plan_groups
from strat.play.settings import rollout_settings
from strat.train.learner import PolicyLearner
from strat.train.settings import advantage_config, base_model_path, learner_settings, warm_start_settings
from strat.train.transcripts import render_transcripts
from strat.train.warmstart import ensure_warm


@dataclass(frozen=True)
class StepResult:
    """One step: the scored episodes, their training samples and the learner's figures."""

    scored: list[ScoredEpisode]
    samples: list[TrainSample]
    figures: dict[str, float]



def two_steps(config: ExperimentConfig, out: Path) -> list[StepResult]:
    """Warm start, then two steps of rollout -> comparison -> advantages -> update with the weights pushed to the
    engine after each; each step's transcripts go to `out/step_<n>.md`."""
    model_dir = ensure_warm(base_model_path(config), config.game.name, warm_start_settings(config))
    settings = rollout_settings(config)
    learner = PolicyLearner(model_dir, learner_settings(config))
    results = []
    with build_engine("hf", model_dir) as engine:
        for step in (1, 2):
            runner = RolloutRunner(settings, engine.encode_chat, engine.generate, snapshot=engine.generate)
            plans = plan_groups(settings, config.run.seed, step, 0, config.algorithm.groups_per_step)
            scored = score_episodes(runner.run(plans, step), ComparisonWeights())
            samples, _ = compute_advantages(scored, advantage_config(config))
            results.append(StepResult(scored, samples, learner.update(samples)))
            engine.load_weights_dir(learner.export_weights_dir(out / "weights"))
            (out / f"step_{step}.md").write_text(render_transcripts(scored, step))
    return results


def decision_counts(results: list[StepResult]) -> tuple[int, int]:
    """(valid, all) decisions the policy made over `results`: a valid one named a legal move (no fallback)."""
    turns = [turn for result in results for s in result.scored for turn in s.episode.turns if turn.response is not None]
    return sum(turn.valid for turn in turns), len(turns)
