"""Policies and the game loop: seat rotations over shared deals, batching, checkpoint resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from games.opponents import make_opponent
from strat.engines.base import Generation, SamplingParams
from strat.errors import ConfigError
from strat.eval.evaluation import evaluate_policy
from strat.eval.policies import ScriptedPolicy, chunked, play_tables, resolve_checkpoint, seat_rotations

from .helpers import fake_policy


def test_seat_rotations_share_deals_and_round_up() -> None:
    tables = seat_rotations("a vs b", 0, 1, num_players=2, num_games=5, seed=0)
    assert len(tables) == 6
    assert [t.ego_seats for t in tables[:2]] == [(0,), (1,)]
    assert [t.seats for t in tables[:2]] == [(0, 1), (1, 0)]
    assert tables[0].deal_seed == tables[1].deal_seed != tables[2].deal_seed
    three = seat_rotations("a vs b", 0, 1, num_players=3, num_games=3, seed=0)
    assert [t.seats for t in three] == [(0, 1, 1), (1, 0, 1), (1, 1, 0)]


def test_play_tables_scripted_both_seats() -> None:
    policies = [ScriptedPolicy("heuristic", "kuhn_poker"), ScriptedPolicy("random", "kuhn_poker")]
    tables = seat_rotations("h vs r", 0, 1, 2, 10, seed=1)
    episodes = play_tables("kuhn_poker", {}, policies, tables, seed=2)
    assert [e.episode_id for e in episodes] == [t.episode_id for t in tables]
    for first, second in zip(episodes[::2], episodes[1::2]):
        assert first.private_info == second.private_info, "a deal is the same whichever seat the policy takes"
        assert first.ego_agents == ("player_0",) and second.ego_agents == ("player_1",)
    for episode in episodes:
        assert sum(episode.returns.values()) == 0 and episode.turns
        assert all("Legal actions:" in turn.prompt_text for turn in episode.turns)
    again = play_tables("kuhn_poker", {}, policies, tables, seed=2)
    assert [e.turns for e in again] == [e.turns for e in episodes]
    alone = play_tables("kuhn_poker", {}, policies, tables[3:5], seed=2)
    assert [e.turns for e in alone] == [e.turns for e in episodes[3:5]], "a table's game ignores the other tables"


def test_fake_llm_plays_through_the_same_loop() -> None:
    """An LLM policy's moves come from its responses; its validity and reasoning scores are reported."""
    equilibrium = make_opponent("equilibrium", "kuhn_poker").action_probs
    policy, fake = fake_policy("kuhn_poker", equilibrium, garbage=0.5)
    report, shown = evaluate_policy(policy, ["random"], num_games=40, seed=0, samples_per_infoset=8, bootstrap=50)
    assert 0.3 < report.validity.value < 0.7 and report.validity.n > 40
    assert report.cot is not None and report.cot.predict.n > 0 and report.cot.belief is not None
    assert report.exploitability.samples_per_infoset == 8
    assert report.matches[0].games == 40
    turns = [t for item in shown for t in item.episode.turns if t.agent in item.episode.ego_agents]
    assert turns and all(t.response is not None for t in turns) and any(not t.valid for t in turns)
    # Rounds batch every pending decision: a Kuhn game has at most 3 decisions, so at most 3 play calls.
    assert fake.calls <= 3 + 1


def test_chunked_generation_keeps_order_and_varies_seeds() -> None:
    seen: list[tuple[int, int | None]] = []

    def generate(prompts, params: SamplingParams):
        seen.append((len(prompts), params.seed))
        return [Generation(tuple(p), (), (), str(p[0]), "stop") for p in prompts]

    out = chunked(generate, 4)([[i] for i in range(10)], SamplingParams(seed=5))
    assert [g.text for g in out] == [str(i) for i in range(10)]
    assert [n for n, _ in seen] == [4, 4, 2] and len({s for _, s in seen}) == 3


def test_resolve_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in (1, 3):
        path = run / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        (path / "COMPLETE").write_text(str(step))
    (run / "checkpoints" / "step_5").mkdir()  # an interrupted write
    (run / "config.yaml").write_text("{}")
    assert resolve_checkpoint(run) == (run / "checkpoints" / "step_3", 3, run)
    assert resolve_checkpoint(run / "checkpoints" / "step_1") == (run / "checkpoints" / "step_1", 1, run)
    bare = tmp_path / "model"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    assert resolve_checkpoint(bare) == (bare, None, None)
    (run / "checkpoints" / "step_5" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="incomplete"):
        resolve_checkpoint(run / "checkpoints" / "step_5")
