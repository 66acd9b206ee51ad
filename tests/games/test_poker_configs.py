"""The shipped Leduc hold'em and three-player Kuhn configs: `strat check` accepts them, and two in-process training
steps run on each (rollout -> comparison -> advantages -> update, hf engine, no Ray), from a short warm start of the
config's own player, with moves parsed from the policy's responses (not all fallbacks) and transcripts written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from training_steps import (  # this folder is on sys.path (no __init__.py: `games` is the package under test)
    decision_counts,
    two_steps,
)

from games.opponents import make_opponent
from strat import cli
from strat.config_loading import load_config
from strat.engines.base import Generation, SamplingParams
from strat.play.rollout import RolloutRunner, plan_groups
from strat.play.settings import rollout_settings

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# A short warm start of the configs' own player at depth 1 (shorter responses, learnt from fewer examples) and a
# small step, so that each test stays short. The configs' own `max_new_tokens` stays: three-player responses at depth
# 1 run past 128 tokens, and a cap of 128 cut every one off before its action.
SMOKE = [
    "engine.backend=hf", "warm_start.episodes=120", "warm_start.epochs=2",
    "algorithm.group_size=2", "algorithm.groups_per_step=3", "reasoning.depth=1",
]


@pytest.mark.parametrize("name", ["leduc_poker_tiny", "kuhn_poker_3p_tiny"])
def test_strat_check_accepts_the_config(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(CONFIGS / f"{name}.yaml")]) == 0
    assert "held_out: null" in capsys.readouterr().out


# Each builds its game's tiny model and a short warm start first (minutes on 2 cores, not the ~30 s hoped for): run
# by `make test-faults` with the other trainer-level runs (CI runs both), not by `make test`.
@pytest.mark.long
@pytest.mark.parametrize("name", ["leduc_poker_tiny", "kuhn_poker_3p_tiny"])
def test_two_training_steps(name: str, tmp_path: Path) -> None:
    config = load_config(CONFIGS / f"{name}.yaml", [*SMOKE, f"run.output_dir={tmp_path}"])
    results = two_steps(config, tmp_path)
    valid, decisions = decision_counts(results)
    assert decisions > 0 and valid > 0, "every move was a fallback: the policy's responses were never parsed"
    for step, result in enumerate(results, start=1):
        assert result.figures["learn/samples"] > 0 and math.isfinite(result.figures["loss/policy"])
        text = (tmp_path / f"step_{step}.md").read_text()
        # Each turn of the sampled games names its status; which it is depends on the few games sampled (a tiny
        # warm start may play only fallbacks in them: `valid > 0` above is over every decision of the step).
        turns = [line for line in text.splitlines() if line.startswith("### turn ")]
        assert text.startswith(f"# Sampled games at step {step}") and turns
        assert all(line.endswith(("(valid)", "(INVALID, fallback played)")) for line in turns)


@pytest.mark.parametrize("opponent", ["random", "heuristic", "contrarian", "timid", "bully", "station", "equilibrium"])
def test_three_player_kuhn_with_every_scripted_opponent(opponent: str) -> None:
    """Three-player rollouts against each scripted player: the opponent is made with the game's options (the
    equilibrium player of two-player Kuhn cannot play three), and every seat's chips add up to zero."""
    config = load_config(CONFIGS / "kuhn_poker_3p_tiny.yaml", [
        "engine.backend=hf", "algorithm.group_size=2", "algorithm.groups_per_step=2",
        f"game.opponents=[{{kind: scripted, name: {opponent}}}]",
    ])
    settings = rollout_settings(config)
    runner = RolloutRunner(settings, lambda messages: [0], _always_bet)
    episodes = runner.run(plan_groups(settings, 0, 1, 0, 2), 1)
    assert len(episodes) == 4
    for episode in episodes:
        assert len(episode.returns) == 3 and math.isclose(sum(episode.returns.values()), 0.0, abs_tol=1e-9)
        assert all(turn.valid for turn in episode.turns if turn.response is not None)
        assert {turn.agent for turn in episode.turns if turn.response is None} - set(episode.ego_agents)


def _always_bet(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
    """A stand-in policy whose every response is well-formed and bets."""
    text = ("<past>My private information: Jack.\nbelief: Queen</past><their_view>They see a bet.</their_view>"
            "<plan>Bet.</plan><predict>pass</predict><action>bet</action>")
    return [Generation(tuple(prompt), (1,), (-0.5,), text, "stop") for prompt in prompts]


def test_equilibrium_is_refused_where_it_cannot_be_computed() -> None:
    with pytest.raises(ValueError, match="not available for game 'leduc_poker' with"):
        make_opponent("equilibrium", "leduc_poker", players=3)
