"""Shared pieces of the experiment scripts' tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def experiment_module(name: str) -> Iterator[ModuleType]:
    """experiments/<question>/<name>.py imported as module `name` (the scripts are not a package), for a fixture to
    yield from."""
    (path,) = EXPERIMENTS.glob(f"*/{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(name, None)
