"""Fixtures shared by the trainer-level tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray node of 2 CPUs for one test module (a module's runs share it), shut down after it."""
    import ray  # start-up cost: only the modules that use it pay

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
