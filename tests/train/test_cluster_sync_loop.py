"""The driver's weight sync into agents that cannot take tensors through Ray: directory sync from a LoRA learner,
and collective sync (a gloo weight group) into a multi-process vLLM agent."""

from pathlib import Path

import pytest
import ray

from strat import metrics
from strat.algorithm.records import TrainSample
from strat.config_loading import load_config
from strat.engines import SamplingParams
from strat.train.trainer import Trainer

from .test_ray_training import _config

# Over a minute each on 2 cores (a multi-process vLLM start-up, a LoRA loop with resume): make test-faults.
pytestmark = pytest.mark.long

# Directory sync into a multi-process vLLM engine is checked without the trainer by tests/cluster/test_weight_sync.py
# (`test_directory_path[multiprocess_engine]`, two versions and pruning) and through the trainer into an in-process
# vLLM agent by test_ray_training.py; the trainer's agent actor hosting a multi-process engine is the collective
# case's. Its own trainer-level case (~2 min in CI) was dropped on 2026-12-03 for CI time.
@pytest.mark.parametrize(("extra", "mode"), [
    (["engine.backend=hf", "engine.weight_sync=directory", "learner.lora.enabled=true", "learner.lora.r=4"], "directory"),
    (["engine.backend=vllm", "engine.multiprocess=true", "engine.weight_sync=collective"], "collective"),
], ids=["hf-lora", "vllm-multiprocess-collective"])
def test_sync_makes_agents_answer_as_the_learner(local_ray, tmp_path: Path, tiny_model_dir: Path, extra, mode) -> None:
    config = _config(tmp_path, tiny_model_dir, *extra, "resources.cpus_per_agent=0.25", "algorithm.lr=0.05")
    trainer = Trainer(config, config.run_dir)
    trainer._prepare_run_dir()
    trainer.model_path = str(tiny_model_dir)
    trainer._start_ray()
    try:
        trainer._start_actors()
        assert trainer.fleet.sync.mode == mode
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        prompts = [list(tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"])
                   for t in ("You hold the King.", "Your opponent bet.", "Legal actions: pass, bet")]
        greedy = SamplingParams(max_tokens=16, temperature=0)
        target = tuple(tokenizer.encode("<action>bet</action>") + [tokenizer.convert_tokens_to_ids("<|im_end|>")])
        before = [list(g.token_ids) for g in ray.get(trainer.fleet.agents[0].generate.remote(prompts, greedy))]
        samples = [TrainSample("g", f"e{i}", "player_0", 0, tuple(p), target, (0.0,) * len(target), 1.0)
                   for i, p in enumerate(prompts)]
        for _ in range(3):
            trainer.fleet.learner_get(trainer.fleet.learner.update(samples))
        expected = trainer.fleet.learner_get(trainer.fleet.learner.greedy(prompts, 16))
        assert expected != before
        for version in (1, 2):
            # Back to the initial weights first: each sync, the second one too, must move the agent's.
            ray.get(trainer.fleet.agents[0].load_weights_dir.remote(str(tiny_model_dir), 0))
            reset = ray.get(trainer.fleet.agents[0].generate.remote(prompts, greedy))
            assert [list(g.token_ids) for g in reset] == before
            trainer.fleet.sync.push(version)
            after = [list(g.token_ids) for g in ray.get(trainer.fleet.agents[0].generate.remote(prompts, greedy))]
            assert after == expected
        if mode == "directory":
            assert [p.name for p in (config.run_dir / "sync").iterdir()] == ["step_2"]
        else:  # the weights went through the weight group, formed once for both versions
            assert not (config.run_dir / "sync").exists()
            assert trainer.fleet.sync.broadcasts["policy"].members == trainer.fleet.agents
    finally:
        trainer._stop_actors()


def test_lora_directory_loop_with_snapshot_resumes(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    common = ["engine.backend=hf", "engine.weight_sync=directory", "learner.lora.enabled=true", "learner.lora.r=4",
              "schedule.max_staleness=0", "schedule.checkpoint_every=1", "schedule.eval_every=0",
              "game.opponents=[{kind: self, weight: 1}, {kind: snapshot, weight: 1}]", "schedule.snapshot_every=1",
              "algorithm.lr=0.01"]
    first = _config(tmp_path, tiny_model_dir, *common, "schedule.steps=2")
    Trainer(first, first.run_dir).run()
    assert (first.run_dir / "checkpoints" / "step_2" / "adapter" / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in (first.run_dir / "sync").iterdir()) == ["snapshot", "step_2"]
    resumed = load_config(first.run_dir / "config.yaml", ["schedule.steps=3"])
    Trainer(resumed, first.run_dir, resume=True).run()
    assert [r["step"] for r in metrics.read(first.run_dir)] == [1, 2, 3]  # no step-0 record: eval_every=0
