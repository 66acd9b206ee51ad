"""Every bad input of `tests/reliability/bad_inputs.py` is answered with its exit status and one line on stderr, no
traceback, before anything starts; docs/reliability.md shows the same table."""

import json
import re
import shutil
from pathlib import Path

import pytest

from strat import cli

from .bad_inputs import CASES, DOC, BadInput, documented, section
from .conftest import DEFAULT
from .test_verified_checkpoints import saved_run, truncate  # noqa: F401  (a shared module fixture)


@pytest.fixture
def places(tmp_path: Path, saved_run: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:  # noqa: F811
    """The paths the cases' capitals stand for, made; the working directory is an empty folder."""
    work = tmp_path / "tmp"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "bad.yaml").write_text("game: [unclosed\nmodel: {path: x}\n")
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    truncate(run / "checkpoints" / "step_2" / "model.safetensors")
    broken = tmp_path / "broken_run"
    shutil.copytree(run, broken)
    truncate(broken / "checkpoints" / "step_1" / "optimizer.pt")
    records = tmp_path / "records_run"
    records.mkdir()
    (records / "config.yaml").write_text("schedule: {steps: 2}\n")
    (records / "provenance.json").write_text("{}")
    (records / "metrics.jsonl").write_text(
        json.dumps({"step": 1}) + "\n{\"step\": 2, \"rew\n" + json.dumps({"step": 3}) + "\n")
    return {"BROKEN_RUN": str(broken), "RECORDS_RUN": str(records), "RUN": str(run), "CONFIG": str(DEFAULT),
            "TMP": str(work)}


def _fill(text: str, places: dict[str, str], names: tuple[str, ...] = ()) -> str:
    """`text` with the capitals (`names`, default all) replaced by their paths, where they are not part of a
    longer capital (BROKEN_RUN, RUN_DIR)."""
    for name in names or tuple(places):
        text = re.sub(rf"(?<![A-Z_]){name}(?![A-Z_])", lambda _, path=places[name]: path, text)
    return text


@pytest.mark.parametrize("case", CASES, ids=[case.what for case in CASES])
def test_a_bad_input_is_answered_in_one_line(case: BadInput, places: dict[str, str], capsys) -> None:
    argv = [_fill(arg, places) for arg in case.args]
    code = cli.main(argv)
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert code == case.exit_status, out.err
    assert "Traceback" not in out.err + out.out
    assert len(lines) == 1, out.err
    assert lines[0].startswith("strat: error: ")
    assert _fill(case.says, places, ("RUN", "BROKEN_RUN", "RECORDS_RUN")) in lines[0]
    import ray

    assert not ray.is_initialized(), "refused after Ray started"


def test_the_reliability_doc_shows_the_table_of_these_cases() -> None:
    assert documented(DOC.read_text()) == section(), (
        "docs/reliability.md's bad-input table is stale: python -m tests.reliability.bad_inputs")
