"""`strat eval` on scripted policies: exploitability, tables, JSON, head to head, user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strat.cli.eval import eval_command
from strat.errors import ConfigError


def _run(tmp_path: Path, **kwargs) -> tuple[dict, str]:
    args = dict(policy=None, game=None, opponents=None, games_per_opponent=20, out=tmp_path, samples_per_infoset=16,
                bootstrap=50, seed=0, backend="hf", transcripts=1, head_to_head_policies=None)
    args.update(kwargs)
    out = eval_command(**args)
    return json.loads((out / "eval.json").read_text()), (out / "eval.md").read_text()


def test_a_named_weak_player_is_played(tmp_path: Path) -> None:
    data, _ = _run(tmp_path, policy="random", game="kuhn_poker", opponents=["timid,reader"], games_per_opponent=2)
    assert [m["opponent"] for m in data["matches"]] == ["timid", "reader"]


def test_random_on_kuhn(tmp_path: Path) -> None:
    data, markdown = _run(tmp_path, policy="random", game="kuhn_poker")
    exploitability = data["exploitability"]
    assert exploitability["value"] == pytest.approx(0.4583, abs=1e-4) and exploitability["exact"]
    assert exploitability["ci_low"] == exploitability["ci_high"] == exploitability["value"]
    # By default random and the references; the weak players a warm start imitates only when named.
    assert [m["opponent"] for m in data["matches"]] == ["random", "heuristic", "equilibrium"]
    match = data["matches"][1]
    assert match["games"] == 20 and len(match["seat_returns"]) == 2
    assert match["mean_return"]["low"] <= match["mean_return"]["value"] <= match["mean_return"]["high"]
    rates = [match[k]["value"] for k in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0)
    assert [(p["name"], p["kind"], p["checkpoint"]) for p in data["policies"]] == [("random", "scripted", None)]
    assert data["validity"] is None and data["cot"] is None
    assert "transcripts.html" in data["files"] and (tmp_path / "transcripts.html").is_file()
    assert "| heuristic | 20 |" in markdown and "0.4583" in markdown and "exact (12 information sets)" in markdown


def test_equilibrium_on_kuhn_and_random_on_leduc(tmp_path: Path) -> None:
    data, _ = _run(tmp_path / "k", policy="equilibrium", game="kuhn_poker", opponents=["random"], games_per_opponent=2)
    assert data["exploitability"]["value"] < 1e-3
    data, markdown = _run(
        tmp_path / "l", policy="random", game="leduc_poker", opponents=["random"], games_per_opponent=2
    )
    assert data["exploitability"]["value"] == pytest.approx(2.3736, abs=1e-4)
    assert "2.3736" in markdown


def test_games_without_exploitability(tmp_path: Path) -> None:
    data, markdown = _run(tmp_path, policy="heuristic", game="tic_tac_toe", opponents=["random,minimax"],
                          games_per_opponent=4)
    assert data["exploitability"] is None and "Exploitability" not in markdown
    assert [m["opponent"] for m in data["matches"]] == ["random", "minimax"]


def test_head_to_head_payoff_matrix_and_elo(tmp_path: Path) -> None:
    data, markdown = _run(tmp_path, game="kuhn_poker", games_per_opponent=200,
                          head_to_head_policies=["equilibrium,random", "heuristic"])
    h2h = data["head_to_head"]
    assert h2h["policies"] == ["equilibrium", "random", "heuristic"] and h2h["games_per_pair"] == 200
    payoff = h2h["payoff"]
    assert payoff[0][0] is None
    for i in range(3):
        for j in range(3):
            if i != j:
                assert payoff[i][j]["value"] == pytest.approx(-payoff[j][i]["value"])  # zero-sum, same games
    assert payoff[0][1]["low"] > 0, "equilibrium beats random"
    elo = [e["value"] for e in h2h["elo"]]
    assert elo[0] > elo[1] + 50 and elo[2] > elo[1]
    assert sum(elo) / 3 == pytest.approx(1500)
    wins, draws, losses = h2h["outcomes"][0][1]
    assert wins + draws + losses == 100 and (wins, draws, losses) == tuple(reversed(h2h["outcomes"][1][0]))
    assert "## Payoff matrix" in markdown and "## Elo" in markdown
    # Every joint profile, exact between scripted policies: random in both seats is 2 x its exploitability.
    joint = {tuple(p["seats"]): p["estimate"] for p in data["joint"]}
    assert len(joint) == 9 and joint[("random", "random")]["value"] == pytest.approx(0.4583, abs=1e-4)
    assert joint[("equilibrium", "equilibrium")]["value"] < 1e-3 < joint[("equilibrium", "random")]["value"]
    assert "## Joint profiles" in markdown and "| random | " in markdown
    assert "payoff_matrix.png" in data["files"] and (tmp_path / "payoff_matrix.png").stat().st_size > 1000
    assert "matplotlib" not in markdown


def test_output_is_deterministic(tmp_path: Path) -> None:
    first, _ = _run(tmp_path / "a", policy="random", game="kuhn_poker", opponents=["heuristic"])
    second, _ = _run(tmp_path / "b", policy="random", game="kuhn_poker", opponents=["heuristic"])
    assert first["matches"] == second["matches"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(policy="nobody", game="kuhn_poker"), "not a checkpoint or run directory, nor a scripted policy"),
        (dict(policy="random", game="chess"), "unknown game"),
        (dict(policy="random"), "needs --game"),
        (dict(policy="minimax", game="kuhn_poker"),
         "scripted: random, heuristic, contrarian, timid, bully, station, reader, equilibrium"),
        (dict(policy="random", game="kuhn_poker", opponents=["random,minimax"]), "--opponents: minimax"),
        (dict(game="kuhn_poker"), "needs --policy"),
        (dict(game="kuhn_poker", head_to_head_policies=["random"]), "at least two"),
        (dict(policy="random", game="kuhn_poker", backend="tpu"), "--backend='tpu'"),
    ],
)
def test_user_errors_are_one_line(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _run(tmp_path, **kwargs)
    assert "\n" not in str(caught.value)


def test_run_directory_errors(tmp_path: Path) -> None:
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        _run(tmp_path / "out", policy=str(tmp_path / "run"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a run directory"):
        _run(tmp_path / "out", policy=str(tmp_path / "empty"))
