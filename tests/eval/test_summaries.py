"""Run summaries and the results tables: a finished run's first and last evaluation become a committed JSON file,
and docs/results.md's generated section is rewritten from such files without touching the rest of the document."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import yaml

from strat import cli
from strat.errors import UserError
from strat.eval.summaries import (
    Evaluation,
    Figure,
    Reference,
    RunSummary,
    ablation_section,
    games_section,
    load_summaries,
    load_summary,
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
    config = {"run": {"seed": seed}, "game": {"name": "leduc_poker", "options": {}}, "eval": {"games": 100},
              "schedule": {"steps": 3}}
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


def test_matches_from_strat_eval_replace_the_runs_own(tmp_path: Path) -> None:
    """More games apart: `strat eval` reports (one made here by `strat eval` itself, a scripted player in the
    policy's seat) replace the run's figures against the opponents they played and say over how many games; the
    other opponents keep the run's own. A report of another game, or of a checkpoint other than the run's last, is
    refused."""
    run = _run_dir(tmp_path, 0, 0.5)
    before_dir = tmp_path / "before"
    assert cli.main(["eval", "--policy", "heuristic", "--game", "leduc_poker", "--opponents", "random", "--games",
                     "40", "--seed", "3", "--transcripts", "0", "--out", str(before_dir)]) == 0
    before = before_dir / "eval.json"
    report = json.loads(before.read_text())
    match = report["matches"][0]
    after = tmp_path / "after.json"
    report["policies"][0].update(run_dir=str(run), step=3)  # as `strat eval --policy RUN` records its checkpoint
    after.write_text(json.dumps(report))
    out = tmp_path / "summary.json"
    assert cli.main(["results", "summarize", str(run), "--out", str(out), "--matches-before", str(before),
                     "--matches-after", str(after)]) == 0
    summary = load_summary(out)
    played = Figure(match["mean_return"]["value"], match["mean_return"]["low"], match["mean_return"]["high"])
    assert match["games"] == 40 and played.low is not None and played.low < played.value
    assert summary.before.return_vs["random"] == played and summary.after.return_vs["random"] == played
    assert summary.after.win_rate_vs["random"] == Figure(match["win"]["value"], match["win"]["low"],
                                                         match["win"]["high"])
    assert summary.before.return_vs["heuristic"] == Figure(-1.0, -1.4, -0.6)  # not in the report: the run's own
    assert summary.before.evaluated_apart == {"random": 40} and summary.after.evaluated_apart == {"random": 40}
    text = games_section([summary], {})
    assert "; by `strat eval` apart: warm start vs random (40 games); trained vs random (40 games)" in text

    def refused(report_path: Path, message: str, game: str | None = None, step: int | None = None) -> None:
        data = json.loads(report_path.read_text())
        data["game"] = game or data["game"]
        data["policies"][0]["step"] = step if step is not None else data["policies"][0]["step"]
        changed = tmp_path / "changed.json"
        changed.write_text(json.dumps(data))
        with pytest.raises(UserError, match=message):
            summarize_run(run, "games", matches_after=changed)

    refused(after, "evaluates kuhn_poker", game="kuhn_poker")
    refused(after, r"\(step 2\), not .*run0's checkpoint of step 3", step=2)
    refused(before, r"\(step None\), not .*run0's checkpoint of step 3")
    with pytest.raises(UserError, match="not the warm start"):
        summarize_run(run, "games", matches_before=after)
    llm = json.loads(before.read_text())
    llm["policies"][0].update(kind="llm", depth=1, temperature=1.0, max_new_tokens=160)
    before.write_text(json.dumps(llm))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["reasoning"] = {"depth": 2, "temperature": 1.0, "max_new_tokens": 160}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(UserError, match=r"played with depth 1 \(the run: 2\); evaluate with the run's reasoning"):
        summarize_run(run, "games", matches_before=before)
    with pytest.raises(UserError, match="not a `strat eval` report"):
        summarize_run(run, "games", matches_before=run / "config.yaml")


def test_an_unfinished_run_is_refused(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, 0, 0.5)
    (run / "provenance.json").unlink()
    with pytest.raises(UserError, match="not a finished run"):
        summarize_run(run, "games")


def test_a_run_stopped_before_its_last_step_is_refused(tmp_path: Path) -> None:
    """SIGTERM stops a run with a checkpoint and provenance.json (so that a resume extends it): its summary would
    pass a partly trained policy off as the config's result."""
    run = _run_dir(tmp_path, 0, 0.5)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["schedule"]["steps"] = 30
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(UserError, match=f"stopped at step 3 of 30; finish it first with strat train --resume {run}"):
        summarize_run(run, "games")


def test_the_games_section_and_its_summary_row(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    for seed, win in ((0, 0.5), (1, 0.6), (2, 0.4)):
        write_summary(summarize_run(_run_dir(tmp_path, seed, win), "games"), folder / f"leduc-seed{seed}.json")
    # A `strat eval` report kept among the summaries is not one, and is passed over.
    (folder / "two_policies" / "final-seed0").mkdir(parents=True)
    (folder / "two_policies" / "final-seed0" / "eval.json").write_text(json.dumps({"policy": "x", "opponents": []}))
    summaries = load_summaries(folder)
    assert [s.seed for s in summaries] == [0, 1, 2]
    reference = Reference("heuristic", random=-2.0, heuristic=0.0)
    assert normalised_return(-1.0, reference) == 0.5 and normalised_return(0.2, reference) == pytest.approx(1.1)
    text = games_section(summaries, {"leduc_poker": reference})
    assert "### leduc_poker" in text
    assert "| 0 | trained (step 3) | +1.500 [+1.200, +1.800] | +0.200 [-0.300, +0.700] |" in text
    # Win-rate gains of 20, 30 and 10 points: mean 20, t(2) interval 20 +- 4.303 * 10 / sqrt(3) = 20 +- 24.843.
    # Every seed starts at -1.0 and ends at +0.2 against the heuristic player: normalised 0.5 and 1.1, no spread.
    assert "| leduc_poker | 3 | +20.0 [-4.8, +44.8] | 0.500 [0.500, 0.500] | 1.100 [1.100, 1.100] |" in text
    assert "`strat train configs/leduc_poker_tiny.yaml run.seed=1`" in text and ", 1.5 min, 600 generated" in text


def test_the_average_over_games_weighs_each_game_once(tmp_path: Path) -> None:
    """Leduc: three seeds, each from -1.0 to +0.2 against the heuristic player (normalised 0.5 -> 1.1, gain 0.6, no
    spread). A second game, two seeds (reference: random -1, heuristic 0, so normalised = R + 1): -1.0 -> -0.8 and
    -1.0 -> -0.6, gains 0.2 and 0.4, mean 0.3 +- 12.706 * 0.1414 / sqrt(2) = 0.3 +- 1.2706. The average of the two
    games' means is 0.45 (not the five runs' 0.44), half-width sqrt(0 + 1.2706^2) / 2 = 0.6353."""
    folder = tmp_path / "results"
    for seed, win in ((0, 0.5), (1, 0.6), (2, 0.4)):
        write_summary(summarize_run(_run_dir(tmp_path, seed, win), "games"), folder / f"leduc-seed{seed}.json")
    leduc = load_summaries(folder)
    dice = [
        dataclasses.replace(
            leduc[seed], game="liars_dice",
            before=dataclasses.replace(leduc[seed].before, return_vs={"heuristic": Figure(-1.0)}),
            after=dataclasses.replace(leduc[seed].after, return_vs={"heuristic": Figure(after)}),
        )
        for seed, after in ((0, -0.8), (1, -0.6))
    ]
    references = {"leduc_poker": Reference("heuristic", random=-2.0, heuristic=0.0),
                  "liars_dice": Reference("heuristic", random=-1.0, heuristic=0.0)}
    text = games_section([*leduc, *dice], references)
    assert "| leduc_poker | 3 | +0.600 [+0.600, +0.600] |" in text
    assert "| liars_dice | 2 | +0.300 [-0.971, +1.571] |" in text
    assert "| **average over 2 games** | 5 | **+0.450 [-0.185, +1.085]** |" in text
    # One seed has no interval, so neither has the average; a game without a reference is left out and named.
    text = games_section([*leduc, dice[0]], {**references, "leduc_poker": references["leduc_poker"]})
    assert "| **average over 2 games** | 4 | **+0.400** (no interval: a game with one seed has none) |" in text
    text = games_section([*leduc, *dice], {"leduc_poker": references["leduc_poker"]})
    assert "| **average over 1 game** | 3 | **+0.600 [+0.600, +0.600]** |" in text
    assert "Left out (no heuristic reference or evaluation): liars_dice." in text


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
    config = {"run": {"seed": 0}, "game": {"name": "tic_tac_toe", "options": {}}, "eval": {"games": 100},
              "schedule": {"steps": 1}}
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


def test_a_summary_without_an_arm_loads(tmp_path: Path) -> None:
    """Summaries written before `arm` existed still load: a committed one (docs/results/games/) without the key."""
    committed = Path(__file__).resolve().parents[2] / "docs/results/games/leduc_poker_tiny-seed0.json"
    data = json.loads(committed.read_text())
    data.pop("arm", None)
    (tmp_path / "old.json").write_text(json.dumps(data))
    summary = load_summary(tmp_path / "old.json")
    assert summary.arm is None and summary.section == "games" and summary.seed == 0 and summary.steps == 48
    assert summary.tokens_per_step == data["tokens_per_step"]


def test_an_ablation_summary_names_its_arm(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, 0, 0.5)
    with pytest.raises(UserError, match="needs the arm"):
        summarize_run(run, "ablation")
    out = tmp_path / "results" / "leduc-outcome-seed0.json"
    assert cli.main(["results", "summarize", str(run), "--out", str(out), "--section", "ablation",
                     "--arm", "outcome"]) == 0
    assert load_summary(out).arm == "outcome" and load_summary(out).section == "ablation"


def _arm_run(arm: str, seed: int, exploitability: float | None, returns: float, validity: float = 1.0,
             tokens: float = 1000.0) -> RunSummary:
    """A hand-made Kuhn ablation summary: only its last evaluation's figures matter to the table."""
    after = Evaluation(step=30, return_vs={"random": Figure(returns, returns - 0.1, returns + 0.1)},
                       exploitability=None if exploitability is None else Figure(exploitability),
                       format_validity=validity)
    return RunSummary(section="ablation", config="configs/kuhn_poker_tiny.yaml", game="kuhn_poker", game_options={},
                      seed=seed, command=f"strat train configs/kuhn_poker_tiny.yaml run.name={arm}-seed{seed}",
                      commit="abc1234", date="2026-12-02", steps=30, before=Evaluation(step=0), after=after,
                      tokens_per_step=tokens, arm=arm)


def _ablation_runs() -> list[RunSummary]:
    return [
        _arm_run("hybrid", 0, 0.30, 0.1, validity=1.0, tokens=1000.0),
        _arm_run("hybrid", 1, 0.20, 0.2, validity=0.9, tokens=2000.0),
        _arm_run("hybrid", 2, 0.25, 0.3, validity=0.95, tokens=3000.0),
        _arm_run("outcome", 0, 0.35, 0.0),
        _arm_run("outcome", 1, 0.30, 0.2),
        _arm_run("outcome", 2, 0.25, 0.1),
        _arm_run("process", 0, 0.90, -0.5),
        _arm_run("process", 3, 0.80, -0.3),
        _arm_run("depth0", 0, None, 0.4),
    ]


def test_the_ablation_table_by_hand() -> None:
    text = ablation_section(_ablation_runs())
    assert text.startswith("### kuhn_poker: `configs/kuhn_poker_tiny.yaml`, 30 steps\n")
    assert ("| arm | seeds | exploitability | minus hybrid | return vs random | minus hybrid | format valid"
            " | tokens per step |") in text
    # hybrid: exploitability 0.30, 0.20, 0.25: mean 0.25, sd 0.05, t(2) = 4.303, half-width 4.303 * 0.05 / sqrt(3)
    # = 0.124; returns 0.1, 0.2, 0.3: mean 0.2, sd 0.1, half-width 0.248; validity and tokens: plain means.
    assert "| hybrid | 3 | 0.250 [0.126, 0.374] | reference | +0.200 [-0.048, +0.448] | reference | 0.950 | 2000 |" in text
    # outcome minus hybrid, seed by seed: exploitability +0.05, +0.10, 0.00 (mean +0.05, sd 0.05, half-width 0.124);
    # returns -0.1, 0.0, -0.2 (mean -0.1, sd 0.1, half-width 0.248). Its own exploitability 0.35, 0.30, 0.25 and
    # returns 0.0, 0.2, 0.1 have the same spreads.
    assert ("| outcome | 3 | 0.300 [0.176, 0.424] | +0.050 [-0.074, +0.174] (n=3) | +0.100 [-0.148, +0.348]"
            " | -0.100 [-0.348, +0.148] (n=3) | 1.000 | 1000 |") in text
    # process ran seeds 0 and 3: its means over both (exploitability 0.85, sd 0.0707, t(1) = 12.706: half-width
    # 12.706 * 0.0707 / sqrt(2) = 0.635; returns -0.4, sd 0.1414: half-width 1.271), paired with hybrid on seed 0
    # only (0.90 - 0.30, -0.5 - 0.1: one pair, no interval).
    assert "| process | 2 | 0.850 [0.215, 1.485] | +0.600 (n=1) | -0.400 [-1.671, +0.871] | -0.600 (n=1) |" in text
    # depth0 measured no exploitability: none to show or pair; one seed, so no interval on its return.
    assert "| depth0 | 1 | n/a | n/a | +0.400 | +0.300 (n=1) | 1.000 | 1000 |" in text
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| arm", "| hybrid", "| depth0", "| outcome", "| process"]
    assert "- outcome, seed 2: `strat train configs/kuhn_poker_tiny.yaml run.name=outcome-seed2` (commit abc1234" in text


def test_the_table_command_writes_both_sections_between_their_markers(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    write_summary(summarize_run(_run_dir(tmp_path, 0, 0.5), "games"), folder / "games" / "leduc-seed0.json")
    for run in _ablation_runs():
        write_summary(run, folder / "ablation" / f"kuhn-{run.arm}-seed{run.seed}.json")
        # A separate report's summaries (another folder, other settings) are not pooled into the ablation table.
        other = dataclasses.replace(run, arm=f"elsewhere-{run.arm}")
        write_summary(other, folder / "scoring" / f"kuhn-{run.arm}-seed{run.seed}.json")
    doc = tmp_path / "results.md"
    doc.write_text("# Learning results\n\nabove\n\n<!-- results:games:start -->\nold games\n<!-- results:games:end -->\n"
                   "\nbetween\n\n<!-- results:ablation:start -->\nold ablation\n<!-- results:ablation:end -->\n\nbelow\n")
    command = ["results", "table", "--results", str(folder), "--doc", str(doc), "--reference-games", "200"]
    assert cli.main(command) == 0
    text = doc.read_text()
    assert "old games" not in text and "old ablation" not in text
    head, rest = text.split("<!-- results:games:start -->")
    games, rest = rest.split("<!-- results:games:end -->")
    middle, rest = rest.split("<!-- results:ablation:start -->")
    ablation, tail = rest.split("<!-- results:ablation:end -->")
    assert head == "# Learning results\n\nabove\n\n" and middle == "\n\nbetween\n\n" and tail == "\n\nbelow\n"
    assert "### leduc_poker" in games and "| hybrid |" not in games
    assert "| hybrid | 3 |" in ablation and "leduc" not in ablation and "elsewhere" not in ablation
    assert cli.main(command) == 0 and doc.read_text() == text


def test_the_table_command_adds_missing_sections_empty(tmp_path: Path) -> None:
    doc = tmp_path / "results.md"
    doc.write_text("# Learning results\n")
    assert cli.main(["results", "table", "--results", str(tmp_path / "none"), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Learning results\n") and text.count("No run summarised yet.") == 2
    assert text.index("results:games:end") < text.index("results:ablation:start")
