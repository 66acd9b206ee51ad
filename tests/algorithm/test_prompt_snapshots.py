"""Prompt snapshots per game and depth, so that any change to prompt text shows up in review.

Regenerate with `STRAT_UPDATE_SNAPSHOTS=1 python -m pytest tests/algorithm/test_prompt_snapshots.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import games
from strat.algorithm.reasoning import DEPTH_SECTIONS, build_messages

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("STRAT_UPDATE_SNAPSHOTS") == "1"
VARIANTS = [(name, {}) for name in games.names()] + [
    (name, options) for name, options in [("kuhn_poker", {"players": 3})] if name in games.names()
]


def _label(name: str, options: dict) -> str:
    return name + "".join(f"_{key}{value}" for key, value in sorted(options.items()))


def _snapshot(name: str, options: dict, depth: int) -> str:
    """The prompts at the first decision and, after the first legal move, at the second."""
    env = games.make(name, **options)
    env.reset(seed=0)
    blocks = []
    for position in ("first decision", "second decision"):
        if position == "second decision":
            env.step(env.legal_actions(env.agent_selection)[0])
            if all(env.terminations.values()) or all(env.truncations.values()):
                break
        agent = env.agent_selection
        messages = build_messages(env, agent, depth)
        blocks.append(
            f"### {position}: {agent}\n" + "\n".join(f"--- {m['role']} ---\n{m['content']}" for m in messages)
        )
    return "\n\n".join(blocks) + "\n"


@pytest.mark.parametrize("depth", sorted(DEPTH_SECTIONS))
@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=[_label(n, o) for n, o in VARIANTS])
def test_prompt_snapshot(name: str, options: dict, depth: int) -> None:
    path = SNAPSHOTS / f"{_label(name, options)}_depth{depth}.txt"
    text = _snapshot(name, options, depth)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path.name}; run with STRAT_UPDATE_SNAPSHOTS=1 and review the new file"
    assert text == path.read_text(), (
        f"prompt changed for {path.name}; if intended, regenerate with STRAT_UPDATE_SNAPSHOTS=1"
    )
