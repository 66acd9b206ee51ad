"""Shared fixtures for the games tests."""

from __future__ import annotations

import pytest

import games

# Every game configuration the registry offers that the tests exercise.
CONFIGS: list[tuple[str, dict]] = [(name, {}) for name in games.names()]
CONFIGS += [
    ("kuhn_poker", {"players": 3}), ("kuhn_poker", {"move_names": "situational"}), ("liars_dice", {"numdice": 2}),
    ("tic_tac_toe", {"move_names": "digits"}), ("connect_four", {"column_numbers": "open"}),
    ("tic_tac_toe", {"move_names": "digits", "lines": "named"}), ("connect_four", {"lines": "named"}),
]


def config_id(config: tuple[str, dict]) -> str:
    name, options = config
    return name + "".join(f"-{key}{value}" for key, value in options.items())


@pytest.fixture(params=CONFIGS, ids=config_id)
def config(request: pytest.FixtureRequest) -> tuple[str, dict]:
    return request.param
