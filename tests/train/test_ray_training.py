"""The training service on a local Ray node: the loop with both backends, weight sync, resume."""

import json
import re
from pathlib import Path

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from strat import metrics
from strat.algorithm.records import TrainSample
from strat.config_loading import load_config
from strat.engines import SamplingParams
from strat.train.trainer import Trainer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
REQUIRED = (
    "step", "episodes/count", "groups/zero_spread_frac", "reward/mean", "cot/score_mean", "cot/predict_acc",
    "cot/belief_acc", "format/valid_rate", "loss/policy", "loss/kl", "logprob/engine_learner_gap",
    "time/rollout_s", "time/learn_s", "time/sync_s", "time/step_s", "throughput/gen_tokens_per_s",
)
SMALL = [
    "algorithm.groups_per_step=2", "algorithm.group_size=3", "reasoning.max_new_tokens=24",
    "eval.games=6", "eval.samples_per_infoset=2", "eval.bootstrap=5", "logging.samples_every=1",
    "resources.rollout_workers=1",
    # No KL penalty: with the next rollout overlapping the update, the engine-learner gap below holds one update's
    # drift as well as numerics, and the default's KL term (forward, 0.2) moves the policy enough to lift it to ~0.004.
    "algorithm.kl_type=none", "algorithm.kl_coef=0", "algorithm.kl_reference=initial",
    # The loop's tests need a model that follows the format, not the default warm start's full schedule: the
    # settings of the shared `warm_model_dir` fixture (WarmStartSettings(depth=2, epochs=2, episodes=400, max_seconds=3600)), so that
    # the trainer's warm start and the fixture are one cached build in the suite, not two (hence depth 2 here).
    "warm_start.player=random", "warm_start.episodes=400", "warm_start.epochs=2", "warm_start.max_seconds=3600",
    "reasoning.depth=2",
]



def _config(tmp_path: Path, model_dir: Path, *extra: str):
    return load_config(DEFAULT, [f"model.path={model_dir}", f"run.output_dir={tmp_path}", *SMALL, *extra])


@pytest.mark.parametrize(("backend", "staleness"), [("hf", 0), ("vllm", 1)])
def test_loop_runs_and_writes_outputs(
    local_ray, tmp_path: Path, tiny_model_dir: Path, backend: str, staleness: int
) -> None:
    # vLLM runs with the next rollout overlapping the update; evaluation at step 2 then has to wait
    # for the rollout of step 3 and sync first. The hf run also replays zero-spread groups.
    steps = 2 + staleness
    zero_spread = "resample" if backend == "hf" else "keep"
    config = _config(tmp_path, tiny_model_dir, f"engine.backend={backend}", f"schedule.steps={steps}",
                     "schedule.eval_every=2", "schedule.checkpoint_every=2", f"schedule.max_staleness={staleness}",
                     f"algorithm.zero_spread={zero_spread}", "algorithm.resample_rounds=1")
    records = Trainer(config, config.run_dir).run()
    assert [r["step"] for r in records] == list(range(steps + 1))
    for record in records[1:]:
        missing = [key for key in REQUIRED if key not in record]
        assert not missing, missing
        assert record["episodes/count"] == 6
        assert record["logprob/engine_learner_gap"] < 1e-3
        if zero_spread == "resample":
            # One round: each flat group of the 2 was played again once; those replaced are resample groups in the
            # ledger, and with no flat group left every one played again was replaced.
            played, resampled = record["groups/resample_played"], record["groups/resampled"]
            assert resampled == len(_resample_groups(config.run_dir, record["step"]))
            assert resampled <= played <= 2
            if record["groups/zero_spread_frac"] == 0.0:
                assert played == resampled
    assert "eval/exploitability" in records[0] and "eval/exploitability_ci" in records[2]
    assert "eval/win_rate_vs_random" in records[2]
    # Held-out opponents (by default the heuristic and equilibrium players, never trained against) at the first and
    # the last evaluation only; the last step is evaluated even when eval_every does not divide it.
    for opponent in ("heuristic", "equilibrium"):
        assert f"eval/return_vs_{opponent}" in records[0] and f"eval/return_vs_{opponent}" in records[-1]
        assert 0.0 <= records[-1][f"eval/win_rate_vs_{opponent}"] <= 1.0
        assert all(f"eval/return_vs_{opponent}" not in r for r in records[1:-1])
    assert "eval/return_vs_random" in records[-1]
    run_dir = config.run_dir
    assert [r["step"] for r in metrics.read(run_dir)] == list(range(steps + 1))
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "step_2" / "COMPLETE").is_file()
    assert (run_dir / "checkpoints" / "step_2" / "model.safetensors").is_file()
    assert list((run_dir / "tensorboard").iterdir())
    transcript = (run_dir / "samples" / "step_1.md").read_text()
    assert "turn 0" in transcript and "Private information" in transcript


def _resample_groups(run_dir: Path, step: int) -> set[str]:
    """The resampled groups (ids `s<step>-w<worker>-r<round>-g<index>`) among those step `step` trained on."""
    (line,) = [line for line in metrics.read_ledger(run_dir) if line["step"] == step]
    return {group for group, _, _ in line["episodes"] if re.search(r"-r\d+-g\d+$", group)}


def test_flat_groups_are_played_again(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    """Random weights never write a legal move: every episode ends in the format penalty, so every group is flat and
    each of the two rounds must play both groups again, and none can replace them."""
    config = _config(tmp_path, tiny_model_dir, "engine.backend=hf", "warm_start.enabled=false", "schedule.steps=1",
                     "schedule.eval_every=0", "schedule.checkpoint_every=0", "schedule.max_staleness=0",
                     "algorithm.zero_spread=resample", "algorithm.resample_rounds=2", "reasoning.max_new_tokens=8")
    record = Trainer(config, config.run_dir).run()[-1]
    assert record["step"] == 1
    assert record["format/valid_rate"] == 0.0
    assert record["groups/zero_spread_frac"] == 1.0
    assert record["groups/resample_played"] == 2 * 2
    assert record["groups/resampled"] == 0 and _resample_groups(config.run_dir, 1) == set()
    assert record["episodes/count"] == 6


def _reference_greedy(model_dir: Path, state: dict[str, torch.Tensor], prompts: list[list[int]]) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.load_state_dict(state)
    stops = set(model.generation_config.eos_token_id)
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                       eos_token_id=list(stops), pad_token_id=model.generation_config.pad_token_id)
        tokens = generated[0, len(prompt):].tolist()
        cut = next((i for i, t in enumerate(tokens) if t in stops), None)
        out.append(tokens if cut is None else tokens[: cut + 1])
    return out


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_after_sync_every_agent_generates_like_the_learner(
    local_ray, tmp_path: Path, tiny_model_dir: Path, backend: str
) -> None:
    agents = 2 if backend == "hf" else 1  # each vLLM engine costs a start-up; two agents are checked on hf
    config = _config(tmp_path, tiny_model_dir, f"engine.backend={backend}", f"resources.agents={agents}",
                     "resources.cpus_per_agent=0.25", "algorithm.lr=0.05")
    trainer = Trainer(config, config.run_dir)
    trainer._prepare_run_dir()
    trainer.model_path = str(tiny_model_dir)
    trainer._start_ray()
    try:
        trainer._start_actors()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            for text in ("You hold the King.", "Your opponent bet.", "Legal actions: pass, bet")
        ]
        prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
        greedy = SamplingParams(max_tokens=16, temperature=0)
        before = [ray.get(agent.generate.remote(prompts, greedy)) for agent in trainer.fleet.agents]
        samples = [
            TrainSample("g", f"e{i}", "player_0", 0, tuple(prompt), gen.token_ids, gen.logprobs, -1.0)
            for i, (prompt, gen) in enumerate(zip(prompts, before[0], strict=True))
        ]
        trainer.fleet.learner_get(trainer.fleet.learner.update(samples))
        trainer.fleet.sync.push(1)
        state = trainer.fleet.learner_get(trainer.fleet.learner.state_dict())
        expected = _reference_greedy(tiny_model_dir, state, prompts)
        for agent, old in zip(trainer.fleet.agents, before, strict=True):
            after = [list(g.token_ids) for g in ray.get(agent.generate.remote(prompts, greedy))]
            assert after != [list(g.token_ids) for g in old]
            assert after == expected
    finally:
        trainer._stop_actors()


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in records]


RESUMABLE = ["engine.backend=hf", "schedule.max_staleness=0", "schedule.checkpoint_every=1", "schedule.eval_every=0",
             "warm_start.enabled=false", "algorithm.lr=0.003", "algorithm.groups_per_step=4",
             "reasoning.max_new_tokens=160"]
"""A short synchronous run checkpointed every step, from an already warm-started model (resume is exact there)."""


def straight_and_resumed(tmp_path: Path, model_dir: Path, extra: list[str], stop: int,
                         steps: int) -> tuple[Path, Path]:
    """The default config with `SMALL`, `RESUMABLE` and `extra` on `model_dir`, trained `steps` steps straight (in
    tmp_path/a), and stopped after `stop` then resumed to `steps` (in tmp_path/b): the two run directories."""
    common = [f"model.path={model_dir}", *SMALL, *RESUMABLE, *extra]
    straight = load_config(DEFAULT, [*common, f"run.output_dir={tmp_path / 'a'}", f"schedule.steps={steps}"])
    Trainer(straight, straight.run_dir).run()
    first = load_config(DEFAULT, [*common, f"run.output_dir={tmp_path / 'b'}", f"schedule.steps={stop}"])
    Trainer(first, first.run_dir).run()
    resumed = load_config(first.run_dir / "config.yaml", [f"schedule.steps={steps}"])
    Trainer(resumed, first.run_dir, resume=True).run()
    return straight.run_dir, first.run_dir


def test_resume_reproduces_an_uninterrupted_run(local_ray, tmp_path: Path, warm_model_dir: Path) -> None:
    # Exact resume is promised for synchronous runs; with overlap the rollout in flight at a checkpoint
    # is regenerated with the restored weights.
    # The fixture is already warm-started: no second warm start on top of it.
    common = ["engine.backend=hf", "schedule.max_staleness=0", "schedule.checkpoint_every=1", "schedule.eval_every=2",
              "warm_start.enabled=false",
              "game.opponents=[{kind: self, weight: 1}, {kind: snapshot, weight: 1}, {kind: scripted, name: random, weight: 1}]",
              "schedule.snapshot_every=1", "algorithm.lr=0.003", "reasoning.max_new_tokens=160"]
    # Stopped after step 1's checkpoint and resumed for one step: step 2's rollout plays the restored weights against
    # the restored snapshot, its update starts from the restored Adam state, and the step-2 evaluation sees its result.
    straight = _config(tmp_path / "a", warm_model_dir, *common, "schedule.steps=2")
    Trainer(straight, straight.run_dir).run()

    first = _config(tmp_path / "b", warm_model_dir, *common, "schedule.steps=1")
    Trainer(first, first.run_dir).run()
    resumed = load_config(first.run_dir / "config.yaml", ["schedule.steps=2"])
    Trainer(resumed, first.run_dir, resume=True).run()

    a, b = metrics.read(straight.run_dir), metrics.read(first.run_dir)
    assert [r["step"] for r in b] == [0, 1, 2]
    assert any(key.startswith("eval/") for key in a[2]) and any(key.startswith("eval/") for key in b[2])
    # A run evaluates at its last step: the first run (steps=1) did at step 1, where the straight one did not.
    # Evaluation draws from its own seeds and changes nothing the training reads.
    extra = sorted(k for k in b[1] if k.startswith("eval/"))
    assert "eval/return_vs_random" in extra and not any(k.startswith("eval/") for k in a[1])
    b[1] = {k: v for k, v in b[1].items() if not k.startswith("eval/") and k != "time/eval_s"}
    a[1] = {k: v for k, v in a[1].items() if k != "time/eval_s"}
    assert any(r.get("learn/grad_norm", 0) > 0 for r in a), "the run must learn for this test to mean anything"
    assert _comparable(a) == _comparable(b)
    assert json.dumps(_comparable(a), sort_keys=True) == json.dumps(_comparable(b), sort_keys=True)
