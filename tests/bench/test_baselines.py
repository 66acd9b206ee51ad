"""The in-process baselines and figure 2 on the tiny model: they run, count what they measure,
and leave the process as they found it. Behaviour only, no speed targets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from strat.algorithm.losses import LossConfig
from strat.benchmarks.baselines import GRPOSettings, ReplayPolicy, hf_generate, load_model, plain_grpo
from strat.benchmarks.figures import BenchContext, BenchSizes, learner_efficiency
from strat.config import OpponentConfig
from strat.config_loading import load_config
from strat.engines import SamplingParams, build_engine
from strat.play.rollout import RolloutRunner, RolloutSettings, plan_groups


def test_hf_generate_forced_length_and_stop(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = load_model(tiny_model_dir, train=False)
    prompts = [[5, 6, 7], [8, 9]]
    out = hf_generate(model, tokenizer, prompts, max_new_tokens=5, min_new_tokens=5)
    assert [len(r) for r in out] == [5, 5]
    free = hf_generate(model, tokenizer, prompts, max_new_tokens=6)
    assert all(1 <= len(r) <= 6 for r in free)


def test_plain_grpo_runs_one_thread_and_counts_tokens(tiny_model_dir: Path) -> None:
    threads = torch.get_num_threads()
    settings = GRPOSettings(game="kuhn_poker", depth=2, group_size=2, groups=2, max_new_tokens=8, temperature=1.0,
                            top_p=1.0, lr=1e-3, micro_batch=2, grad_clip=1.0, format_penalty=-3.0)
    result = plain_grpo(tiny_model_dir, settings, LossConfig(), steps=1, reference_tok_s=123.0)
    assert result.threads == 1 and torch.get_num_threads() == threads
    assert 0 < result.generated_tokens <= 2 * 2 * 8
    assert result.step_s >= result.generate_s > 0 and result.learn_s > 0
    assert result.tokens_per_step_s == pytest.approx(result.generated_tokens / result.step_s)
    assert result.reference_tok_s == 123.0


def _episodes(model_dir: Path):
    settings = RolloutSettings(game="kuhn_poker", group_size=2, max_tokens=12, opponents=(OpponentConfig(kind="self"),))
    engine = build_engine("hf", model_dir)
    calls = []

    def policy(prompts, params):
        out = engine.generate(prompts, params)
        calls.append((prompts, params, out))
        return out

    plans = plan_groups(settings, 0, 1, 0, 2)
    runner = RolloutRunner(settings, lambda m: engine.encode_chat(m), policy)
    return runner, plans, runner.run(plans, 7), calls


def test_replay_policy_reproduces_a_rollout_and_detects_divergence(tiny_model_dir: Path) -> None:
    runner, plans, episodes, calls = _episodes(tiny_model_dir)
    replayed = RolloutRunner(runner.settings, runner.encode, ReplayPolicy(calls)).run(plans, 7)
    assert [e.turns for e in replayed] == [e.turns for e in episodes]
    stray = ReplayPolicy(calls)
    with pytest.raises(RuntimeError, match="diverged"):
        stray([[1, 2, 3]], SamplingParams())


def test_learner_figure_on_tiny_rollout(tiny_model_dir: Path, tmp_path: Path) -> None:
    _, _, episodes, _ = _episodes(tiny_model_dir)
    config = load_config("configs/kuhn_poker_tiny.yaml", ["algorithm.micro_batch=2", "algorithm.group_size=2"])
    ctx = BenchContext(config=config, config_path="configs/kuhn_poker_tiny.yaml", sizes=BenchSizes(learner_repeats=1),
                       model_path=str(tiny_model_dir), base_model_path=str(tiny_model_dir), workdir=tmp_path,
                       log=lambda _: None)
    figure = learner_efficiency(ctx, episodes)
    turns = [t for e in episodes for t in e.turns if t.response_token_ids]
    assert figure.samples == len(turns)
    assert figure.tokens == sum(len(t.prompt_token_ids) + len(t.response_token_ids) for t in turns)
    assert figure.micro_batches == -(-figure.samples // 2)
    assert 0.0 <= figure.padding_fraction < 1.0 and figure.efficiency is not None and figure.efficiency > 0
