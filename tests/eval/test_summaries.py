"""Run summaries and the results tables: a finished run's first and last evaluation become a committed JSON file,
and docs/results.md's generated section is rewritten from such files without touching the rest of the document."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from strat import cli
from strat.errors import UserError
from strat.eval.summaries import (
    Figure,
    Reference,
    games_section,
    load_summaries,
    normalised_return,
    record_provenance,
    replace_section,
    scripted_reference,
    summarize_run,
    write_summary,
)


def _run_dir(tmp_path: Path, seed: int, after_heuristic_win: float) -> Path:
    run = tmp_path / f"run{seed}"
    run.mkdir()
    config = {"run": {"seed": seed}, "game": {"name": "leduc_poker", "options": {}}, "eval": {"games": 100}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    records = [
        {"step": 0, "eval/return_vs_random": 0.5, "eval/return_vs_random_ci": 0.2, "eval/win_rate_vs_random": 0.5,
         "eval/return_vs_heuristic": -1.0, "eval/return_vs_heuristic_ci": 0.4, "eval/win_rate_vs_heuristic": 0.3},
        {"step": 1, "format/valid_rate": 0.9, "throughput/gen_tokens_per_s": 100.0, "time/rollout_s": 4.0},
        {"step": 2, "format/valid_rate": 0.95, "throughput/gen_tokens_per_s": 200.0, "time/rollout_s": 4.0,
         "eval/return_vs_random": 1.0, "eval/return_vs_random_ci": 0.25, "eval/win_rate_vs_random": 0.6},
        {"step": 3, "format/valid_rate": 1.0, "throughput/gen_tokens_per_s": 150.0, "time/rollout_s": 4.0,
         "eval/return_vs_random": 1.5, "eval/return_vs_random_ci": 0.3, "eval/win_rate_vs_random": 0.7,
         "eval/return_vs_heuristic": 0.2, "eval/return_vs_heuristic_ci": 0.5,
         "eval/win_rate_vs_heuristic": after_heuristic_win},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    record_provenance(run, ["train", "configs/leduc_poker_tiny.yaml", f"run.seed={seed}"],
                      "configs/leduc_poker_tiny.yaml", started=time.time() - 90.0)
    return run


def test_a_run_is_summarised_from_its_first_and_last_evaluation(tmp_path: Path) -> None:
    summary = summarize_run(_run_dir(tmp_path, 0, 0.5), "games")
    assert summary.command == "strat train configs/leduc_poker_tiny.yaml run.seed=0"
    assert summary.config == "configs/leduc_poker_tiny.yaml" and summary.seed == 0 and summary.steps == 3
    assert summary.before.step == 0 and summary.after.step == 3
    # A half-width interval around the mean; Wilson's interval for 50 wins in 100 games: 0.5 +- 0.0962 (by hand).
    assert summary.after.return_vs["random"] == Figure(1.5, 1.2, 1.8)
    win = summary.after.win_rate_vs["heuristic"]
    assert win.value == 0.5 and win.low == pytest.approx(0.40383, abs=1e-4) and win.high == pytest.approx(0.59617, abs=1e-4)
    assert summary.before.format_validity == 0.9 and summary.after.format_validity == 1.0
    assert summary.tokens_per_step == pytest.approx((400 + 800 + 600) / 3)
    assert summary.before.exploitability is None


def test_exploitability_from_strat_eval_replaces_the_runs(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"exploitability": {"value": 2.1, "ci_low": 1.9, "ci_high": 2.3}}))
    after.write_text(json.dumps({"exploitability": {"value": 1.2, "ci_low": 1.0, "ci_high": 1.4}}))
    summary = summarize_run(_run_dir(tmp_path, 0, 0.5), "games", before, after)
    assert summary.before.exploitability == Figure(2.1, 1.9, 2.3)
    assert summary.after.exploitability == Figure(1.2, 1.0, 1.4)
    with pytest.raises(UserError, match="no exploitability"):
        summarize_run(tmp_path / "run0", "games", tmp_path / "run0" / "config.yaml")


def test_an_unfinished_run_is_refused(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, 0, 0.5)
    (run / "provenance.json").unlink()
    with pytest.raises(UserError, match="not a finished run"):
        summarize_run(run, "games")


def test_the_games_section_and_its_summary_row(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    for seed, win in ((0, 0.5), (1, 0.6), (2, 0.4)):
        write_summary(summarize_run(_run_dir(tmp_path, seed, win), "games"), folder / f"leduc-seed{seed}.json")
    summaries = load_summaries(folder)
    assert [s.seed for s in summaries] == [0, 1, 2]
    reference = Reference("heuristic", random=-2.0, heuristic=0.0)
    assert normalised_return(-1.0, reference) == 0.5 and normalised_return(0.2, reference) == pytest.approx(1.1)
    text = games_section(summaries, {"leduc_poker": reference})
    assert "### leduc_poker" in text
    assert "| 0 | trained (step 3) | +1.500 [+1.200, +1.800] | +0.200 [-0.300, +0.700] |" in text
    # Win-rate gains of 20, 30 and 10 points: mean 20, t(2) interval 20 +- 4.303 * 10 / sqrt(3) = 20 +- 24.843.
    # Every seed starts at -1.0 and ends at +0.2 against the heuristic player: normalised 0.5 and 1.1, no spread.
    assert "| leduc_poker | 3 | +20.000 [-4.843, +44.843] | 0.500 [0.500, 0.500] | 1.100 [1.100, 1.100] |" in text
    assert "`strat train configs/leduc_poker_tiny.yaml run.seed=1`" in text and ", 1.5 min, 600 generated" in text


def test_the_generated_section_replaces_only_itself(tmp_path: Path) -> None:
    document = "# Results\n\nhand-written\n"
    once = replace_section(document, "games", "table one\n")
    twice = replace_section(once + "\nmore hand-written text\n", "games", "table two\n")
    assert twice.startswith("# Results\n\nhand-written\n") and twice.endswith("more hand-written text\n")
    assert "table two" in twice and "table one" not in twice and twice.count("results:games:start") == 1


def test_the_table_command_writes_the_document(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    write_summary(summarize_run(_run_dir(tmp_path, 0, 0.5), "games"), folder / "games" / "leduc-seed0.json")
    doc = tmp_path / "results.md"
    doc.write_text("# Learning results\n")
    assert cli.main(["results", "table", "--results", str(folder), "--doc", str(doc), "--reference-games", "200"]) == 0
    text = doc.read_text()
    assert text.startswith("# Learning results\n") and "### leduc_poker" in text and "R_random = " in text


def test_scripted_reference_of_kuhn_poker() -> None:
    """Against the heuristic player (bet or call with the King or Queen, else check or fold), exactly: random
    loses 1/3 a game on average and the heuristic player itself breaks even over both seats (by enumeration of the
    six deals). The simulation is within its standard error."""
    reference = scripted_reference("kuhn_poker", {}, num_games=4000)
    assert reference.random == pytest.approx(-1 / 3, abs=0.06)
    assert reference.heuristic == pytest.approx(0.0, abs=0.06)


def _tic_tac_toe_run(tmp_path: Path, draws_after: float) -> Path:
    """A tic-tac-toe run of 100 games per evaluation that draws 10% of them against minimax at step 0."""
    run = tmp_path / "ttt"
    run.mkdir()
    config = {"run": {"seed": 0}, "game": {"name": "tic_tac_toe", "options": {}}, "eval": {"games": 100}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    records = [
        {"step": 0, "eval/return_vs_random": 0.1, "eval/win_rate_vs_random": 0.4, "eval/draw_rate_vs_random": 0.3,
         "eval/return_vs_minimax": -0.9, "eval/win_rate_vs_minimax": 0.0, "eval/draw_rate_vs_minimax": 0.1},
        {"step": 1, "format/valid_rate": 1.0,
         "eval/return_vs_random": 0.3, "eval/win_rate_vs_random": 0.5, "eval/draw_rate_vs_random": 0.3,
         "eval/return_vs_minimax": -0.75, "eval/win_rate_vs_minimax": 0.0, "eval/draw_rate_vs_minimax": draws_after},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    record_provenance(run, ["train", "configs/tic_tac_toe_tiny.yaml"], "configs/tic_tac_toe_tiny.yaml", time.time())
    return run


def test_draw_rates_are_summarised_with_their_intervals_and_shown(tmp_path: Path) -> None:
    summary = summarize_run(_tic_tac_toe_run(tmp_path, 0.25), "games")
    # Wilson's interval for 25 draws in 100 games: centre 0.2592, half-width 0.0838 (by hand).
    draw = summary.after.draw_rate_vs["minimax"]
    assert draw.value == 0.25 and draw.low == pytest.approx(0.17545, abs=1e-4) and draw.high == pytest.approx(0.34304, abs=1e-4)
    assert summary.before.draw_rate_vs["minimax"].value == 0.1 and summary.before.draw_rate_vs["random"].value == 0.3
    write_summary(summary, tmp_path / "results" / "ttt.json")
    text = games_section(load_summaries(tmp_path / "results"), {})
    assert "| seed | policy | return vs random | return vs minimax | win % vs random | win % vs minimax | draw % vs random" \
           " | draw % vs minimax | exploitability | format valid |" in text
    assert "| 0 | trained (step 1) | +0.300 | -0.750 | 50.0 [40.4, 59.6] | 0.0 [0.0, 3.7] | 30.0 [21.9, 39.6]" \
           " | 25.0 [17.5, 34.3] | n/a | 1.000 |" in text


def test_games_without_draws_have_no_draw_column_and_older_summaries_load(tmp_path: Path) -> None:
    """Leduc runs here recorded no draw rates (older runs and summaries have none): they load, and their table has
    no draw column."""
    path = write_summary(summarize_run(_run_dir(tmp_path, 0, 0.5), "games"), tmp_path / "results" / "leduc.json")
    data = json.loads(path.read_text())
    for ev in ("before", "after"):
        del data[ev]["draw_rate_vs"]
    path.write_text(json.dumps(data))
    summaries = load_summaries(tmp_path / "results")
    assert summaries[0].after.draw_rate_vs == {} and summaries[0].after.win_rate_vs["heuristic"].value == 0.5
    assert "draw %" not in games_section(summaries, {})
