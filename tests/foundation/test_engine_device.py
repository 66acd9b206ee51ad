"""`engine.device`: `auto` puts the hf engine on CUDA when torch sees a GPU and on the CPU otherwise; an explicit
device stays as given; the config's choice reaches the engine that build_engine makes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import strat.engines.hf
from strat.config_loading import load_config
from strat.engines import build_engine, resolve_device
from strat.play.settings import engine_settings


@pytest.mark.parametrize(
    ("asked", "gpu", "expected"),
    [("auto", True, "cuda"), ("auto", False, "cpu"), ("cpu", True, "cpu"), ("cuda", False, "cuda")],
)
def test_the_device_choice(monkeypatch: pytest.MonkeyPatch, asked: str, gpu: bool, expected: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert resolve_device(asked) == expected


@pytest.mark.parametrize(("override", "gpu", "expected"), [(None, True, "cuda"), (None, False, "cpu"),
                                                          ("cpu", True, "cpu")])
def test_the_configured_device_reaches_the_hf_engine(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path, override: str | None, gpu: bool, expected: str
) -> None:
    built: list[str] = []

    class Recorder:
        def __init__(self, model_path: object, dtype: str, device: str, trust_remote_code: bool) -> None:
            built.append(device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(strat.engines.hf, "HFEngine", Recorder)
    config = load_config(None, [f"engine.device={override}"] if override else [])
    assert config.engine.device == (override or "auto")
    build_engine("hf", tiny_model_dir, engine_settings(config))
    assert built == [expected]


def test_an_engine_built_directly_stays_on_the_cpu(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with build_engine("hf", tiny_model_dir) as engine:
        assert engine.device == torch.device("cpu")
