"""bench/trl_compare.py and bench/trl_side.py, Strat against stock TRL: the prompt export, the figures, the batch in
TRL's terms, the reward, the arguments and the TRL process's report, by hand and without TRL. One test runs the TRL
side for real, one tiny step, where bench/.venv-trl exists (bash bench/trl_env.sh); it is skipped, with that reason,
where it does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
from transformers import AutoTokenizer

from strat.algorithm.reasoning import render_response
from strat.algorithm.records import Sections
from strat.config_loading import load_config
from strat.engines.base import chat_prompt_ids

from .conftest import BENCH, bench_module

CONFIG = BENCH.parent / "configs" / "kuhn_poker_tiny.yaml"
TRL_PYTHON = BENCH / ".venv-trl" / "bin" / "python"


@pytest.fixture(scope="module")
def compare():
    yield from bench_module("trl_compare")


@pytest.fixture(scope="module")
def side(compare):
    return sys.modules["trl_side"]


def _work(side, prompts, **changes):
    fields = {"model": "m", "prompts": prompts, "depth": 2, "group_size": 8, "groups": 8, "max_new_tokens": 160,
              "temperature": 1.0, "top_p": 1.0, "lr": 3e-4, "minibatches": 2, "micro_batch": 32, "grad_clip": 1.0,
              "clip_eps_low": 0.2, "clip_eps_high": 0.28, "kl_coef": 0.0, "format_penalty": -3.0, "warmup": 1,
              "steps": 3, "threads": 2, "seed": 0}
    return side.Work(**{**fields, **changes})


# --- the same prompts ---------------------------------------------------------------------------


def test_prompts_export_round_trip_and_token_counts(compare, side, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = compare.export_prompts(tokenizer, "kuhn_poker", {}, 2)
    # Kuhn poker's 12 information sets: 3 cards x (opening, after a pass, after a bet, pass-bet), each pass or bet.
    assert sorted(p.key for p in prompts) == sorted(f"{c}{h}" for c in "012" for h in ("", "p", "b", "pb"))
    assert all(p.legal_actions == ["pass", "bet"] for p in prompts)
    # The openings and first replies take 445 tokens, pass-bet's longer history 449 (`strat check`'s longest prompt).
    assert {p.key: len(p.prompt_token_ids) for p in prompts} == {
        p.key: 449 if p.key.endswith("pb") else 445 for p in prompts}
    for prompt in prompts:
        # The call TRL makes (GRPOTrainer._tokenize_prompts) on the exported messages gives Strat's ids.
        trl_ids = tokenizer.apply_chat_template(conversation=[prompt.messages], add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"][0]
        assert list(trl_ids) == prompt.prompt_token_ids == chat_prompt_ids(tokenizer, prompt.messages)
    work = _work(side, prompts)
    assert side.Work.from_json(work.to_json()) == work


def test_work_comes_from_the_config(compare) -> None:
    _, args = compare.parse_args(["--steps", "2", "--warmup", "0", "--trl-threads", "2"])
    work = compare.make_work(load_config(str(CONFIG), []), "model-dir", [], args)
    assert (work.group_size, work.groups, work.batch, work.max_new_tokens) == (8, 8, 64, 160)
    assert (work.temperature, work.top_p, work.lr, work.minibatches, work.micro_batch) == (1.0, 1.0, 3e-4, 2, 32)
    assert (work.clip_eps_low, work.clip_eps_high, work.kl_coef, work.format_penalty) == (0.2, 0.28, 0.2, -3.0)
    assert (work.warmup, work.steps, work.threads, work.model) == (0, 2, 2, "model-dir")
    with pytest.raises(ValueError, match="minibatches=3 must divide .* = 64"):
        compare.make_work(load_config(str(CONFIG), ["algorithm.minibatches=3"]), "m", [], args)


def test_trl_batching_by_hand(side) -> None:
    # 64 completions in 2 optimizer steps of 32: one pass of 32 each, 2 micro-batches per generation batch.
    assert side.trl_batching(_work(side, [])) == side.TrlBatching(32, 1, 2)
    # Passes of 16: two accumulated per optimizer step, 4 per generation batch.
    assert side.trl_batching(_work(side, [], micro_batch=16)) == side.TrlBatching(16, 2, 4)
    # A pass larger than the minibatch is the minibatch: 16 completions, 4 steps of 4.
    assert side.trl_batching(_work(side, [], groups=2, minibatches=4)) == side.TrlBatching(4, 1, 4)
    with pytest.raises(ValueError, match="micro_batch=24 must divide the minibatch of 32"):
        side.trl_batching(_work(side, [], micro_batch=24))


def test_move_reward_uses_strats_parser(side) -> None:
    def response(action: str) -> str:
        return render_response(Sections(past="They have not moved. belief: Queen", their_view="Strength.",
                                        plan="Bet.", predict="pass", action=action), 2)

    assert side.move_reward(response("bet"), ["pass", "bet"], 2, -3.0) == 1.0
    assert side.move_reward(response("Pass"), ["pass", "bet"], 2, -3.0) == 1.0
    assert side.move_reward(response("fold"), ["pass", "bet"], 2, -3.0) == -3.0
    assert side.move_reward("<action>bet</action>", ["pass", "bet"], 2, -3.0) == -3.0  # depth 2 wants five sections


def test_batch_timer_spans_a_generation_batchs_optimizer_steps(side, monkeypatch) -> None:
    clock = iter([10.0, 12.0, 15.0, 20.0])
    monkeypatch.setattr(side.time, "perf_counter", lambda: next(clock))
    timer = side.BatchTimer(optimizer_steps=2)
    for step in range(4):  # global_step before each optimizer step, and after it
        timer.on_step_begin(None, SimpleNamespace(global_step=step), None)
        timer.on_step_end(None, SimpleNamespace(global_step=step + 1), None)
    # Read only at the begin of optimizer steps 0 and 2 (10, 15) and the end of steps 1 and 3 (12, 20).
    assert timer.seconds == [2.0, 5.0]


# --- figures ------------------------------------------------------------------------------------


def test_counted_steps_and_figures_by_hand(compare, side) -> None:
    steps = [side.StepWork(1, 1000, 64, 2.0), side.StepWork(2, 900, 60, 1.5), side.StepWork(3, 1200, 68, 2.5),
             side.StepWork(4, 50, 64, 0.5)]
    kept = compare.counted(steps, warmup=1, count=2)
    assert [s.step for s in kept] == [2, 3]
    round_ = compare.SideRound("strat", 1, kept, other_jobs_cores=0.5)
    # (900 + 1200) tokens / (1.5 + 2.5) s = 525 tok/s; (60 + 68) / 2 = 64 completions of 2100 / 128 = 16.4 tokens.
    assert (round_.generated_tokens, round_.seconds, round_.tok_s) == (2100, 4.0, 525.0)
    assert (round_.completions_per_step, round_.tokens_per_completion) == (64.0, 2100 / 128)
    with pytest.raises(RuntimeError, match=r"expected steps 2\.\.4, got \[1, 2, 3\]"):
        compare.counted(steps[:3], warmup=1, count=3)


def test_medians_and_ratio_by_hand(compare, side) -> None:
    def rounds(name: str, rates: list[float]) -> list:
        return [compare.SideRound(name, i + 1, [side.StepWork(2, int(rate * 2), 64, 2.0)], None)
                for i, rate in enumerate(rates)]

    comparison = compare.Comparison(rounds("strat", [525, 600, 500]), rounds("trl", [300, 200, 250]))
    # Medians 525 and 250: 2.1 >= 2; per round 525/300, 600/200, 500/250.
    assert (comparison.strat_tok_s, comparison.trl_tok_s) == (525.0, 250.0)
    assert comparison.ratio == pytest.approx(2.1) and comparison.met
    assert comparison.round_ratios == pytest.approx([1.75, 3.0, 2.0])
    assert compare.summary_lines(comparison) == [
        "median over 3 round(s), generated tokens per second of step time: Strat 525, TRL 250",
        "Strat / TRL = 2.10 (goal >= 2: met); per round: 1.75, 3.00, 2.00",
    ]
    short = compare.Comparison(rounds("strat", [400]), rounds("trl", [250]))
    assert not short.met and compare.summary_lines(short)[1] == "Strat / TRL = 1.60 (goal >= 2: not met); per round: 1.60"


def test_sides_alternate_which_runs_first(compare) -> None:
    assert [compare.side_order(r) for r in (1, 2, 3)] == [("strat", "trl"), ("trl", "strat"), ("strat", "trl")]


# --- the command --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, named", [(["--rounds", "0"], "--rounds must be >= 1, got 0"),
                                         (["--steps", "0"], "--steps must be >= 1, got 0"),
                                         (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
                                         (["--trl-threads", "0"], "--trl-threads must be >= 1, got 0")])
def test_arguments_are_checked(compare, capsys, argv: list[str], named: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        compare.parse_args(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_missing_trl_venv_is_one_line_naming_the_command(compare, capsys, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        compare.main(["--trl-venv", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and "bash bench/trl_env.sh" in err and str(tmp_path / "nowhere") in err


def _fake_python(tmp_path: Path, body: str) -> Path:
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return python


def test_trl_round_reads_the_processs_last_line(compare, side, tmp_path: Path) -> None:
    steps = [{"step": 1, "generated_tokens": 9000, "completions": 64, "seconds": 9.0},
             {"step": 2, "generated_tokens": 9200, "completions": 64, "seconds": 4.0}]
    report = {"steps": steps, "versions": {"trl": "x"}, "torch_threads": 2}
    python = _fake_python(tmp_path, f"echo 'TRL says hello'\necho '{json.dumps(report)}'")
    measured, reported = compare.trl_round(python, tmp_path / "work.json", _work(side, [], warmup=1, steps=1), 1)
    assert measured.side == "trl" and measured.steps == [side.StepWork(2, 9200, 64, 4.0)]
    assert measured.tok_s == 2300.0 and reported == {"versions": {"trl": "x"}, "torch_threads": 2}


def test_trl_round_failure_shows_the_processs_errors(compare, side, tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "echo 'no GRPOTrainer here' >&2\nexit 3")
    with pytest.raises(RuntimeError, match="(?s)exit 3.*no GRPOTrainer here"):
        compare.trl_round(python, tmp_path / "work.json", _work(side, []), 1)


@pytest.mark.skipif(not TRL_PYTHON.is_file(), reason="no TRL venv at bench/.venv-trl: `bash bench/trl_env.sh` makes it")
def test_trl_side_runs_one_tiny_step_in_its_venv(compare, side, tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = compare.export_prompts(tokenizer, "kuhn_poker", {}, 2)
    work = _work(side, prompts, model=str(tiny_model_dir), group_size=2, groups=2, max_new_tokens=8, micro_batch=2,
                 warmup=0, steps=1, threads=1)
    work_file = tmp_path / "work.json"
    work_file.write_text(work.to_json())
    done = subprocess.run(compare.trl_command(TRL_PYTHON, work_file), capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    [step] = report["steps"]
    assert step["step"] == 1 and step["completions"] == 4 and 4 <= step["generated_tokens"] <= 4 * 8
    assert step["seconds"] > 0
    # The TRL venv runs the model code of Strat's venv.
    assert report["versions"]["transformers"] == transformers.__version__
    assert report["versions"]["torch"] == torch.__version__ and report["torch_threads"] == 1
