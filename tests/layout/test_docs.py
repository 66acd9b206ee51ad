"""The docs a user reads are true: the configuration reference is current and describes every key, and the README's
commands run as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from strat.config_reference import reference_markdown, undocumented

ROOT = Path(__file__).resolve().parents[2]
RUN_AS_WRITTEN = {"check", "plan", "config-reference"}
"""Verbs that a README line runs for real; every other verb (training, evaluation, jobs) runs with --help."""


def test_the_configuration_reference_is_current() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == reference_markdown() + "\n", "docs/configuration.md is stale: run `make docs`"


def test_every_key_and_section_has_a_description() -> None:
    assert undocumented() == []


def readme_commands(text: str) -> list[str]:
    """The `strat` lines of the README's bash blocks, trailing comments removed."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("strat "):
                lines.append(line)
    return lines


def test_readme_commands_are_found() -> None:
    sample = "text\n```bash\nstrat check a.yaml   # validate\nmake test\n```\n```python\nstrat x\n```\n"
    assert readme_commands(sample) == ["strat check a.yaml"]


COMMANDS = readme_commands((ROOT / "README.md").read_text())


@pytest.mark.parametrize("line", COMMANDS)
def test_readme_command_runs(line: str, tmp_path: Path) -> None:
    words = shlex.split(line)[1:]
    verb = words[0]
    args = words if verb in RUN_AS_WRITTEN else [verb, "--help"]
    if verb == "config-reference":
        args = [*args, "--out", str(tmp_path / "configuration.md")]
    result = subprocess.run(
        [sys.executable, "-m", "strat.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, f"`{line}` exited {result.returncode}: {result.stderr[-2000:]}"


def test_the_readme_shows_the_verbs() -> None:
    verbs = {shlex.split(line)[1] for line in COMMANDS}
    assert {"check", "train", "eval", "play", "sft", "init-model", "bench", "plan", "submit", "jobs", "export"} <= verbs
