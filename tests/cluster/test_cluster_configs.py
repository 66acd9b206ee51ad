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
    tree = yaml.safe_load(config.read_text())
    name = tree["model"]["path"]
    others = [policy["model"] for policy in tree.get("policies", [])]  # co-trained or fixed policies' models
    for hub_name in (name, *others):
        assert hub_name.count("/") == 1 and not hub_name.startswith("/"), f"{config.name}: {hub_name} is no Hub name"
    home = tmp_path / "hf_home"
    commits = {hub_name: hashlib.sha1(hub_name.encode()).hexdigest() for hub_name in (name, *others)}
    for hub_name, commit in commits.items():
        add_revision(home / "hub", hub_name, tiny_model_dir, commit)  # the tiny model's files under the real name
        set_ref(home / "hub", hub_name, "main", commit)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)

    assert cli.main(["check", str(config)]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["model"]["path"] == f"{name}@{commits[name]}"
    assert [policy["model"] for policy in resolved.get("policies", [])] == [f"{m}@{commits[m]}" for m in others]
    # Without it in the cache, offline, the same check is refused in one line that says how to get it.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    assert cli.main(["check", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"hf download {name}" in err
