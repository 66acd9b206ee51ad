"""A response cut off at the token limit is recorded as such, counted in training's metrics and named in an
evaluation's report, so a too-small `max_new_tokens` is not mistaken for a model that cannot play."""

from __future__ import annotations

from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.config import OpponentConfig
from strat.engines.base import Generation, SamplingParams
from strat.eval.evaluation import TRUNCATION_NOTE, truncation_note
from strat.eval.stats import truncation
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings
from strat.train.step_metrics import episode_metrics


class EveryThirdCutOff:
    """Garbage text; every third generation stops at the token limit ("length"), the others end by themselves."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            reason = "length" if self.calls % 3 == 0 else "stop"
            self.calls += 1
            out.append(Generation(tuple(prompt), (5, 6), (-1.0, -1.0), "no tags here", reason))
        return out


def test_cut_off_responses_are_recorded_counted_and_reported() -> None:
    generate = EveryThirdCutOff()
    settings = RolloutSettings(game="kuhn_poker", depth=2, group_size=2, max_tokens=16, format_penalty=-3.0,
                               opponents=(OpponentConfig(kind="self"),))
    runner = RolloutRunner(settings, lambda messages: [1, 2, 3], generate)
    plans = [GroupPlan(group_id=f"g{i}", seed=i, opponent=OpponentConfig(kind="self"), ego_seat=0) for i in range(6)]
    episodes = runner.run(plans, sampling_seed=0)
    turns = [turn for episode in episodes for turn in episode.turns]
    cut = sum(turn.truncated for turn in turns)
    assert len(turns) == generate.calls and cut == (generate.calls + 2) // 3  # calls 0, 3, 6, ... were cut off
    assert all(not turn.valid for turn in turns)  # the flag is recorded beside validity, not instead of it
    metrics = episode_metrics(score_episodes(episodes, ComparisonWeights()))
    assert metrics["format/truncated_rate"] == cut / len(turns)
    estimate = truncation(episodes)
    assert estimate is not None and estimate.value == cut / len(turns) and estimate.n == len(turns)
    assert estimate.value >= TRUNCATION_NOTE
    note = truncation_note(estimate.value, 16)
    assert "the limit of 16 new tokens" in note and "--max-new-tokens" in note
