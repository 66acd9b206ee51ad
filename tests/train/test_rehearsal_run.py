"""DPH-RL in a training run on a local Ray node: the rehearsal samples are drawn and stored at the start, every
update logs loss/dph, a resume reuses the stored file unchanged, and a changed file stops the resume."""

import json
from pathlib import Path

import pytest

from strat import metrics
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train import rehearsal
from strat.train.trainer import Trainer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "engine.backend=hf", "warm_start.enabled=false", "algorithm.groups_per_step=2", "algorithm.group_size=2",
    "reasoning.max_new_tokens=16", "resources.rollout_workers=1", "schedule.eval_every=0",
    "schedule.checkpoint_every=1", "schedule.max_staleness=0", "game.opponents=[{kind: self}]",
    "algorithm.dph_divergence=js", "algorithm.dph_eta=0.5", "algorithm.dph_samples=6", "algorithm.dph_batch=4",
]



def test_run_stores_rehearsal_logs_dph_and_resumes_with_the_same_file(
    local_ray, tmp_path: Path, tiny_model_dir: Path
) -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml",
                         [f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", *SMALL, "schedule.steps=1"])
    run_dir = config.run_dir
    Trainer(config, run_dir).run()
    stored = (run_dir / rehearsal.SAMPLES_FILE).read_bytes()
    assert json.loads((run_dir / rehearsal.RECORD_FILE).read_text())["samples"] == 6

    resumed = load_config(run_dir / "config.yaml", ["schedule.steps=2"])
    Trainer(resumed, run_dir, resume=True).run()
    records = metrics.read(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["loss/dph"] > 0 and record["time/dph_s"] > 0
    assert (run_dir / rehearsal.SAMPLES_FILE).read_bytes() == stored  # reused, not drawn again

    (run_dir / rehearsal.SAMPLES_FILE).write_bytes(stored[:-4] + bytes(4))
    again = load_config(run_dir / "config.yaml", ["schedule.steps=3"])
    with pytest.raises(ConfigError, match="changed since the run's start"):
        Trainer(again, run_dir, resume=True).run()
