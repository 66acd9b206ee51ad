"""How much GPU memory each actor of a run needs, estimated from the model's `config.json` and the run's config
before anything starts. Pure arithmetic: no torch, no Ray.

- The learner (per rank): float32 master weights, gradients and AdamW's two moments of what trains (16 bytes per
  parameter for a full fine-tune; LoRA: the frozen base in bf16 when `learner.dtype` is bfloat16 and there is one
  rank, and 16 bytes per adapter parameter), each divided over the FSDP2 ranks (dimension 0 of every tensor padded
  to a multiple of the ranks, as FSDP2 shards); the bf16 copies of the weights that mixed precision computes with;
  the KL reference's copy (in the compute dtype, sharded over the FSDP2 ranks as the weights); one micro-batch's activations and logits.
- An engine (each agent's and the snapshot opponent's, per tensor-parallel rank): its weights in `engine.dtype`
  split over the ranks, and at least one `max_model_len` sequence of KV cache, inside `gpu_memory_utilization` of
  the GPU.
- Both: a fixed allowance for the CUDA context, the allocator and (engines) CUDA graphs, not measured here.

Weights, gradients and optimizer state equal torch's byte count for the built model
(`tests/cluster/test_memory.py`); activations and logits are a formula checked against peaks measured on CPU.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strat.config import ExperimentConfig, TinyConfig, past_policy_agent, policy_actors_config, policy_config
from strat.errors import PlacementError
from strat.model import hub

GiB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LEARNER_RUNTIME_BYTES = 1 * GiB
"""CUDA context and allocator slack of a learner rank: an allowance, not measured."""
ENGINE_RUNTIME_BYTES = 2 * GiB
"""CUDA context, CUDA graphs and vLLM's profiling peak of an engine rank: an allowance, not measured."""
SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")
"""Decoder architectures whose parameters `parameter_shapes` lists: grouped-query attention, a gated MLP,
RMSNorm."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer, as its `config.json` gives them."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    """Biases on the query, key and value projections (Qwen2; Llama's `attention_bias`)."""
    o_bias: bool
    """A bias on the output projection (Llama's `attention_bias`)."""
    mlp_bias: bool
    qk_norm: bool
    """RMSNorm on each head's queries and keys (Qwen3)."""


@dataclass(frozen=True)
class ParameterShape:
    """One parameter tensor of the model, under its Hugging Face name."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Part:
    """One line of an actor's estimate."""

    what: str
    bytes: int


@dataclass(frozen=True)
class ActorMemory:
    """The estimate for one kind of actor, per GPU it holds, and the budget it must fit in."""

    role: str
    """`learner`, `agent` or `snapshot` as in the placement plan, `policy:<name>` (a fixed policy's engine),
    `cotrained:<name>` and `cotrained_learner:<name>` (a co-trained policy's engine and learner)."""
    count: int
    """How many actors (learner ranks, agents) this row stands for."""
    on_gpu: bool
    parts: tuple[Part, ...]
    keys: tuple[str, ...]
    """Config keys that change the estimate or the budget."""
    budget_share: float
    """Share of the GPU the actor may take (`gpu_memory_utilization` for an engine, 1 for a learner)."""
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def name(self) -> str:
        return f"{self.role}[0]" if self.count == 1 else f"{self.role}[0-{self.count - 1}]"


@dataclass(frozen=True)
class MemoryPlan:
    """Every GPU-holding actor's estimate; `unknown` says why there is none (a model whose config is not here)."""

    actors: tuple[ActorMemory, ...]
    gpu_memory: int | None
    unknown: str | None = None


# --- the model's shape -----------------------------------------------------------------------


def shape_from_config(config: dict[str, Any]) -> ModelShape:
    """A `ModelShape` from a parsed `config.json`; PlacementError for an architecture outside
    `SUPPORTED_MODEL_TYPES`."""
    model_type = str(config.get("model_type", ""))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PlacementError(f"memory plan: model_type {model_type!r} is not estimated "
                             f"(allowed: {', '.join(SUPPORTED_MODEL_TYPES)})")
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    attention_bias = bool(config.get("attention_bias", False))
    return ModelShape(
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=int(config["intermediate_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        vocab_size=int(config["vocab_size"]),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=model_type != "qwen2" and attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
    )


def load_shape(model_dir: Path) -> ModelShape:
    """The shape of the model in `model_dir` (its `config.json`)."""
    return shape_from_config(json.loads((model_dir / "config.json").read_text()))


def tiny_shape(tiny: TinyConfig) -> ModelShape:
    """The shape of a `tiny:<game>` model built with `tiny`'s sizes (Qwen2, untied embeddings)."""
    return ModelShape("qwen2", tiny.hidden_size, tiny.intermediate_size, tiny.num_layers, tiny.num_heads,
                      tiny.num_kv_heads, tiny.head_dim, tiny.vocab_size, tie_word_embeddings=False, qkv_bias=True,
                      o_bias=False, mlp_bias=False, qk_norm=False)


def resolve_shape(model_path: str, tiny: TinyConfig) -> ModelShape:
    """The shape of `model.path` from files on this machine (a Hub name from the local cache only); PlacementError
    saying why when they are not here."""
    if model_path.startswith("tiny:"):
        return tiny_shape(tiny)
    name = hub.parse(model_path)
    directory = Path(model_path).expanduser() if name is None else hub.cached(name)
    if directory is None:
        raise PlacementError(f"model.path={model_path!r} is not in the Hugging Face cache here ({hub.cache_dir()})")
    if not (directory / "config.json").is_file():
        raise PlacementError(f"model.path={model_path!r}: no config.json at {directory} here")
    return load_shape(directory)


def parameter_shapes(shape: ModelShape) -> tuple[ParameterShape, ...]:
    """Every parameter of the `*ForCausalLM` model, with the names and shapes transformers gives it."""
    h, i, d = shape.hidden_size, shape.intermediate_size, shape.head_dim
    q, kv = shape.num_heads * d, shape.num_kv_heads * d
    params = [ParameterShape("model.embed_tokens.weight", (shape.vocab_size, h))]
    for n in range(shape.num_layers):
        layer = f"model.layers.{n}."
        linears = [("self_attn.q_proj", q, h, shape.qkv_bias), ("self_attn.k_proj", kv, h, shape.qkv_bias),
                   ("self_attn.v_proj", kv, h, shape.qkv_bias), ("self_attn.o_proj", h, q, shape.o_bias),
                   ("mlp.gate_proj", i, h, shape.mlp_bias), ("mlp.up_proj", i, h, shape.mlp_bias),
                   ("mlp.down_proj", h, i, shape.mlp_bias)]
        for name, out, inp, bias in linears:
            params.append(ParameterShape(f"{layer}{name}.weight", (out, inp)))
            if bias:
                params.append(ParameterShape(f"{layer}{name}.bias", (out,)))
        if shape.qk_norm:
            params += [ParameterShape(f"{layer}self_attn.q_norm.weight", (d,)),
                       ParameterShape(f"{layer}self_attn.k_norm.weight", (d,))]
        params += [ParameterShape(f"{layer}input_layernorm.weight", (h,)),
                   ParameterShape(f"{layer}post_attention_layernorm.weight", (h,))]
    params.append(ParameterShape("model.norm.weight", (h,)))
    if not shape.tie_word_embeddings:
        params.append(ParameterShape("lm_head.weight", (shape.vocab_size, h)))
    return tuple(params)


def parameter_count(shape: ModelShape) -> int:
    return sum(p.numel for p in parameter_shapes(shape))


def lora_shapes(shape: ModelShape, targets: tuple[str, ...], r: int) -> tuple[ParameterShape, ...]:
    """The adapters peft adds: `lora_A` (r x in) and `lora_B` (out x r) on every linear layer a target names
    (`all-linear`: every one but the output layer)."""
    adapters = []
    for param in parameter_shapes(shape):
        module = param.name.removesuffix(".weight")
        if not param.name.endswith(".weight") or len(param.shape) != 2 or "embed_tokens" in module:
            continue
        leaf = module.split(".")[-1]
        wanted = leaf != "lm_head" if targets == ("all-linear",) else leaf in targets
        if wanted:
            out, inp = param.shape
            adapters += [ParameterShape(f"{module}.lora_A.weight", (r, inp)),
                         ParameterShape(f"{module}.lora_B.weight", (out, r))]
    return tuple(adapters)


def sharded_numel(params: tuple[ParameterShape, ...], ranks: int) -> int:
    """Elements one FSDP2 rank holds: each tensor split on dimension 0, padded to a multiple of `ranks`."""
    if ranks == 1:
        return sum(p.numel for p in params)
    return sum(math.ceil(p.shape[0] / ranks) * math.prod(p.shape[1:]) for p in params)


# --- activations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """What one learner forward holds: `rows` sequences of at most `tokens` tokens, logits on the last
    `logit_positions` of each."""

    rows: int
    tokens: int
    logit_positions: int


def layer_activation_bytes(shape: ModelShape, compute_bytes: int) -> int:
    """Bytes one decoder layer saves for the backward pass, per token: the float32 residual stream and its two
    RMSNorms (6 x 4h), autocast's bf16 copies of the projections' inputs (5 x 2h, none in float32), queries,
    keys and values with their rotary embeddings and the attention output (5q + 4kv), and the gated MLP (4i),
    the last two in the compute dtype."""
    h, i = shape.hidden_size, shape.intermediate_size
    q, kv = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    casts = 5 * 2 * h if compute_bytes < 4 else 0
    return 6 * 4 * h + casts + compute_bytes * (5 * q + 4 * kv + 4 * i)


LOGIT_BYTES = 12
"""Float32 bytes per logit at the update's peak, next to the compute-dtype logits: log-softmax's output (saved for
the backward), and in the backward its gradient and a temporary."""


def activation_parts(shape: ModelShape, batch: Batch, compute_bytes: int, checkpointing: bool,
                     weight_copies: int) -> tuple[Part, ...]:
    """One micro-batch's activations and logits at the update's peak, with `weight_copies` bytes of weights in the
    compute dtype (autocast's cache, FSDP2's gathered layers) that live through the forward."""
    tokens = batch.rows * batch.tokens
    h = shape.hidden_size
    layer = layer_activation_bytes(shape, compute_bytes) * tokens
    logits = batch.rows * batch.logit_positions * shape.vocab_size
    logit_part = Part(f"logits ({batch.rows} x {batch.logit_positions} x {shape.vocab_size})",
                      logits * (compute_bytes + LOGIT_BYTES))
    final_norm = 2 * 4 * h * tokens
    copies = Part("weights in the compute dtype (autocast cache, gathered layers)", weight_copies)
    if not checkpointing:
        saved = Part(f"activations ({shape.num_layers} layers, final norm)", shape.num_layers * layer + final_norm)
        return (saved, logit_part, copies) if weight_copies else (saved, logit_part)
    # Each layer keeps its float32 input. The forward holds the weight copies and the logits; the backward goes
    # through the logits, then recomputes one layer at a time (its weights cast again, a few float32 gradients of
    # the residual stream): the largest of the three is the peak.
    inputs = Part(f"activations ({shape.num_layers} checkpointed layer inputs, final norm)",
                  shape.num_layers * 4 * h * tokens + final_norm)
    one_layer = sum(p.numel for p in parameter_shapes(shape) if p.name.startswith("model.layers.0.") and len(p.shape) == 2)
    layer_copies = compute_bytes * one_layer if weight_copies else 0
    phases = [
        (copies.bytes + logits * (compute_bytes + 4), (copies, Part("logits, forward", logits * (compute_bytes + 4)))),
        (logit_part.bytes, (logit_part,)),
        (layer + 3 * 4 * h * tokens + layer_copies, (Part("one layer recomputed", layer + 3 * 4 * h * tokens),
                                                     Part("its weights in the compute dtype", layer_copies))),
    ]
    return (inputs, *(part for part in max(phases, key=lambda phase: phase[0])[1] if part.bytes))


# --- per actor -------------------------------------------------------------------------------


def learner_memory(shape: ModelShape, config: ExperimentConfig, role: str = "learner",
                   ranks: int | None = None) -> ActorMemory:
    """One learner rank: what trains, its gradients and AdamW state (sharded over FSDP2 ranks), the compute
    copies, the KL reference and one micro-batch. `ranks` defaults to `config`'s learner ranks (a co-trained policy's
    config, `policy_config`, holds its own)."""
    learner, res = config.learner, config.resources
    ranks = res.learner_world_size if ranks is None else ranks
    params = parameter_shapes(shape)
    compute = DTYPE_BYTES[learner.dtype]
    lora = learner.lora
    parts: list[Part] = []
    if lora.enabled:
        adapters = lora_shapes(shape, tuple(lora.target_modules), lora.r)
        base_bytes = compute if ranks == 1 else 4  # bf16 storage of the frozen base, not under FSDP2
        parts.append(Part(f"base weights ({'bfloat16' if base_bytes == 2 else 'float32'}, frozen)",
                          base_bytes * sharded_numel(params, ranks)))
        trainable = sharded_numel(adapters, ranks)
        what = f"LoRA adapters (r {lora.r}, {sum(a.numel for a in adapters):,} parameters)"
    else:
        trainable = sharded_numel(params, ranks)
        what = f"weights ({sum(p.numel for p in params):,} parameters)"
    shard = f", 1/{ranks} per FSDP2 rank" if ranks > 1 else ""
    parts += [Part(f"{what}, float32{shard}", 4 * trainable), Part(f"gradients, float32{shard}", 4 * trainable),
              Part(f"AdamW moments, 2 x float32{shard}", 8 * trainable)]
    copies = 0
    if ranks > 1 and compute < 4:
        # FSDP2 gathers a layer's parameters in the compute dtype (and prefetches the next), and the root's
        # (embeddings, output layer) for the whole forward.
        layer = sum(p.numel for p in params if p.name.startswith("model.layers.0."))
        copies = compute * (2 * layer + sum(p.numel for p in params if not p.name.startswith("model.layers.")))
    elif compute < 4 and not lora.enabled:
        # Autocast keeps a bf16 copy of every matrix a matmul uses until the forward ends.
        copies = compute * sum(p.numel for p in params if len(p.shape) == 2 and "embed_tokens" not in p.name)
    reference = config.algorithm.kl_type != "none" and not (lora.enabled and config.algorithm.kl_reference != "snapshot")
    if reference:
        parts.append(Part(f"KL reference copy ({learner.dtype}{shard})", compute * sharded_numel(params, ranks)))
    batch = Batch(config.algorithm.micro_batch, config.engine.max_model_len, config.reasoning.max_new_tokens + 1)
    parts += activation_parts(shape, batch, compute, learner.gradient_checkpointing, copies)
    if reference:
        # The reference's log-probs are computed without gradient next to the policy's saved activations.
        logits = batch.rows * batch.logit_positions * shape.vocab_size
        parts.append(Part("reference logits", logits * (compute + 8)))
    on_gpu = res.gpus_learner > 0
    if on_gpu:
        parts.append(Part("CUDA context and allocator (allowance)", LEARNER_RUNTIME_BYTES))
    keys = ["resources.gpus_learner (FSDP2 ranks)", "learner.lora.enabled", "learner.gradient_checkpointing",
            "algorithm.micro_batch", "engine.max_model_len"]
    if reference:
        keys.append("algorithm.kl_type")
    return ActorMemory(role, ranks, on_gpu, tuple(parts), tuple(keys), 1.0,
                       notes=(f"a micro-batch of {batch.rows} sequences of at most {batch.tokens} tokens (engine.max_model_len)",))


def kv_bytes_per_token(shape: ModelShape, engine_dtype: str, tensor_parallel: int) -> int:
    """KV cache per token on one tensor-parallel rank: keys and values of every layer; the key/value heads split
    over the ranks (replicated when there are fewer heads than ranks)."""
    heads = max(1, shape.num_kv_heads // tensor_parallel)
    return 2 * shape.num_layers * heads * shape.head_dim * DTYPE_BYTES[engine_dtype]


def engine_memory(shape: ModelShape, config: ExperimentConfig, role: str, count: int) -> ActorMemory:
    """One tensor-parallel rank of an agent's engine: its weights' shard and one full-length sequence's KV
    cache, which vLLM must fit in `gpu_memory_utilization` of the GPU."""
    engine = config.engine
    tp = engine.tensor_parallel_size
    weights = DTYPE_BYTES[engine.dtype] * math.ceil(parameter_count(shape) / tp)
    per_token = kv_bytes_per_token(shape, engine.dtype, tp)
    on_gpu = config.resources.gpus_per_agent > 0
    parts = [Part(f"weights ({engine.dtype}{f', 1/{tp} per tensor-parallel rank' if tp > 1 else ''})", weights),
             Part(f"KV cache, one {engine.max_model_len}-token sequence ({per_token:,} bytes per token)",
                  per_token * engine.max_model_len)]
    if on_gpu:
        parts.append(Part("CUDA context, graphs, profiling peak (allowance)", ENGINE_RUNTIME_BYTES))
    keys = ("engine.gpu_memory_utilization", "engine.tensor_parallel_size", "engine.max_model_len", "engine.dtype")
    return ActorMemory(role, count, on_gpu, tuple(parts), keys, engine.gpu_memory_utilization if on_gpu else 1.0)


def plan_memory(config: ExperimentConfig, shape: ModelShape, gpu_memory: int | None = None,
                fixed: Sequence[tuple[str, ModelShape]] = (),
                cotrained: Sequence[tuple[str, ModelShape]] = ()) -> MemoryPlan:
    """The estimate of every engine and learner of the run (the snapshot opponent's engine when it plays, each
    fixed policy's engine, and each co-trained policy's engine and learner (its ranks), of their own shapes)."""
    actors = [engine_memory(shape, config, "agent", config.resources.agents)]
    if past_policy_agent(config):  # the snapshot opponent's engine, or the league's
        actors.append(engine_memory(shape, config, "snapshot", 1))
    # Each other policy's engine at its own tensor-parallel size and GPUs (`policy_actors_config`).
    actors += [engine_memory(fixed_shape, policy_actors_config(config, name), f"policy:{name}", 1)
               for name, fixed_shape in fixed]
    actors += [engine_memory(own, policy_actors_config(config, name), f"cotrained:{name}", 1) for name, own in cotrained]
    actors.append(learner_memory(shape, config))
    # A co-trained learner under its own settings: its adapters, its KL (whether it holds a reference model), its GPU.
    actors += [learner_memory(own, policy_config(config, name), f"cotrained_learner:{name}")
               for name, own in cotrained]
    return MemoryPlan(tuple(actors), gpu_memory)


def cotrained_policy_shapes(config: ExperimentConfig) -> list[tuple[str, ModelShape]]:
    """The shape of each co-trained policy's model (its own `tiny` sizes for `tiny:<game>`); PlacementError when its
    files are not here."""
    shapes = []
    for index, policy in enumerate(config.policies):
        if policy.train:
            try:
                shapes.append((policy.name, resolve_shape(policy.model, policy.tiny)))
            except PlacementError as err:
                raise PlacementError(f"policies.{index} ({policy.name}): {err}") from None
    return shapes


def fixed_policy_shapes(config: ExperimentConfig) -> list[tuple[str, ModelShape]]:
    """The shape of each fixed policy's model (a run directory's latest checkpoint); PlacementError when its files
    are not here."""
    shapes = []
    for index, policy in enumerate(config.policies):
        if policy.train:
            continue
        directory = Path(policy.model).expanduser()
        if hub.parse(policy.model) is not None:
            directory = hub.cached(hub.parse(policy.model))
            if directory is None:
                raise PlacementError(f"policies.{index}.model={policy.model!r} is not in the Hugging Face cache here")
        elif (directory / "checkpoints").is_dir():
            from strat.model import checkpoint  # imports torch: not at the CLI's start-up

            latest = checkpoint.latest(directory)
            if latest is None:
                raise PlacementError(f"policies.{index}.model={policy.model!r}: the run has no complete checkpoint")
            directory = latest.path
        if not (directory / "config.json").is_file():
            raise PlacementError(f"policies.{index}.model={policy.model!r}: no config.json at {directory} here")
        shapes.append((policy.name, load_shape(directory)))
    return shapes


def memory_plan_for(config: ExperimentConfig, model_path: str, gpu_memory: int | None) -> MemoryPlan:
    """`plan_memory` for the model at `model_path` (and the fixed policies'), or a plan that says why it cannot
    estimate it."""
    try:
        shape = resolve_shape(model_path, config.model.tiny)
        fixed = fixed_policy_shapes(config)
        cotrained = cotrained_policy_shapes(config)
    except PlacementError as err:
        return MemoryPlan((), gpu_memory, unknown=str(err))
    return plan_memory(config, shape, gpu_memory, fixed, cotrained)


def check_fits(result: MemoryPlan) -> None:
    """PlacementError naming the first GPU actor whose estimate exceeds its share of `gpu_memory`."""
    if result.gpu_memory is None:
        return
    for actor in result.actors:
        budget = actor.budget_share * result.gpu_memory
        if actor.on_gpu and actor.total > budget:
            share = f"{actor.budget_share:g} x " if actor.budget_share < 1 else ""
            raise PlacementError(
                f"{actor.role}: needs about {actor.total / GiB:.1f} GiB per GPU but has {budget / GiB:.1f} GiB "
                f"({share}gpu_memory={result.gpu_memory / GiB:g}GiB); change {', '.join(actor.keys)}, "
                f"or use larger GPUs"
            )


def format_memory(result: MemoryPlan) -> str:
    """The per-actor table: each part of each estimate, the total and, with `gpu_memory`, what it may use."""
    if result.unknown is not None:
        return f"memory: not estimated ({result.unknown})"
    lines = ["memory per GPU (estimate):"]
    for actor in result.actors:
        where = "" if actor.on_gpu else " (on the CPU)"
        budget = ""
        if result.gpu_memory is not None and actor.on_gpu:
            have = actor.budget_share * result.gpu_memory
            verdict = "fits" if actor.total <= have else "DOES NOT FIT"
            budget = f" of {have / GiB:.1f} GiB: {verdict}"
        lines.append(f"  {actor.name}{where}: {actor.total / GiB:.2f} GiB{budget}")
        lines += [f"    {part.bytes / GiB:8.2f} GiB  {part.what}" for part in actor.parts]
        lines += [f"    note: {note}" for note in actor.notes]
    return "\n".join(lines)
