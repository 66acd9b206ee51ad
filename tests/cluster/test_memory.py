"""The memory plan: parameter shapes and byte counts against torch's for built models, Qwen2.5 figures by hand,
activation estimates against peaks measured on CPU, and `strat plan --cluster ...,gpu_memory=...`."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from strat import cli
from strat.algorithm.losses import token_logprobs
from strat.cluster.memory import (
    Batch,
    activation_parts,
    engine_memory,
    kv_bytes_per_token,
    learner_memory,
    lora_shapes,
    parameter_count,
    parameter_shapes,
    shape_from_config,
)
from strat.cluster.placement import parse_cluster
from strat.config_loading import load_config
from strat.errors import PlacementError
from tests.foundation.test_hub_models import add_revision, set_ref

REPO = Path(__file__).resolve().parents[2]
KUHN_1_5B = REPO / "configs" / "cluster" / "qwen2_5_1_5b_kuhn.yaml"

QWEN2_5 = {  # the fields of the published config.json files that the plan reads
    "0.5B": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "1.5B": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "7B": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False},
}


def qwen(size: str) -> dict[str, Any]:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16", **QWEN2_5[size]}


def test_qwen2_5_parameters_by_hand() -> None:
    # 1.5B: embeddings 151936 x 1536 (tied) + 28 layers x (q 1536x1536 + 1536, k and v 256x1536 + 256 each,
    # o 1536x1536, MLP 3 x 8960x1536, two norms 1536) + the final norm 1536.
    layer = (1536 * 1536 + 1536) + 2 * (256 * 1536 + 256) + 1536 * 1536 + 3 * 8960 * 1536 + 2 * 1536
    assert layer == 46_797_824
    assert parameter_count(shape_from_config(qwen("1.5B"))) == 151936 * 1536 + 28 * layer + 1536 == 1_543_714_304
    assert parameter_count(shape_from_config(qwen("0.5B"))) == 494_032_768
    assert parameter_count(shape_from_config(qwen("7B"))) == 7_615_616_512  # lm_head untied: + 152064 x 3584


def test_qwen2_5_actor_figures_by_hand() -> None:
    config = load_config(KUHN_1_5B, ["model.path=tiny:kuhn_poker"])
    shape = shape_from_config(qwen("1.5B"))
    parts = {part.what.split(" (")[0].split(",")[0]: part.bytes for part in learner_memory(shape, config).parts}
    # Full fine-tune: float32 weights, gradients and AdamW's two moments, 16 bytes per parameter (23.0 GiB).
    assert parts["weights"] + parts["gradients"] + parts["AdamW moments"] == 16 * 1_543_714_304
    # bf16 logits of 8 sequences x (384 + 1) positions x 151936, and 12 float32 bytes each.
    assert parts["logits"] == 8 * 385 * 151936 * (2 + 12)
    # KV cache per token: keys and values x 28 layers x 2 heads x 128 x 2 bytes.
    assert kv_bytes_per_token(shape, "bfloat16", 1) == 2 * 28 * 2 * 128 * 2 == 28_672

    seven = shape_from_config(qwen("7B"))
    leduc = load_config(REPO / "configs" / "cluster" / "qwen2_5_7b_leduc.yaml", ["model.path=tiny:leduc_poker"])
    per_layer = 64 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + 3 * (3584 + 18944))  # r x (in + out), 7 projections
    adapters = lora_shapes(seven, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), 64)
    assert sum(a.numel for a in adapters) == 28 * per_layer == 161_480_704
    parts = {part.what.split(" (")[0]: part.bytes for part in learner_memory(seven, leduc).parts}
    assert parts["base weights"] == 2 * 7_615_616_512  # bf16, frozen
    # Tensor parallelism 2: half the weights, and the 4 key/value heads split 2 per rank.
    engine = {part.what.split(" (")[0]: part.bytes for part in engine_memory(seven, leduc, "agent", 2).parts}
    assert engine["weights"] == 2 * 7_615_616_512 // 2
    assert kv_bytes_per_token(seven, "bfloat16", 2) == 2 * 28 * 2 * 128 * 2


CONFIGS = {
    "qwen2": {"model_type": "qwen2", "tie_word_embeddings": True},
    "qwen3": {"model_type": "qwen3", "tie_word_embeddings": False},
    "llama": {"model_type": "llama", "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False},
    "mistral": {"model_type": "mistral", "tie_word_embeddings": False},
}


@pytest.mark.parametrize("kind", CONFIGS)
def test_weights_and_adamw_bytes_equal_torch(kind: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, **CONFIGS[kind]}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields), dtype=torch.float32)
    shape = shape_from_config(fields)
    assert {p.name: p.shape for p in parameter_shapes(shape)} == {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert sum(p.numel() * p.element_size() for p in model.parameters()) == 4 * parameter_count(shape)
    optimizer = torch.optim.AdamW(model.parameters())
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    moments = sum(t.numel() * t.element_size() for state in optimizer.state.values()
                  for key, t in state.items() if key != "step")
    assert grads == 4 * parameter_count(shape) and moments == 8 * parameter_count(shape)


def test_lora_adapters_equal_peft() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from strat.model.build import LoraSettings, add_lora

    fields = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 300, "tie_word_embeddings": False}
    for targets in (("q_proj", "v_proj", "down_proj"), ("all-linear",)):
        model, _ = add_lora(Qwen2ForCausalLM(Qwen2Config(**fields)), LoraSettings(r=4, target_modules=targets), seed=0)
        trained = {n.removeprefix("base_model.model.").replace(".default", ""): tuple(p.shape)
                   for n, p in model.named_parameters() if p.requires_grad}
        assert {a.name: a.shape for a in lora_shapes(shape_from_config({"model_type": "qwen2", **fields}), targets, 4)} \
            == trained


SIZES = {  # the tiny model and the 49 M one of the benchmarks (strat.benchmarks.figures.MEDIUM_MODEL)
    "tiny": {"hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 64},
    "49M": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 16, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 64},
}


def measured_transient(fields: dict[str, Any], bf16: bool, checkpointing: bool, batch: Batch) -> int:
    """The learner's micro-step on CPU (forward on the last positions' logits, log-probs, backward) under
    torch's MemTracker: its peak less the weights, gradients and AdamW state present throughout."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**fields)).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, fields["vocab_size"], (batch.rows, batch.tokens))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = model(input_ids=ids, logits_to_keep=batch.logit_positions).logits
        token_logprobs(logits[:, :-1], ids[:, -batch.logit_positions + 1:], 1.0).mean().backward()

    step()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: the peak above them is the transient
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        step()
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    return peak - 16 * sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("size", [pytest.param("tiny"), pytest.param("49M", marks=pytest.mark.long)])
@pytest.mark.parametrize(("bf16", "checkpointing"), [(False, False), (False, True), (True, False), (True, True)])
def test_activations_within_20_percent_of_the_measured_peak(size: str, bf16: bool, checkpointing: bool) -> None:
    fields = {"model_type": "qwen2", "vocab_size": 2048, "tie_word_embeddings": False, **SIZES[size]}
    batch = Batch(rows=2, tokens=128, logit_positions=33)
    shape = shape_from_config(fields)
    compute = 2 if bf16 else 4
    copies = compute * sum(p.numel for p in parameter_shapes(shape) if len(p.shape) == 2
                           and "embed_tokens" not in p.name) if bf16 else 0
    estimate = sum(part.bytes for part in activation_parts(shape, batch, compute, checkpointing, copies))
    measured = measured_transient(fields, bf16, checkpointing, batch)
    assert 0.8 * measured <= estimate <= 1.2 * measured, (estimate, measured)


def test_gpu_memory_in_the_cluster_spec() -> None:
    assert parse_cluster("nodes=1,gpus_per_node=8,gpu_memory=80GiB").gpu_memory == 80 * 2**30
    assert parse_cluster("nodes=2,gpus_per_node=8,gpu_memory=24GB").gpu_memory == 24 * 10**9
    assert parse_cluster("nodes=1,gpus_per_node=8").gpu_memory is None
    with pytest.raises(PlacementError, match="gpu_memory='80'.*GiB"):
        parse_cluster("nodes=1,gpus_per_node=8,gpu_memory=80")


@pytest.fixture
def qwen_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HOME holding Qwen2.5-1.5B-Instruct's config.json (and a placeholder weight file), offline."""
    name = "Qwen/Qwen2.5-1.5B-Instruct"
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(qwen("1.5B")))
    (source / "model.safetensors").write_bytes(b"placeholder")
    commit = hashlib.sha1(name.encode()).hexdigest()
    add_revision(tmp_path / "hf" / "hub", name, source, commit)
    set_ref(tmp_path / "hf" / "hub", name, "main", commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)


@pytest.mark.usefixtures("qwen_cache")
def test_plan_refuses_the_1_5b_learner_on_24_gib_and_passes_on_80(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = "nodes=1,gpus_per_node=8,gpu_memory={}"
    assert cli.main(["plan", str(KUHN_1_5B), "--cluster", cluster.format("24GiB")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("strat: error: learner: needs about") and "24.0 GiB" in err
    assert "algorithm.micro_batch" in err and "resources.gpus_learner" in err
    assert cli.main(["plan", str(KUHN_1_5B), "--cluster", cluster.format("80GiB")]) == 0
    out = capsys.readouterr().out
    assert "learner[0]: " in out and "of 80.0 GiB: fits" in out and "agent[0-1]: " in out and "snapshot[0]: " in out
    # `strat submit --cluster` plans first: refused before any connection to a dashboard.
    assert cli.main(["submit", str(KUHN_1_5B), "--address", "http://127.0.0.1:9", "--cluster",
                     cluster.format("24GiB")]) == 2
    assert capsys.readouterr().err.strip().startswith("strat: error: learner: needs about")


def test_plan_without_the_model_config_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert cli.main(["plan", str(KUHN_1_5B), "--cluster", "nodes=1,gpus_per_node=8,gpu_memory=24GiB"]) == 0
    assert "memory: not estimated (model.path='Qwen/Qwen2.5-1.5B-Instruct' is not in the Hugging Face cache" \
        in capsys.readouterr().out


def test_a_fixed_policy_engine_has_its_own_shape(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A fixed opponent of a run directory: its latest checkpoint's shape, in a row of its own."""
    from strat.cluster.memory import memory_plan_for
    from strat.model import tiny as tiny_model
    from strat.model.tiny import TinyModelSettings

    big = tmp_path / "big"
    tiny_model.build("kuhn_poker", big, seed=0, settings=TinyModelSettings(hidden_size=256, intermediate_size=512))
    config = load_config(None, [f"policies=[{{name: rival, model: {big}, train: false}}]",
                                "game.opponents=[{kind: self}, {kind: policy, name: rival}]"])
    result = memory_plan_for(config, str(tiny_model_dir), None)
    rows = {actor.role: actor for actor in result.actors}
    assert list(rows) == ["agent", "policy:rival", "learner"]
    weights = {role: actor.parts[0].bytes for role, actor in rows.items() if role != "learner"}
    assert weights["policy:rival"] > 2 * weights["agent"]


def test_a_co_trained_policy_has_its_own_engine_and_learner_rows() -> None:
    """A co-trained policy's engine and its one-rank learner are estimated on its own model's shape (the two-policy
    config's `small`: hidden 64, against the first policy's 128), beside a two-rank first learner."""
    from strat.cluster.memory import memory_plan_for, tiny_shape

    config = load_config(REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml",
                         ["resources.gpus_per_agent=1", "resources.gpus_learner=2"])
    result = memory_plan_for(config, config.model.path, None)
    rows = {actor.role: actor for actor in result.actors}
    assert list(rows) == ["agent", "cotrained:small", "learner", "cotrained_learner:small"]
    assert rows["learner"].count == 2 and rows["cotrained_learner:small"].count == 1
    small = parameter_count(tiny_shape(config.policies[0].tiny))
    assert small < parameter_count(tiny_shape(config.model.tiny))
    assert rows["cotrained:small"].parts[0].bytes == 4 * small  # float32 engine weights
    # One rank: its weights, gradients and AdamW moments unsharded (4 + 4 + 8 bytes a parameter).
    assert [p.bytes for p in rows["cotrained_learner:small"].parts[:3]] == [4 * small, 4 * small, 8 * small]
    assert all(actor.on_gpu for actor in result.actors)


def test_a_co_trained_learner_is_estimated_under_its_own_adapters_and_kl() -> None:
    """The co-trained policy trains LoRA adapters (r 2 on q_proj) and its own KL anchor on a run that trains the full
    model without one: its row holds the frozen base, the adapters' optimizer state and the reference copy; the first
    learner's row is unchanged. By hand: q_proj maps the 64-wide hidden state to 2 heads of 64 (128) in each of the
    2 layers, so the adapters hold 2 x (2 x 64 + 128 x 2) = 768 parameters."""
    from strat.cluster.memory import memory_plan_for, tiny_shape

    base = ["resources.gpus_per_agent=1", "resources.gpus_learner=1"]
    own = ("policies=[{name: small, model: 'tiny:kuhn_poker', tiny: {hidden_size: 64, intermediate_size: 176},"
           " lora: {enabled: true, r: 2, target_modules: [q_proj]},"
           " algorithm: {kl_type: reverse, kl_coef: 0.1, kl_reference: snapshot}}]")
    path = REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml"
    plain_config = load_config(path, base)
    plain = {a.role: a for a in memory_plan_for(plain_config, plain_config.model.path, None).actors}
    config = load_config(path, [*base, own])
    rows = {a.role: a for a in memory_plan_for(config, config.model.path, None).actors}
    small = parameter_count(tiny_shape(config.policies[0].tiny))
    parts = {p.what.split(" (")[0].split(",")[0]: p.bytes for p in rows["cotrained_learner:small"].parts}
    assert parts["base weights"] == 4 * small                   # frozen, float32 on one rank
    assert parts["LoRA adapters"] == 4 * 768 and parts["gradients"] == 4 * 768 and parts["AdamW moments"] == 8 * 768
    assert parts["KL reference copy"] == 4 * small
    assert "KL reference copy" not in {p.what.split(" (")[0] for p in plain["cotrained_learner:small"].parts}
    assert rows["learner"] == plain["learner"]


def test_a_co_trained_engine_is_estimated_at_its_own_tensor_parallel_size() -> None:
    """Its engine on two tensor-parallel ranks holds half its weights a rank; the first policy's engine is as
    before."""
    from strat.cluster.memory import memory_plan_for, tiny_shape

    config = load_config(REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml",
                         ["resources.gpus_per_agent=1", "resources.gpus_learner=1",
                          "policies=[{name: small, model: 'tiny:kuhn_poker', tiny: {hidden_size: 64,"
                          " intermediate_size: 176}, resources: {tensor_parallel_size: 2}}]"])
    rows = {a.role: a for a in memory_plan_for(config, config.model.path, None).actors}
    small = parameter_count(tiny_shape(config.policies[0].tiny))
    assert rows["cotrained:small"].parts[0].bytes == 4 * -(-small // 2)  # float32, ceil(n / 2) a rank
    assert "1/2 per tensor-parallel rank" in rows["cotrained:small"].parts[0].what
    assert rows["agent"].parts[0].bytes == 4 * parameter_count(tiny_shape(config.model.tiny))
