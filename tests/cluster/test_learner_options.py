"""Learner options for cluster runs, on the CPU: bf16 mixed precision, gradient checkpointing, LoRA
(merged export, checkpoints, resume, the base model as KL reference), FSDP2 at world size 1 (gloo),
and sharded safetensors exports."""

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from strat.algorithm.losses import LossConfig
from strat.engines import SamplingParams, build_engine
from strat.model import checkpoint
from strat.model.build import LoraSettings, resolve_device, shard_model
from strat.model.safetensors_io import write_safetensors
from strat.train.learner import LearnerSettings, PolicyLearner

from .sync_helpers import perturb, perturbing_samples, prompts_for

LORA = LoraSettings(r=4, alpha=8)


def _base_state(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


def test_bf16_mixed_precision_with_gradient_checkpointing_updates_the_weights(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-2, dtype="bfloat16", gradient_checkpointing=True,
                                                            export_dtype="bfloat16"))
    assert learner.model.is_gradient_checkpointing
    # Master weights stay float32; the matmuls run in bf16.
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    captured = {}

    def keep_dtype(module, args, output) -> None:
        captured["dtype"] = output.dtype

    handle = learner.model.model.layers[0].mlp.down_proj.register_forward_hook(keep_dtype)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    metrics = perturb(learner)
    handle.remove()
    assert captured["dtype"] == torch.bfloat16
    assert all(m["learn/grad_norm"] > 0 for m in metrics)
    changed = [k for k, v in learner.model.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) == len(before)
    exported = learner.state_dict()
    assert {t.dtype for t in exported.values()} == {torch.bfloat16}
    assert set(exported) == set(_base_state(tiny_model_dir))


def test_frozen_parameters_stay_as_loaded_and_the_rest_train(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-2, freeze=("lm_head", "embed_tokens")))
    frozen = {n for n, p in learner.model.named_parameters() if not p.requires_grad}
    assert frozen == {"lm_head.weight", "model.embed_tokens.weight"}
    assert sum(len(group["params"]) for group in learner.optimizer.param_groups) == len(
        list(learner.model.parameters())) - 2
    perturb(learner)
    base = _base_state(tiny_model_dir)
    exported = learner.state_dict()
    moved = {k for k in exported if not torch.equal(exported[k], base[k])}
    assert moved and not moved & frozen
    assert {k for k in base if "layers." in k and k.endswith("proj.weight")} <= moved


@pytest.mark.parametrize(("freeze", "expected"), [(("lm_hed",), "'lm_hed' names no parameter"),
                                                   (("model.", "lm_head"), "leaves nothing to train")])
def test_freeze_patterns_must_name_parameters_and_leave_some(tiny_model_dir: Path, freeze: tuple[str, ...],
                                                              expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        PolicyLearner(tiny_model_dir, LearnerSettings(freeze=freeze))


def test_lora_trains_only_the_adapter_and_exports_merged_weights(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2, lora=LORA))
    trainable = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    base = _base_state(tiny_model_dir)
    assert all(torch.equal(t, base[k]) for k, t in learner.state_dict().items())  # B = 0: merged == base
    perturb(learner)
    after = dict(learner.model.named_parameters())
    moved = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert moved and moved <= trainable
    merged = learner.state_dict()
    assert set(merged) == set(base)  # Hugging Face names, no adapter keys
    differ = {k for k in merged if not torch.equal(merged[k], base[k])}
    targets = {k for k in base if any(f".{m}.weight" in k for m in LORA.target_modules)}
    assert differ == targets
    with build_engine("hf", tiny_model_dir) as engine:
        engine.load_state_dict(merged)
        prompts = prompts_for(learner.tokenizer)
        got = [list(g.token_ids) for g in engine.generate(prompts, SamplingParams(max_tokens=16, temperature=0))]
    assert got == learner.greedy(prompts, 16)


def test_lora_checkpoint_resumes_exactly_and_reads_as_a_plain_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    settings = LearnerSettings(lr=2e-2, lora=LORA)
    first = PolicyLearner(tiny_model_dir, settings)
    perturb(first)
    first.take_snapshot()
    ckpt = first.save(tmp_path, 2, {"baseline": {}}, keep=2)
    assert (ckpt.path / "adapter" / "adapter_model.safetensors").is_file()
    assert json.loads((ckpt.path / "adapter" / "adapter_config.json").read_text())["r"] == LORA.r
    # The top level is the merged model: eval, play and engines load it as is.
    plain = AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32)
    merged = first.state_dict()
    assert all(torch.equal(plain.state_dict()[k], merged[k]) for k in merged)

    second = PolicyLearner(tiny_model_dir, settings)
    loop_state = second.load(checkpoint.latest(tmp_path))
    assert loop_state["updates"] == 2 and second.updates == 2
    assert all(torch.equal(second.state_dict()[k], v) for k, v in merged.items())
    assert second.snapshot is not None and all(torch.equal(second.snapshot[k], v) for k, v in merged.items())
    samples = perturbing_samples(first.tokenizer)
    first.update(samples)
    second.update(samples)  # the same step only if the optimizer state came back too
    assert all(torch.equal(second.state_dict()[k], v) for k, v in first.state_dict().items())

    with pytest.raises(ValueError, match="lora.enabled=true"):
        PolicyLearner(tiny_model_dir, LearnerSettings()).load(ckpt)
    full = PolicyLearner(tiny_model_dir, LearnerSettings())
    plain_ckpt = full.save(tmp_path / "plain", 1, {}, keep=1)
    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        PolicyLearner(tiny_model_dir, settings).load(plain_ckpt)


def test_lora_kl_reference_is_the_base_model(tiny_model_dir: Path) -> None:
    loss = LossConfig(kl_type="forward", kl_coef=0.1)
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2, lora=LORA, loss=loss))
    assert learner.reference is None  # no second copy of the model
    first, second = perturb(learner)
    assert first["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: policy == base
    assert second["loss/kl"] > 0


def test_export_dir_is_atomic_and_replaces(tiny_model_dir: Path, tmp_path: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2))
    target = tmp_path / "sync" / "step_1"
    assert learner.export_weights_dir(target) == str(target)
    perturb(learner, steps=1)
    learner.export_weights_dir(target)  # again at the same path: replaced
    assert sorted(p.name for p in target.parent.iterdir()) == ["step_1"]
    exported = load_file(target / "model.safetensors")
    assert all(torch.equal(exported[k], v) for k, v in learner.state_dict().items())
    assert json.loads((target / "config.json").read_text())["model_type"] == "qwen2"


def test_large_exports_are_sharded_with_an_index(tiny_model_dir: Path, tmp_path: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    perturb(learner, steps=1)
    state = learner.state_dict()
    files = write_safetensors(state, tmp_path, max_shard_bytes=256 * 1024)
    assert len(files) > 1
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(state)
    with build_engine("hf", tiny_model_dir) as engine:
        engine.load_weights_dir(tmp_path)
        assert all(torch.equal(engine.model.state_dict()[k], v) for k, v in state.items())


@pytest.fixture
def gloo_world_of_one() -> Iterator[None]:
    import torch.distributed as dist

    # Port 0: the OS assigns the store's port as it binds it.
    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_fsdp2_at_world_size_one_matches_the_unsharded_learner(
    gloo_world_of_one, tiny_model_dir: Path, tmp_path: Path, lora: LoraSettings | None
) -> None:
    # FSDP2 forwards take whole sequences: so does the learner it is compared with (prefix sharing would differ
    # by float rounding, which AdamW's steps amplify past the tolerance).
    settings = LearnerSettings(lr=2e-2, lora=lora, share_prefix=False)
    sharded = PolicyLearner(tiny_model_dir, replace(settings, fsdp=True))
    plain = PolicyLearner(tiny_model_dir, settings)
    assert sharded.sharded and type(sharded.model).__name__.startswith("FSDP")
    perturb(sharded)
    perturb(plain)
    reference = plain.state_dict()
    assert all(torch.allclose(sharded.state_dict()[k], v, atol=1e-6) for k, v in reference.items())
    exported = load_file(Path(sharded.export_weights_dir(tmp_path / "sync" / "step_2")) / "model.safetensors")
    assert set(exported) == set(reference)
    ckpt = sharded.save(tmp_path, 2, {}, keep=1)
    resumed = PolicyLearner(tiny_model_dir, replace(settings, fsdp=True))
    resumed.load(ckpt)
    samples = perturbing_samples(plain.tokenizer)
    sharded.update(samples)
    resumed.update(samples)
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in sharded.state_dict().items())


def test_fsdp2_needs_a_process_group(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="torch.distributed"):
        shard_model(model, torch.device("cpu"))


def test_device_choice() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(RuntimeError, match="sees no GPU"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="allowed: auto, cpu, cuda"):
        resolve_device("tpu")
