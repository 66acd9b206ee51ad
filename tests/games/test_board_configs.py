"""The shipped tic-tac-toe, Connect Four, Liar's dice and bargaining configs: `strat check` accepts them, and two
in-process training steps run on each (rollout -> comparison -> advantages -> update, hf engine, no Ray) from a
short warm start of the config's own player, with moves parsed from the policy's responses (not all fallbacks) and a
finite process term at every turn, also in the board games, where it rests on predictions alone (no private
information, so no belief score)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from training_steps import (  # this folder is on sys.path (no __init__.py: `games` is the package under test)
    decision_counts,
    two_steps,
)

from strat import cli
from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.config_loading import load_config
from strat.engines.base import Generation, SamplingParams
from strat.play.rollout import RolloutRunner, plan_groups
from strat.play.settings import rollout_settings
from strat.train.settings import advantage_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BOARD_GAMES = ("tic_tac_toe", "connect_four")
GAMES = (*BOARD_GAMES, "liars_dice", "bargaining")
# A short warm start of the configs' own player at depth 1, and a small step, so that each test stays short.
SMOKE = ["engine.backend=hf", "warm_start.epochs=2", "algorithm.group_size=2", "algorithm.groups_per_step=3",
         "reasoning.depth=1"]
# Per game: warm-start games for about 200 decisions (random play: ~8 a game of tic-tac-toe, ~23 of Connect Four,
# ~3.6 of Liar's dice: 400 there, since 200 left all 20 of its responses unparsable (CI, 2026-12-04), where 400
# gave 10-14 valid of 14-18 over seeds 0-2), about 500 for bargaining (~8.6 a game; its responses are twice as long,
# and 200 decisions left every response unparsable), and room for the longest templated depth-1 response (105, 120,
# 145, 228 tokens).
GAME_SMOKE = {
    "tic_tac_toe": ["warm_start.episodes=25", "reasoning.max_new_tokens=128"],
    "connect_four": ["warm_start.episodes=8", "reasoning.max_new_tokens=144"],
    "liars_dice": ["warm_start.episodes=110", "reasoning.max_new_tokens=160"],
    "bargaining": ["warm_start.episodes=60", "reasoning.max_new_tokens=256"],
}


@pytest.mark.parametrize("game", GAMES)
def test_strat_check_accepts_the_config(game: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(CONFIGS / f"{game}_tiny.yaml")]) == 0
    captured = capsys.readouterr()
    assert "held_out: null" in captured.out and f"context: longest {game} prompt" in captured.err


# Each builds its game's tiny model and a short warm start first (minutes on 2 cores, not the ~30 s hoped for): run
# by `make test-faults` with the other trainer-level runs (CI runs both), not by `make test`.
@pytest.mark.long
@pytest.mark.parametrize("game", GAMES)
def test_two_training_steps(game: str, tmp_path: Path) -> None:
    config = load_config(CONFIGS / f"{game}_tiny.yaml",
                         [*SMOKE, *GAME_SMOKE[game], f"run.output_dir={tmp_path}"])
    results = two_steps(config, tmp_path)
    valid, decisions = decision_counts(results)
    assert decisions > 0 and valid > 0, "every move was a fallback: the policy's responses were never parsed"
    process_only = dataclasses.replace(advantage_config(config), mode="process")
    for step, result in enumerate(results, start=1):
        assert result.figures["learn/samples"] > 0 and math.isfinite(result.figures["loss/policy"])
        scores = [score for scored in result.scored for score in scored.scores]
        turns = sum(1 for s in result.scored for t in s.episode.turns if t.agent in s.episode.ego_agents and t.response)
        assert len(scores) == turns > 0
        # At depth 1 every turn has a prediction to score, so every turn is comparable; a belief only where the
        # game has private information and an opponent has acted.
        assert all(score.comparable and score.predict is not None and math.isfinite(score.score) for score in scores)
        if game in BOARD_GAMES:
            assert all(score.belief is None for score in scores)
        else:
            assert any(score.belief is not None for score in scores)
        process, _ = compute_advantages(result.scored, process_only)
        assert len(process) == turns and all(math.isfinite(sample.advantage) for sample in process)
        assert all(math.isfinite(sample.advantage) for sample in result.samples)
        # The step's transcripts mark every turn of its games as played from the response or as a fallback.
        text = (tmp_path / f"step_{step}.md").read_text()
        turns_played = [turn for s in result.scored for turn in s.episode.turns]
        assert text.count("** (valid)") == sum(turn.valid for turn in turns_played)
        assert text.count("** (INVALID, fallback played)") == sum(not turn.valid for turn in turns_played)


@pytest.mark.long
def test_two_training_steps_with_the_move_constrained(tmp_path: Path) -> None:
    """Tic-tac-toe with `reasoning.constrain_action`: every response that opens `<action>` plays a legal cell, and the
    learner's log-probs of the sampled tokens are the engine's (the same mask on both sides)."""
    config = load_config(CONFIGS / "tic_tac_toe_tiny.yaml",
                         [*SMOKE, *GAME_SMOKE["tic_tac_toe"], "reasoning.constrain_action=true",
                          f"run.output_dir={tmp_path}"])
    results = two_steps(config, tmp_path)
    turns = [turn for result in results for s in result.scored for turn in s.episode.turns if turn.response]
    opened = [turn for turn in turns if "<action>" in turn.response_text]
    assert opened and all(turn.valid for turn in opened)
    assert all(turn.allowed_token_ids for turn in opened)
    for result in results:
        assert math.isfinite(result.figures["loss/policy"])
    # Before the first update the learner holds the engine's weights: only float rounding between them.
    assert results[0].figures["logprob/engine_learner_gap"] < 1e-4


def _centre_predicting_a1(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
    """A stand-in policy: a well-formed depth-1 response that plays the centre (a fallback once it is taken) and
    predicts the opponent's a1."""
    text = "<past>Nothing to read.</past><plan>Centre.</plan><predict>a1</predict><action>b2</action>"
    return [Generation(tuple(prompt), (1,), (-0.5,), text, "stop") for prompt in prompts]


@pytest.mark.parametrize("opponent", ["self", "minimax"])
def test_without_private_information_the_score_is_the_prediction_alone(opponent: str) -> None:
    """Tic-tac-toe has no belief score: each turn's score is its prediction accuracy itself (1 where the next move
    was a1, else 0; not halved by a missing belief), every turn is comparable, and the process term is finite."""
    choice = "{kind: self}" if opponent == "self" else f"{{kind: scripted, name: {opponent}}}"
    config = load_config(CONFIGS / "tic_tac_toe_tiny.yaml", [
        "engine.backend=hf", "reasoning.depth=1", "algorithm.group_size=4", f"game.opponents=[{choice}]"])
    settings = rollout_settings(config)
    episodes = RolloutRunner(settings, lambda messages: [0], _centre_predicting_a1).run(
        plan_groups(settings, 0, 1, 0, 3), 1)
    scored = score_episodes(episodes, ComparisonWeights(predict=1.0, belief=1.0, agreement=0.5))
    for item in scored:
        turns = {turn.turn_index: turn for turn in item.episode.turns}
        for score in item.scores:
            following = next((t for i, t in sorted(turns.items()) if i > score.turn_index and t.agent != score.agent),
                             None)
            expected = float(following is not None and following.action_name == "a1")
            assert score.belief is None and score.agreement is None and score.comparable
            assert score.predict == expected and score.score == expected
    assert {s.predict for item in scored for s in item.scores} == {0.0, 1.0}
    for mode in ("process", "hybrid"):
        samples, stats = compute_advantages(scored, dataclasses.replace(advantage_config(config), mode=mode))
        assert stats.comparable_turns == stats.turns == len(samples) > 0
        assert all(math.isfinite(sample.advantage) for sample in samples)
