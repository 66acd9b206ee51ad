"""Rules pretraining (`strat pretrain`, `pretrain.enabled`): the chat each corpus example becomes, a short fit that
lowers the loss and writes a loadable model, the cache, the config's checks, and its place before the warm start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import games
from games.rules_corpus import RulesExample
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train import pretrain as pretrain_module
from strat.train.pretrain import (
    PRETRAIN_INFO,
    PretrainSettings,
    ensure_pretrained,
    pretrain,
    pretrain_examples,
    rules_messages,
)
from strat.train.settings import pretrain_settings
from strat.train.trainer import Trainer

GAME = "kuhn_poker"


def test_an_example_is_the_rules_then_the_view_as_prompts_show_it_then_the_question() -> None:
    example = RulesExample(kind="legal_moves", observation="Your card: K.", history="", question="Which moves are"
                           " legal now?", answer="check, bet")
    system, user = rules_messages("Rules text.", example)
    assert system == {"role": "system", "content": "Rules:\nRules text."}
    assert user == {"role": "user", "content": "Your card: K.\n\nHistory:\nNo moves yet.\n\nWhich moves are legal now?"}


def test_the_corpus_follows_the_settings() -> None:
    settings = PretrainSettings(examples=12, kinds=("legal_moves",))
    examples = pretrain_examples(GAME, settings)
    assert len(examples) == 12
    rules = games.make(GAME).rules()
    assert all(messages[0]["content"] == f"Rules:\n{rules}" for messages, _ in examples)
    assert all(messages[1]["content"].endswith("Which moves are legal now?") for messages, _ in examples)
    assert pretrain_examples(GAME, settings) == examples  # deterministic for a seed
    with pytest.raises(ValueError, match="unknown"):
        PretrainSettings(kinds=("strategy",))


def test_pretraining_lowers_the_loss_and_writes_a_loadable_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "pretrained"
    figures = pretrain(tiny_model_dir, out, GAME, PretrainSettings(examples=32, epochs=2, batch_size=8))
    assert figures["examples"] == 32 and figures["steps"] == 8
    assert figures["final_loss"] < figures["first_loss"]
    info = json.loads((out / PRETRAIN_INFO).read_text())
    assert info["game"] == GAME and info["settings"]["examples"] == 32
    trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.equal(trained[name], base[name]) for name in base)
    assert [p.name for p in tmp_path.iterdir()] == ["pretrained"]  # no staging folder left behind


def test_the_pretrained_model_is_cached_by_model_and_settings(tiny_model_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAT_CACHE_DIR", str(tmp_path / "cache"))
    trained: list[Path] = []

    def fake_train(model_dir: Path, out_dir: Path, game: str, settings: PretrainSettings, examples: list) -> dict:
        trained.append(out_dir)
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        return {}

    monkeypatch.setattr(pretrain_module, "_train", fake_train)
    settings = PretrainSettings(examples=8)
    first = ensure_pretrained(tiny_model_dir, GAME, settings)
    assert ensure_pretrained(tiny_model_dir, GAME, settings) == first and len(trained) == 1
    assert first.parent == tmp_path / "cache" / "pretrained" and first.name.startswith(f"{GAME}-")
    other = ensure_pretrained(tiny_model_dir, GAME, PretrainSettings(examples=8, seed=1))
    assert other != first and len(trained) == 2


def test_the_config_refuses_a_kind_the_game_does_not_ask_and_a_hub_model_without_a_rate() -> None:
    with pytest.raises(ConfigError, match="pretrain.kinds: 'own_info' is not asked in tic_tac_toe"):
        load_config("configs/tic_tac_toe_tiny.yaml", ["pretrain.enabled=true", "pretrain.kinds=[own_info]"])
    resolved = load_config("configs/kuhn_poker_tiny.yaml", ["pretrain.enabled=true", "pretrain.kinds=[posterior]"])
    assert pretrain_settings(resolved).kinds == ("posterior",)
    assert pretrain_settings(resolved).lr == 1e-3  # the tiny models' rate where unset


def fake_stages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path]]:
    """Stages that record what they were given: a base model, its pretraining, its warm start."""
    import strat.train.stages as stages
    import strat.train.warmstart as warmstart

    calls: list[tuple[str, Path]] = []
    monkeypatch.setattr(stages, "base_model_path", lambda config: Path("/models/base"))
    monkeypatch.setattr(stages, "ensure_pretrained",
                        lambda base, game, settings: calls.append(("pretrain", base)) or Path("/models/pretrained"))
    warm = (lambda base, game, settings: calls.append(("warm", base)) or Path("/models/warm"))  # noqa: E731
    monkeypatch.setattr(stages, "ensure_warm", warm)
    monkeypatch.setattr(warmstart, "ensure_warm", warm)
    return calls


def test_the_run_starts_from_the_warm_start_of_the_pretrained_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_stages(monkeypatch)
    config = load_config("configs/kuhn_poker_tiny.yaml", ["pretrain.enabled=true"])
    assert Trainer.initial_model_path(config) == Path("/models/warm")
    assert calls == [("pretrain", Path("/models/base")), ("warm", Path("/models/pretrained"))]
    calls.clear()
    assert Trainer.initial_model_path(load_config("configs/kuhn_poker_tiny.yaml", [])) == Path("/models/warm")
    assert calls == [("warm", Path("/models/base"))]  # off by default


def test_strat_pretrain_writes_the_stage_where_out_says(tiny_model_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from strat.cli import app

    out = tmp_path / "pretrained"
    args = ["pretrain", "configs/kuhn_poker_tiny.yaml", f"model.path={tiny_model_dir}", "pretrain.examples=16",
            "pretrain.batch_size=8", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"rules-pretrained model written to {out}: " in result.output and "final_loss=" in result.output
    assert json.loads((out / PRETRAIN_INFO).read_text())["settings"]["examples"] == 16


def test_strat_sft_warm_starts_the_pretrained_model_when_pretraining_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from strat.cli import app

    calls = fake_stages(monkeypatch)
    result = CliRunner().invoke(app, ["sft", "configs/kuhn_poker_tiny.yaml", "pretrain.enabled=true"])
    assert result.exit_code == 0, result.output
    assert calls == [("pretrain", Path("/models/base")), ("warm", Path("/models/pretrained"))]
    assert "warm-started model: /models/warm" in result.output


def test_strat_sft_shows_the_stages_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user waiting on `strat sft` sees the stage's log lines (its size, its progress) as it runs, and the handler
    is gone afterwards."""
    import logging

    from typer.testing import CliRunner

    import strat.train.stages as stages
    import strat.train.warmstart as warmstart
    from strat.cli import app

    def logging_warm(base: Path, game: str, settings: object) -> Path:
        logging.getLogger("strat.supervised").info("warm start of %s: step 3 of 9, loss 0.5", game)
        return Path("/models/warm")

    fake_stages(monkeypatch)
    monkeypatch.setattr(stages, "ensure_warm", logging_warm)
    monkeypatch.setattr(warmstart, "ensure_warm", logging_warm)
    handlers = list(logging.getLogger("strat").handlers)
    result = CliRunner().invoke(app, ["sft", "configs/kuhn_poker_tiny.yaml"])
    assert result.exit_code == 0, result.output
    assert "warm start of kuhn_poker: step 3 of 9, loss 0.5" in result.output
    assert "warm-started model: /models/warm" in result.output
    assert logging.getLogger("strat").handlers == handlers
