"""`strat train --resume RUN_DIR key=value`: allowed changes are applied, written to config.yaml and recorded with
the step they apply after; a change of model, game, depth, group shape or any key off the allowed list is refused in
one line naming the key, before anything starts, with the run directory untouched."""

from pathlib import Path

import pytest

from strat import cli
from strat.config import save_resolved
from strat.config_loading import load_config
from strat.train import trainer
from strat.train.resume import OverrideChange, ResumeOverrides, read_overrides

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"


@pytest.fixture
def run_dir(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A run directory as a run stopped after step 3 leaves it: config.yaml and a complete checkpoint marker (what
    resume looks for; the weights are never read here)."""
    config = load_config(DEFAULT, [f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", "schedule.steps=4",
                                   "algorithm.lr=0.0003", "engine.backend=vllm", "eval.games=400"])
    save_resolved(config, config.run_dir)
    marker = config.run_dir / "checkpoints" / "step_3"
    marker.mkdir(parents=True)
    (marker / "COMPLETE").write_text("3")
    return config.run_dir


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list:
    """The configs runs were started with; the run itself is skipped (its loop has tests of its own)."""
    configs = []

    def run(self, on_step=None):
        configs.append(self.config)
        return []

    monkeypatch.setattr(trainer.Trainer, "run", run)
    return configs


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_allowed_overrides_are_applied_written_and_recorded_with_their_step(run_dir: Path, started: list) -> None:
    overrides = ["schedule.steps=6", "algorithm.lr=0.0001", "engine.backend=hf", "eval.games=50",
                 "reasoning.depth=1", "game.name=kuhn_poker", "game.opponents.0.weight=0.6"]
    # the last three keep the saved values (the third by a list index): no change
    trainer.train(None, overrides, resume=str(run_dir))
    [config] = started
    assert (config.schedule.steps, config.algorithm.lr, config.engine.backend, config.eval.games) == (6, 1e-4, "hf", 50)
    saved = load_config(run_dir / "config.yaml")
    assert saved == config, "config.yaml holds the values the run continues with"
    expected = ResumeOverrides(3, (
        OverrideChange("schedule.steps", 4, 6),
        OverrideChange("algorithm.lr", 3e-4, 1e-4),
        OverrideChange("engine.backend", "vllm", "hf"),
        OverrideChange("eval.games", 400, 50),
    ))
    assert read_overrides(run_dir) == [expected]

    # A later resume (after step 5) appends; one that changes nothing writes nothing.
    (run_dir / "checkpoints" / "step_5").mkdir()
    (run_dir / "checkpoints" / "step_5" / "COMPLETE").write_text("5")
    trainer.train(None, ["schedule.steps=6"], resume=str(run_dir))
    assert read_overrides(run_dir) == [expected]
    trainer.train(None, ["schedule.steps=8", "resources.rollout_workers=2"], resume=str(run_dir))
    assert read_overrides(run_dir)[1] == ResumeOverrides(5, (
        OverrideChange("schedule.steps", 6, 8), OverrideChange("resources.rollout_workers", 1, 2)))
    assert load_config(run_dir / "config.yaml").schedule.steps == 8


@pytest.mark.parametrize(("override", "named", "says"), [
    ("model.path=tiny:leduc_poker", "model.path", "keeps its model"),
    ("game.name=leduc_poker", "game.name", "keeps its game"),
    ("game.options.players=3", "game.options.players", "keeps its game"),
    ("reasoning.depth=2", "reasoning.depth", "keeps its reasoning depth"),
    ("algorithm.group_size=4", "algorithm.group_size", "keeps its group shape"),
    ("algorithm.groups_per_step=2", "algorithm.groups_per_step", "keeps its group shape"),
    ("algorithm.clip_eps_low=0.1", "algorithm.clip_eps_low", "cannot change on resume"),
    ("run.seed=7", "run.seed", "cannot change on resume"),
])
def test_other_changes_are_refused_in_one_line_leaving_the_run_untouched(
    capsys, run_dir: Path, started: list, override: str, named: str, says: str
) -> None:
    before = _snapshot(run_dir)
    code = cli.main(["train", "--resume", str(run_dir), "schedule.steps=9", override])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith(f"strat: error: {named}: ") and says in last
    if says == "cannot change on resume":
        assert last.endswith("(allowed: schedule.*, eval.*, logging.*, resources.*, engine.*, algorithm.lr)")
    assert started == [], "refused before the run started"
    assert _snapshot(run_dir) == before
