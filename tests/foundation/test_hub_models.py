"""Hub names as model paths, offline: a local Hugging Face cache (its real layout) holds two revisions of a tiny
model, `org/tiny`. The default branch and a pinned revision load different weights; a loaded config pins the
name to its commit, and check, train (hf and vLLM), eval and play load it. A name the cache lacks is refused in
one line."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from strat import cli, metrics
from strat.cluster import jobs
from strat.config_loading import load_config
from strat.engines import SamplingParams, build_engine
from strat.model import hub
from strat.play.settings import engine_settings
from strat.train.settings import base_model_path, warm_start_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
FIRST = hashlib.sha1(b"first revision").hexdigest()
SECOND = hashlib.sha1(b"second revision").hexdigest()
PROMPT = [{"role": "user", "content": "You hold the King. Legal actions: pass, bet"}]
TRAIN = ["run.name=hub", "warm_start.enabled=false", "schedule.steps=2", "schedule.eval_every=0",
         "schedule.checkpoint_every=2", "algorithm.group_size=2", "algorithm.groups_per_step=2",
         "reasoning.max_new_tokens=16", "game.opponents=[{kind: self}]", "logging.tensorboard=false"]
"""A 2-step `strat train` (to `run.output_dir`/hub) on the model path and engine given."""
NO_WARM_START = ["warm_start.enabled=false"]
"""The Kuhn config warm-starts its tiny model; a Hub model must name its own warm-start lr, or go without."""


def add_revision(cache: Path, repo_id: str, source: Path, commit: str) -> Path:
    """`source`'s files as revision `commit` of `repo_id`: content-addressed blobs, a snapshot of symlinks."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(source.iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def set_ref(cache: Path, repo_id: str, ref: str, commit: str) -> None:
    refs = cache / f"models--{repo_id.replace('/', '--')}" / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / ref).write_text(commit)


@pytest.fixture(scope="module")
def hf_home(tiny_model_dir: Path, other_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """HF_HOME with `org/tiny` at two revisions: FIRST (seed 0 weights), then SECOND (seed 1), which main points at."""
    home = tmp_path_factory.mktemp("hf_home")
    add_revision(home / "hub", "org/tiny", tiny_model_dir, FIRST)
    add_revision(home / "hub", "org/tiny", other_model_dir, SECOND)
    set_ref(home / "hub", "org/tiny", "main", SECOND)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(home))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.delenv("HF_HUB_CACHE", raising=False)
        yield home


def _greedy(model_dir: Path) -> tuple[int, ...]:
    with build_engine("hf", model_dir) as engine:
        return engine.generate_chat([PROMPT], SamplingParams(max_tokens=12, temperature=0))[0].token_ids


def test_main_and_a_pinned_revision_load_their_own_weights(hf_home: Path, tiny_model_dir: Path) -> None:
    snapshots = hf_home / "hub" / "models--org--tiny" / "snapshots"
    assert hub.local_dir("org/tiny") == snapshots / SECOND
    assert hub.local_dir(f"org/tiny@{FIRST}") == snapshots / FIRST
    default = load_config(DEFAULT, [*NO_WARM_START, "model.path=org/tiny"])
    first = load_config(DEFAULT, [*NO_WARM_START, f"model.path=org/tiny@{FIRST}"])
    assert (default.model.path, first.model.path) == (f"org/tiny@{SECOND}", f"org/tiny@{FIRST}")
    assert load_config(DEFAULT, [*NO_WARM_START, "model.path=org/tiny@main"]).model.path == f"org/tiny@{SECOND}"
    greedy_first = _greedy(base_model_path(first))
    assert greedy_first == _greedy(tiny_model_dir)  # the first revision's weights are the seed-0 model's
    assert _greedy(base_model_path(default)) != greedy_first


def test_a_warm_start_on_a_hub_model_needs_its_own_learning_rate(hf_home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(DEFAULT), "model.path=org/tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("strat: error: warm_start.lr:") and "warm_start.lr=1e-5" in err
    assert load_config(DEFAULT, ["model.path=org/tiny", "warm_start.lr=1e-5"]).warm_start.lr == 1e-5
    assert load_config(DEFAULT).warm_start.lr is None  # the tiny model keeps the default, 1e-2
    assert warm_start_settings(load_config(DEFAULT)).lr == 1e-2


def test_check_works_offline_from_the_cache(hf_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(DEFAULT), *NO_WARM_START, "model.path=org/tiny"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"]["path"] == f"org/tiny@{SECOND}"


@pytest.mark.parametrize("name", ["org/missing", f"org/tiny@{'0' * 40}"])
def test_a_name_the_cache_lacks_is_refused_in_one_line(hf_home: Path, capsys: pytest.CaptureFixture[str],
                                                        name: str) -> None:
    assert cli.main(["check", str(DEFAULT), f"model.path={name}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"strat: error: model.path={name!r}")
    assert "hf download org/" in err and "HF_HOME" in err and "log in" in err


def test_a_submitted_job_gets_the_revision_pinned(hf_home: Path) -> None:
    config, notes = jobs.validate(DEFAULT, [*NO_WARM_START, "model.path=org/tiny"])
    assert notes == ()
    assert jobs.pinned_overrides(config, ["model.path=org/tiny"])[-1] == f"model.path=org/tiny@{SECOND}"
    assert "HF_HUB_OFFLINE" not in jobs.runtime_env("none", None, None, {})["env_vars"]
    config, notes = jobs.validate(DEFAULT, [*NO_WARM_START, "model.path=org/elsewhere"])  # resolved on the cluster
    assert "org/elsewhere" in notes[0] and jobs.pinned_overrides(config, []) == []


def test_eval_takes_a_hub_name_and_writes_to_a_folder_named_after_it(
    hf_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = CliRunner().invoke(cli.app, ["eval", "--help"], env={"COLUMNS": "300"})
    assert "Hugging Face Hub name (org/name or org/name@revision" in shown.output
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", "--policy", "org/tiny", "--game", "kuhn_poker", "--opponents", "random", "--games", "2",
                     "--samples-per-infoset", "0", "--backend", "hf"]) == 0
    # One folder for the pinned name, not org/ holding tiny@<commit>/.
    assert [path.relative_to(tmp_path) for path in tmp_path.glob("eval/*/*")] == [
        Path("eval", "kuhn_poker", f"org--tiny--{SECOND}")]
    report = json.loads((tmp_path / "eval" / "kuhn_poker" / f"org--tiny--{SECOND}" / "eval.json").read_text())
    assert report["policies"][0]["name"] == f"org/tiny@{SECOND}"


@pytest.mark.slow
def test_train_eval_and_play_load_it(hf_home: Path, tmp_path: Path) -> None:
    overrides = [*TRAIN, f"run.output_dir={tmp_path}", "model.path=org/tiny", "engine.backend=hf"]
    assert cli.main(["train", str(DEFAULT), *overrides]) == 0
    run_dir = tmp_path / "hub"
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["path"] == f"org/tiny@{SECOND}"
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    # The default branch moves on: the run's config still loads the revision it trained from (as a resume does).
    set_ref(hf_home / "hub", "org/tiny", "main", FIRST)
    try:
        assert load_config(run_dir / "config.yaml").model.path == f"org/tiny@{SECOND}"
        assert load_config(DEFAULT, [*NO_WARM_START, "model.path=org/tiny"]).model.path == f"org/tiny@{FIRST}"
    finally:
        set_ref(hf_home / "hub", "org/tiny", "main", SECOND)

    out = tmp_path / "eval"
    assert cli.main(["eval", "--policy", f"org/tiny@{FIRST}", "--game", "kuhn_poker", "--opponents", "random",
                     "--games", "2", "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert f"org/tiny@{FIRST}" in json.dumps(report)

    played = CliRunner().invoke(cli.app, ["play", "--game", "kuhn_poker", "--opponent", "org/tiny", "--seat", "1",
                                          "--seed", "2"], input="pass\nbet\npass\n")
    assert played.exit_code == 0, played.output
    assert "Your return:" in played.output


@pytest.mark.long
def test_a_vllm_run_loads_the_revision_it_names(hf_home: Path, tmp_path: Path) -> None:
    """The agents' vLLM engines hold the named revision's weights, not main's: the weights every version-0 rollout
    ran on (the episode ledger's fingerprint of the agent's engine) are those of a fresh vLLM engine on its files."""
    set_ref(hf_home / "hub", "org/tiny", "first", FIRST)  # a branch other than main, pinned to its commit
    overrides = [*TRAIN, f"run.output_dir={tmp_path}", "model.path=org/tiny@first", "engine.backend=vllm"]
    assert cli.main(["train", str(DEFAULT), *overrides]) == 0
    config = load_config(tmp_path / "hub" / "config.yaml")
    assert config.model.path == f"org/tiny@{FIRST}"
    assert [record["step"] for record in metrics.read(config.run_dir)] == [1, 2]
    with build_engine("vllm", hf_home / "hub" / "models--org--tiny" / "snapshots" / FIRST,
                      engine_settings(config)) as engine:
        expected = engine.weights_fingerprint()
    ledger = metrics.read_ledger(config.run_dir)
    assert {fingerprint for line in ledger for version, fingerprint in line["weights"] if version == 0} == {expected}
