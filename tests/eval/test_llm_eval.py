"""`strat eval` on a checkpoint of the tiny model (random weights: every move is a fallback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strat.cli.eval import eval_command
from strat.errors import ConfigError


def _args(**kwargs) -> dict:
    args = dict(policy=None, game=None, opponents=["random"], games_per_opponent=4, out=None, samples_per_infoset=2,
                bootstrap=20, seed=0, backend="hf", transcripts=1, head_to_head_policies=None)
    args.update(kwargs)
    return args


def test_eval_of_a_run_directory(tiny_run_dir: Path, tmp_path: Path) -> None:
    out = eval_command(**_args(policy=str(tiny_run_dir), out=tmp_path))
    data = json.loads((out / "eval.json").read_text())
    (info,) = data["policies"]
    assert info["kind"] == "llm" and info["step"] == 2 and info["name"] == "tiny@2"
    assert (info["depth"], info["max_new_tokens"], info["backend"]) == (2, 8, "hf")
    assert data["game"] == "kuhn_poker"
    assert data["validity"]["value"] == 0.0 and data["validity"]["high"] > 0, "garbage output, honest interval"
    # 8 new tokens of random weights rarely reach an end: the report says the responses were cut off
    assert data["truncated"]["value"] >= 0.5
    assert any("limit of 8 new tokens" in note and "--max-new-tokens" in note for note in data["notes"])
    e = data["exploitability"]
    assert not e["exact"] and e["samples_per_infoset"] == 2 and e["ci_low"] <= e["value"] <= e["ci_high"]
    assert data["cot"]["predict"]["value"] == 0.0
    assert data["matches"][0]["games"] == 4
    html = (out / "transcripts.html").read_text()
    assert "invalid: fallback played" in html and "raw response" in html
    assert "learning_curves.png" in data["files"] and (out / "learning_curves.png").stat().st_size > 1000
    assert not any("matplotlib" in note for note in data["notes"])


def test_default_output_goes_into_the_run(tiny_run_dir: Path) -> None:
    checkpoint = tiny_run_dir / "checkpoints" / "step_2"
    out = eval_command(**_args(policy=str(checkpoint), samples_per_infoset=0))
    assert out == tiny_run_dir / "eval" / "step_2"
    data = json.loads((out / "eval.json").read_text())
    assert data["exploitability"] is None and any("exploitability skipped" in n for n in data["notes"])


def test_checkpoint_against_a_scripted_policy_head_to_head(tiny_run_dir: Path, tmp_path: Path) -> None:
    out = eval_command(**_args(head_to_head_policies=[f"{tiny_run_dir},random"], out=tmp_path))
    data = json.loads((out / "eval.json").read_text())
    assert data["head_to_head"]["policies"] == ["tiny@2", "random"]
    assert "<dt>past</dt>" in (out / "transcripts.html").read_text(), "the LLM's turns are shown with sections"


def test_wrong_game_for_a_checkpoint(tiny_run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trained on kuhn_poker"):
        eval_command(**_args(policy=str(tiny_run_dir), game="leduc_poker", out=tmp_path))


def test_eval_of_a_run_with_a_co_trained_policy_evaluates_each_policy(tiny_run_dir: Path, tmp_path: Path) -> None:
    """`strat eval --policy RUN` of a run with co-trained policies evaluates the first policy and each co-trained one
    (RUN/policies/NAME), each report in its own folder (OUT/policy, OUT/NAME; by default each in its own run folder);
    `--policy-name` evaluates the named one alone."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    small = run / "policies" / "small"
    shutil.copytree(run / "checkpoints", small / "checkpoints")
    shutil.copy(run / "config.yaml", small / "config.yaml")
    out = eval_command(**_args(policy=str(run), out=tmp_path / "out", samples_per_infoset=0))
    assert out == tmp_path / "out" / "policy"
    checkpoints = {name: json.loads((tmp_path / "out" / name / "eval.json").read_text())["policies"][0]["checkpoint"]
                   for name in ("policy", "small")}
    assert checkpoints == {"policy": str(run / "checkpoints" / "step_2"), "small": str(small / "checkpoints" / "step_2")}
    eval_command(**_args(policy=str(run), samples_per_infoset=0))
    assert (run / "eval" / "step_2" / "eval.json").is_file() and (small / "eval" / "step_2" / "eval.json").is_file()
    alone = eval_command(**_args(policy=str(run), policy_name="small", out=tmp_path / "alone", samples_per_infoset=0))
    assert alone == tmp_path / "alone" and (alone / "eval.json").is_file()
    assert sorted(p.name for p in (tmp_path / "alone").iterdir() if p.is_dir()) == [], "one report, no subfolders"
