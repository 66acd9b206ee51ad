"""The shipped cluster configs name their models on the Hub: `strat check` accepts each offline once the model is in
the Hugging Face cache, and pins it to the cached commit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from strat import cli
from tests.foundation.test_hub_models import add_revision, set_ref

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs" / "cluster").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_check_accepts_a_cluster_config_offline_from_the_cache(
        config: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    name = yaml.safe_load(config.read_text())["model"]["path"]
    assert name.count("/") == 1 and not name.startswith("/"), f"{config.name}: model.path is not a Hub name"
    home = tmp_path / "hf_home"
    commit = hashlib.sha1(name.encode()).hexdigest()
    add_revision(home / "hub", name, tiny_model_dir, commit)  # the tiny model's files under the real name
    set_ref(home / "hub", name, "main", commit)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)

    assert cli.main(["check", str(config)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"]["path"] == f"{name}@{commit}"
    # Without it in the cache, offline, the same check is refused in one line that says how to get it.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    assert cli.main(["check", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"hf download {name}" in err
