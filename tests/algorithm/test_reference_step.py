"""The reference step (`strat/algorithm/reference.py`) against Strat's training path on the same step-1 episodes.

The episodes are played as the trainer plays step 1 with `engine.backend=hf` and `schedule.max_staleness=0`, by the
components its actors wrap, in-process (no Ray): the rollout worker's `RolloutRunner` on the hf engine with the
trainer's plans and sampling seed, the comparator's `score_episodes`, the trainer's `compute_advantages` and the
learner's `PolicyLearner.update`, all configured from configs/kuhn_poker_tiny.yaml through `strat.train.settings`.
The reference re-derives the comparison, the advantages and the update from those episodes and the same initial
weights: the advantages must be equal, the loss agree within 1e-6 and the updated weights within 1e-5 (the update
run in float64 by both; in float32, within 5e-5: see `TOLERANCE`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.algorithm import reference
from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.config_loading import load_config
from strat.engines import build_engine
from strat.play.rollout import RolloutRunner, derive_seed, plan_groups
from strat.play.settings import rollout_settings
from strat.train.learner import PolicyLearner
from strat.train.settings import advantage_config, learner_settings

CONFIG = Path(__file__).parents[2] / "configs" / "kuhn_poker_tiny.yaml"
# The default config's algorithm, fewer and shorter games (the update's maths does not depend on the batch's size).
# Depth 2 (the default is 1): the shared warm-started model (`warm_model_dir`) was taught the depth-2 format.
# The hybrid advantage (the default config trains on the outcome alone since 2026-12-04): the reference covers the
# process term too, and outcome-only is the hybrid without it.
OVERRIDES = ["reasoning.depth=2", "engine.backend=hf", "schedule.max_staleness=0", "algorithm.groups_per_step=3",
             "algorithm.group_size=4", "reasoning.max_new_tokens=96", "algorithm.advantage_mode=hybrid"]


def _settings(config) -> reference.Settings:
    """The reference's settings from the config; refuses options the reference does not cover."""
    algo, weights = config.algorithm, config.comparison.weights
    covered = {"advantage_mode": "hybrid", "baseline": "group", "credit": "response", "penalty_scope": "game",
               "policy_loss": "clipped", "loss_agg": "token_mean", "kl_type": "forward", "entropy_coef": 0.0,
               "move_entropy_coef": 0.0, "dph_divergence": "none", "epochs": 1, "lr_schedule": "constant"}
    assert {key: getattr(algo, key) for key in covered} == covered
    assert config.reasoning.top_p == 1.0 and config.comparison.agreement == "token_f1" and not config.comparison.skip_forced
    assert (config.comparison.prediction_target, config.comparison.belief_target) == ("sampled", "truth")
    return reference.Settings(
        depth=config.reasoning.depth, group_size=algo.group_size, max_new_tokens=config.reasoning.max_new_tokens,
        temperature=config.reasoning.temperature, format_penalty=algo.format_penalty,
        weights=(weights.predict, weights.belief, weights.agreement), lam=algo.lam, clip_low=algo.clip_eps_low,
        clip_high=algo.clip_eps_high, kl_coef=algo.kl_coef, is_cap=algo.is_cap, grad_clip=algo.grad_clip,
    )


@pytest.fixture(scope="module")
def step_one(warm_model_dir: Path):
    return play_step_one(warm_model_dir)


def play_step_one(model_dir: Path):
    """Step 1 of Strat's training path from `model_dir` up to the update: the config, the episodes and the samples
    with their advantages."""
    config = load_config(str(CONFIG), OVERRIDES)
    settings = rollout_settings(config)
    engine = build_engine("hf", model_dir)
    try:
        runner = RolloutRunner(settings, engine.encode_chat, engine.generate, snapshot=engine.generate)
        plans = plan_groups(settings, config.run.seed, 1, 0, config.algorithm.groups_per_step)
        episodes = runner.run(plans, derive_seed(config.run.seed, 1, 0, "sampling"))
    finally:
        engine.close()
    weights = config.comparison.weights
    scored = score_episodes(episodes, ComparisonWeights(weights.predict, weights.belief, weights.agreement),
                            skip_forced=config.comparison.skip_forced,
                            prediction_target=config.comparison.prediction_target,
                            belief_target=config.comparison.belief_target)
    samples, _ = compute_advantages(scored, advantage_config(config))
    return config, episodes, samples


def test_reference_advantages_equal_the_training_paths(step_one) -> None:
    config, episodes, samples = step_one
    s = _settings(config)
    ours = reference.advantages(episodes, reference.compare(episodes, s), s)
    theirs = {(x.episode_id, x.turn_index): x.advantage for x in samples}
    # Equal up to float64 rounding: the two sum and divide in their own orders (1e-15 apart on this model).
    assert {x.key: x.advantage for x in ours} == pytest.approx(theirs, rel=1e-12, abs=1e-12)
    assert any(value != 0 for value in theirs.values())  # the check has a signal to agree on


# The updated weights' tolerance per precision. In float64 the two updates agree to 1.1e-7 on this model, against
# 6e-4 moved (the learner still rounds advantages and behaviour log-probs to float32). In float32 they are 2.2e-5
# apart (6e-7 on the default config's depth-1 warm start): AdamW's first step divides each gradient by its own
# magnitude plus eps=1e-8, so where float32 summation leaves a gradient near eps its rounding moves the weight by up to
# lr; with eps=1e-6 the float32 gap falls to 9e-7 (measured 2026-12-03). Float64 checks the maths at the issue's
# 1e-5; float32 checks the precision users train in.
TOLERANCE = {torch.float64: 1e-5, torch.float32: 5e-5}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_reference_update_agrees_with_the_learners(step_one, warm_model_dir: Path, dtype: torch.dtype) -> None:
    """`PolicyLearner.update` and the reference's `update` from the same weights, on the same samples and
    minibatches: the mean loss within 1e-6, the updated weights within `TOLERANCE`."""
    config, episodes, samples = step_one
    s = _settings(config)
    learner = PolicyLearner(warm_model_dir, learner_settings(config))
    if dtype == torch.float64:  # in place: the optimizer (no state yet) keeps the same parameters
        learner.model.double()
        learner.reference.double()
    trained = [sample for sample in samples if sample.response_token_ids]
    parts = [[(x.episode_id, x.turn_index) for x in part] for part in learner.minibatches(trained, epoch=0)]
    metrics = learner.update(samples)
    steps = {int(state["step"]) for state in learner.optimizer.state.values()}
    updated = learner.model.state_dict()

    ours = [x for x in reference.advantages(episodes, reference.compare(episodes, s), s) if x.response]
    model = AutoModelForCausalLM.from_pretrained(warm_model_dir, dtype=dtype)
    initial = copy.deepcopy(model.state_dict())
    anchor = copy.deepcopy(model).eval().requires_grad_(False)  # kl_reference snapshot: the initial weights at step 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.algorithm.lr)
    index = {x.key: i for i, x in enumerate(ours)}
    losses = reference.update(model.train(), anchor, optimizer, ours, s, [[index[k] for k in part] for part in parts])
    assert len(losses) == config.algorithm.minibatches and steps == {len(losses)}
    assert abs(sum(losses) / len(losses) - metrics["loss/policy"]) < 1e-6
    gap = max(float((tensor - updated[name]).abs().max()) for name, tensor in model.state_dict().items())
    moved = max(float((tensor - updated[name]).abs().max()) for name, tensor in initial.items())
    assert gap < TOLERANCE[dtype] and moved > 10 * gap, (gap, moved)  # the update moved the weights past the gap


def test_reference_step_runs_on_its_own(warm_model_dir: Path) -> None:
    """The reference's own rollout with `generate`: its behaviour log-probs are the model's at the temperature, and
    `train_step` moves the weights."""
    s = reference.Settings(depth=2, group_size=2, max_new_tokens=96)
    model = AutoModelForCausalLM.from_pretrained(warm_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(warm_model_dir)
    anchor = copy.deepcopy(model).eval().requires_grad_(False)
    before = copy.deepcopy(model.state_dict())
    out = reference.train_step(model, anchor, torch.optim.AdamW(model.parameters(), lr=3e-4), tokenizer, [5], s)
    assert len(out["episodes"]) == 2 and all(e.turns for e in out["episodes"]) and len(out["losses"]) == 1
    with torch.no_grad():
        for sample in out["samples"]:
            assert torch.allclose(reference.logprobs(anchor, sample, 1.0), torch.tensor(sample.behaviour), atol=1e-4)
    assert any(not torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
