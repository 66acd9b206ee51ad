"""Adding a game touches only `games/` and a config: a game defined in the tests folder (misère Nim, which Strat does
not ship) is registered, `strat check` accepts a config for it, and one training step runs on it (a tiny model built
from its text, hf engine, self-play rollout, comparison, advantages, one update), with nothing under `strat/`
changed. Installed as a package would install it (its `strat.games` entry point), it reaches every Ray actor of
`strat train`."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nim_game  # this folder is on sys.path (no __init__.py: `games` is the package under test)
import pytest

import games
from strat import cli
from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.config_loading import load_config
from strat.engines import build_engine
from strat.play.rollout import RolloutRunner, plan_groups
from strat.play.settings import rollout_settings
from strat.train.learner import PolicyLearner
from strat.train.settings import advantage_config, base_model_path, learner_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nim() -> Iterator[None]:
    """Nim registered as a user's module registers it, for one test (the other tests expect the shipped games)."""
    games.register(nim_game.NimEnv)
    yield
    del games.registry._GAMES["nim"]


CONFIG = """\
run: {name: nim_tiny, seed: 0}
model: {path: "tiny:nim"}
engine: {backend: hf}
game:
  name: nim
  opponents: [{kind: self}]
reasoning: {depth: 2, max_new_tokens: 48}
algorithm: {group_size: 2, groups_per_step: 2, micro_batch: 8}
schedule: {steps: 1, eval_every: 0}
"""


def test_the_game_plays_by_the_rules(nim: None) -> None:
    assert "nim" in games.names()
    env = games.make("nim")
    env.reset(seed=0)
    rng = random.Random(0)
    for agent in env.turns():
        action = rng.choice(env.legal_actions(agent))
        assert env.parse_action(f"I will {env.action_name(action, agent)}.", agent) == action
        env.step(action)
    returns = env.returns()
    assert sorted(returns.values()) == [-1.0, 1.0]
    assert returns == dict(zip(env.possible_agents, env.pyspiel_state.returns(), strict=True))
    assert games.spec("nim").exploitable is False and games.belief_values("nim") is None
    with pytest.raises(ValueError, match="registered already"):
        games.register(type("OtherNim", (nim_game.NimEnv,), {}))


def test_strat_check_accepts_a_config_for_it(nim: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "nim_tiny.yaml"
    config.write_text(CONFIG)
    assert cli.main(["check", str(config)]) == 0
    assert "name: nim" in capsys.readouterr().out


@pytest.mark.slow
def test_one_training_step_on_it(nim: None, tmp_path: Path) -> None:
    config_file = tmp_path / "nim_tiny.yaml"
    config_file.write_text(CONFIG)
    config = load_config(config_file, [f"run.output_dir={tmp_path}"])
    model_dir = base_model_path(config)  # the tiny model, its tokenizer trained on Nim's own text
    settings = rollout_settings(config)
    with build_engine("hf", model_dir) as engine:
        runner = RolloutRunner(settings, engine.encode_chat, engine.generate, snapshot=engine.generate)
        episodes = runner.run(plan_groups(settings, config.run.seed, 1, 0, config.algorithm.groups_per_step), 3)
    assert len(episodes) == 4 and all(e.game == "nim" for e in episodes)
    assert all(turn.response is not None for e in episodes for turn in e.turns)
    scored = score_episodes(episodes, ComparisonWeights())
    samples, _ = compute_advantages(scored, advantage_config(config))
    figures = PolicyLearner(model_dir, learner_settings(config)).update(samples)
    assert figures["learn/samples"] == len(samples) > 0
    assert figures["learn/tokens"] > 0 and math.isfinite(figures["loss/policy"])


def _install_nim(site: Path) -> None:
    """Nim as a user's installed package: its module, and metadata naming its env under the `strat.games` entry points
    (what `[project.entry-points."strat.games"] nim = "installed_nim:NimEnv"` in its pyproject installs)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "installed_nim.py").write_text(Path(nim_game.__file__).read_text())
    info = site / "installed_nim-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-nim\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[strat.games]\nnim = installed_nim:NimEnv\n")


def test_an_installed_game_is_found_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_nim(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(games.registry, "_installed_loaded", False)
    try:
        assert "nim" in games.names()
        assert type(games.make("nim")).__module__ == "installed_nim", "loaded from the installed package"
    finally:
        games.registry._GAMES.pop("nim", None)
        sys.modules.pop("installed_nim", None)


@pytest.mark.long
def test_strat_train_with_ray_on_an_installed_game(tmp_path: Path) -> None:
    """`strat train` (Ray actors, hf engine, two steps) in a process that knows Nim only through its entry point: the
    rollout workers play Nim, and the learner updates on it."""
    _install_nim(tmp_path / "site")
    config = tmp_path / "nim_tiny.yaml"
    config.write_text(CONFIG)
    path = [str(tmp_path / "site"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    result = subprocess.run(
        [sys.executable, "-m", "strat.cli", "train", str(config), f"run.output_dir={tmp_path / 'runs'}",
         "schedule.steps=2", "schedule.checkpoint_every=2", "logging.samples_every=1"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, capture_output=True, text=True, timeout=900, check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    run = tmp_path / "runs" / "nim_tiny"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [record for record in records if record["step"] >= 1]
    assert [record["step"] for record in trained] == [1, 2]
    assert all(record["episodes/count"] == 4 and record["learn/samples"] > 0 for record in trained)
    assert all(math.isfinite(record["loss/policy"]) for record in trained)
    transcript = (run / "samples" / "step_1.md").read_text()
    assert "from pile" in transcript, "the rollout workers played Nim's moves"
    assert (run / "checkpoints" / "step_2" / "COMPLETE").is_file()
