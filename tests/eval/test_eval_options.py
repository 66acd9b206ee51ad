"""`strat eval` for any model: --depth, --game-option, --max-new-tokens, --temperature and --samples-per-infoset
reach the prompts and the engine for a bare model directory; a run directory supplies its own as defaults, and
options given override them; the backend defaults to vLLM where it is installed."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import typer
from transformers import AutoTokenizer
from typer.testing import CliRunner

import games
from strat.cli.eval import eval_command
from strat.config import save_resolved
from strat.config_loading import load_config
from strat.engines.base import SamplingParams
from strat.errors import ConfigError
from strat.eval.policies import LLMPolicy, ReasoningOverrides, load_policy
from strat.play.rollout import llm_move


def _args(**kwargs) -> dict:
    args = {"policy": None, "game": None, "opponents": ["random"], "games_per_opponent": 3, "out": None,
            "samples_per_infoset": None, "bootstrap": 20, "seed": 0, "backend": "hf", "transcripts": 1,
            "head_to_head_policies": None, "depth": None, "game_option": None, "max_new_tokens": None,
            "temperature": None}
    args.update(kwargs)
    return args


def _eval(**kwargs) -> dict:
    out = eval_command(**_args(**kwargs))
    return json.loads((out / "eval.json").read_text())


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose config is off the defaults in every setting eval takes from it."""
    run = tmp_path_factory.mktemp("runs") / "shallow"
    shutil.copytree(tiny_model_dir, run / "checkpoints" / "step_1")
    (run / "checkpoints" / "step_1" / "COMPLETE").write_text("1")
    config = load_config(None, [f"model.path={tiny_model_dir}", "run.name=shallow", "reasoning.depth=1",
                                "reasoning.max_new_tokens=6", "reasoning.temperature=0.7", "eval.samples_per_infoset=1"])
    save_resolved(config, run)
    return run


def test_a_bare_model_directory_plays_with_the_options_given(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = _eval(policy=str(tiny_model_dir), game="kuhn_poker", out=tmp_path, depth=1, game_option=["players=3"],
                 max_new_tokens=5, temperature=0.5)
    assert data["game_options"] == {"players": 3}
    (match,) = data["matches"]
    assert match["games"] == 3 and len(match["seat_returns"]) == 3, "one deal with the model in each of 3 seats"
    (info,) = data["policies"]
    assert (info["depth"], info["max_new_tokens"], info["temperature"]) == (1, 5, 0.5)
    assert data["exploitability"] is None, "three-player Kuhn poker has no exploitability"


def test_the_options_reach_the_prompt_and_the_engine(tiny_model_dir: Path) -> None:
    overrides = ReasoningOverrides(depth=1, max_new_tokens=5, temperature=0.5)
    policy = load_policy(str(tiny_model_dir), "kuhn_poker", {"players": 3}, backend="hf", overrides=overrides)
    assert isinstance(policy, LLMPolicy)
    sent: list[SamplingParams] = []
    generate = policy.generate
    policy.generate = lambda prompts, params: sent.append(params) or generate(prompts, params)
    env = games.make("kuhn_poker", players=3)
    env.reset(seed=0)
    try:
        move = llm_move(policy.player(0), env, random.Random(0), seed=0)
    finally:
        policy.close()
    prompt = AutoTokenizer.from_pretrained(tiny_model_dir).decode(move.prompt_token_ids)
    assert "<past>...</past>\n<plan>...</plan>\n<predict>" in prompt and "their_view" not in prompt, "depth 1"
    assert "Kuhn poker for 3 players" in prompt
    assert [(p.max_tokens, p.temperature) for p in sent] == [(5, 0.5)]
    assert 1 <= len(move.response_token_ids) <= 5


def test_a_run_directory_supplies_the_defaults_and_options_override_them(run_dir: Path, tmp_path: Path) -> None:
    data = _eval(policy=str(run_dir), out=tmp_path / "run")
    (info,) = data["policies"]
    assert (info["depth"], info["max_new_tokens"], info["temperature"]) == (1, 6, 0.7)
    assert data["exploitability"]["samples_per_infoset"] == 1
    data = _eval(policy=str(run_dir), out=tmp_path / "given", depth=0, max_new_tokens=4, temperature=1.5,
                 samples_per_infoset=2)
    (info,) = data["policies"]
    assert (info["depth"], info["max_new_tokens"], info["temperature"]) == (0, 4, 1.5)
    assert data["exploitability"]["samples_per_infoset"] == 2


def test_the_backend_defaults_to_vllm_where_installed(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, tmp_path: Path
) -> None:
    import importlib.util

    from strat import engines

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else found(name, *a))
    assert engines.default_backend() == "hf"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else found(name, *a))
    assert engines.default_backend() == "vllm"
    monkeypatch.undo()
    monkeypatch.setattr(engines, "default_backend", lambda: "hf")
    data = _eval(policy=str(run_dir), out=tmp_path, backend=None, samples_per_infoset=0)
    assert data["policies"][0]["backend"] == "hf"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"game_option": ["players"]}, "--game-option 'players': expected key=value"),
        ({"game_option": ["a.b=1"]}, "--game-option 'a.b=1': expected key=value with a plain value"),
        ({"game_option": ["colour=red"]}, "--game-option: .*unknown option"),
        ({"policy": "TINY", "game_option": ["colour=red"]}, "game.options=.*unknown option"),
        ({"policy": "TINY", "temperature": 0.0}, "reasoning.temperature=0.0"),
    ],
)
def test_bad_options_are_one_line(tiny_model_dir: Path, tmp_path: Path, kwargs: dict, message: str) -> None:
    policy = str(tiny_model_dir) if kwargs.pop("policy", None) == "TINY" else "random"
    with pytest.raises(ConfigError, match=message) as caught:
        _eval(policy=policy, game="kuhn_poker", out=tmp_path, **kwargs)
    assert "\n" not in str(caught.value)


def test_the_options_parse_on_the_command_line(tmp_path: Path) -> None:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("eval")(eval_command)
    app.command("noop")(lambda: None)  # two commands, so that "eval" is a subcommand as in strat
    args = ["eval", "--policy", "random", "--game", "kuhn_poker", "--opponents", "heuristic", "--games", "3",
            "--game-option", "players=3", "--depth", "1", "--max-new-tokens", "4", "--temperature", "0.5",
            "--samples-per-infoset", "0", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "eval.json").read_text())
    assert data["game_options"] == {"players": 3} and len(data["matches"][0]["seat_returns"]) == 3
    assert CliRunner().invoke(app, [*args[:-2], "--depth", "3"]).exit_code == 2, "depth is 0, 1 or 2"


@pytest.mark.parametrize(("game", "penalty"), [("kuhn_poker", -3.0), ("leduc_poker", -14.0)])
def test_a_bare_model_gets_a_format_penalty_valid_for_its_game(tiny_model_dir: Path, game: str, penalty: float) -> None:
    """A model directory (or Hub name) has no run config: its penalty is one below the game's worst legal return
    (Kuhn -2, Leduc -13), not Kuhn's default, which Leduc's config check refuses."""
    policy = load_policy(str(tiny_model_dir), game, backend="hf")
    try:
        assert isinstance(policy, LLMPolicy) and policy.info.format_penalty == penalty
    finally:
        policy.close()
