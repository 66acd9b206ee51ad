"""FSDP2 ranks that never hold the whole model: rank 0 alone reads the weights and broadcasts them into every rank's
shards, for the policy and for the KL reference, which is sharded as well. Two ranks under gloo in spawned
processes (`fsdp_ranks`), against one unsharded learner."""

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from strat.model.build import LoraSettings
from strat.train.learner import LearnerSettings

from .fsdp_ranks import spawn_two_ranks

pytestmark = pytest.mark.long  # two spawned gloo ranks: 1-3 min; make test-faults

SETTINGS = LearnerSettings(lr=2e-3, micro_batch=1, share_prefix=False, kl_reference="snapshot")
"""A KL anchored on the snapshot, so that the reference is built, sharded and reloaded."""
SETTINGS = replace(SETTINGS, loss=replace(SETTINGS.loss, kl_type="forward", kl_coef=0.1))


def tied_copy(model_dir: Path, target: Path) -> Path:
    """The tiny model with its head tied to the embeddings (as Qwen2.5 0.5B and 1.5B have)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    config.tie_word_embeddings = True
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    weights = {k: v for k, v in load_file(model_dir / "model.safetensors").items() if k != "lm_head.weight"}
    model.load_state_dict(weights, strict=False)
    model.tie_weights()
    shutil.copytree(model_dir, target)
    (target / "model.safetensors").unlink()
    model.save_pretrained(target)
    return target


@pytest.mark.parametrize("case", ["full-tied", "lora"])
def test_only_rank_0_reads_the_weights_and_the_shards_train_as_one_learner(
    tiny_model_dir: Path, tmp_path: Path, case: str
) -> None:
    model_dir, settings = tiny_model_dir, SETTINGS
    if case == "full-tied":  # the tie must survive sharding, or the head and the embeddings train apart
        model_dir = tied_copy(tiny_model_dir, tmp_path / "tied")
    else:
        settings = replace(SETTINGS, lora=LoraSettings(r=4, alpha=8))
    out = tmp_path / "out"
    out.mkdir()
    ours, theirs = spawn_two_ranks(model_dir, settings, out)
    checkpoint = load_file(model_dir / "model.safetensors")

    # Rank 1 never reads the weights, and never holds more than its shards of the policy and the reference and two
    # whole tensors in transit (torch's MemTracker over the learner's construction): no full copy of either.
    assert ours["reads"][:2] == [str(model_dir)] * 2 and theirs["reads"] == []
    assert ours["dtensors"] and theirs["dtensors"]
    largest = max(t.nbytes for t in checkpoint.values())
    assert theirs["build_peak_bytes"] <= theirs["model_bytes"] + theirs["reference_bytes"] + 2 * largest
    assert theirs["model_bytes"] < 0.6 * ours["single_bytes"]
    assert theirs["reference_bytes"] < 0.6 * ours["single_reference_bytes"]

    # The shards hold the checkpoint's weights exactly (and, with LoRA, the adapters the unsharded learner draws).
    full = ours["full"]
    assert set(full) == set(ours["single_full"])
    assert all(torch.equal(full[k], v) for k, v in ours["single_full"].items())
    plain = {k.removeprefix("base_model.model.").replace(".base_layer.", "."): v for k, v in full.items()}
    assert all(torch.equal(plain[k], v) for k, v in checkpoint.items())
    assert all(torch.equal(ours["reference_full"][k], v) for k, v in checkpoint.items())
    assert ours["tied"] == theirs["tied"] == ours["single_tied"] == (case == "full-tied")
    for rank in (ours, theirs):  # the rotary embedding's inv_freq is in no state dict
        assert all(torch.equal(rank["buffers"][k], v) for k, v in ours["single_buffers"].items())

    # The sharded reference scores as the unsharded one; after take_snapshot it holds the snapshot.
    for rank in (ours, theirs):
        assert torch.allclose(rank["reference_logprobs"], ours["single_reference_logprobs"], atol=1e-6)
    snapshot = ours["snapshot"]
    assert all(torch.equal(ours["snapshot_reference_full"][k], v) for k, v in snapshot.items())

    # Three updates (the last two anchored on the snapshot) as one unsharded learner takes them.
    for mine, single in zip(ours["updates"], ours["single_updates"], strict=True):
        for key in ("loss/policy", "loss/kl", "learn/grad_norm", "loss/ratio_mean", "logprob/engine_learner_gap"):
            assert mine[key] == pytest.approx(single[key], rel=1e-4, abs=1e-7), key
    assert ours["updates"][2]["loss/kl"] > 1e-9
    assert all(torch.allclose(ours["full_after"][k], v, atol=1e-5) for k, v in ours["single_full_after"].items())
