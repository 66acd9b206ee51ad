"""`strat export`: a run's checkpoint as a clean Hugging Face model directory (safetensors weights, config,
tokenizer with its chat template, generation config with the run's sampling settings, a `strat.json` sidecar with
its game and reasoning format) with a model card, and nothing of the training state.

A checkpoint's top-level weights are already the plain model (LoRA deltas merged in by the learner), so the
export copies them; only weights of mixed float dtypes (a LoRA run's bf16 base with float32 merged layers) are
rewritten, all in the widest of them."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from strat.config import ExperimentConfig
from strat.config_loading import from_dict
from strat.errors import UserError
from strat.eval import sidecar
from strat.export import card
from strat.model import checkpoint
from strat.model.safetensors_io import write_safetensors

_FLOAT_WIDTH = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
"""Bytes per element of the safetensors float dtypes, to pick the widest."""


@dataclass(frozen=True)
class Exported:
    """What `export_run` wrote: the directory, the checkpoint it came from, and whether LoRA was merged."""

    out: Path
    checkpoint: checkpoint.Checkpoint
    lora_merged: bool
    skipped_note: str = ""
    """Which unreadable lines of metrics.jsonl the model card's tables left out (empty: none)."""


def select_checkpoint(run_dir: Path, step: int | None) -> checkpoint.Checkpoint:
    """The complete checkpoint of `step` (default: the latest complete one), verified against its manifest; anything
    else, a damaged checkpoint included, is refused in one line."""
    if not run_dir.is_dir():
        raise UserError(f"no run directory at {run_dir}")
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} holds no config.yaml (not a run directory)")
    complete = checkpoint.complete_checkpoints(run_dir)
    listed = ", ".join(str(c.step) for c in complete) or "none"
    if step is None:
        if not complete:
            raise UserError(f"{run_dir} holds no complete checkpoint to export")
        chosen = complete[-1]
    else:
        chosen = next((c for c in complete if c.step == step), None)
        if chosen is None:
            folder = checkpoint.checkpoint_dir(run_dir, step)
            if folder.is_dir() or folder.with_name(folder.name + ".partial").is_dir():
                raise UserError(f"checkpoint step_{step} in {run_dir} is incomplete (no {checkpoint.COMPLETE} marker:"
                                f" its write was interrupted); complete checkpoints: {listed}")
            raise UserError(f"--step {step}: no checkpoint of that step in {run_dir} (complete checkpoints: {listed})")
    checkpoint.require_verified(chosen)
    if not (chosen.path / "config.json").is_file() or not any(chosen.path.glob("*.safetensors")):
        raise UserError(f"checkpoint {chosen.path} is incomplete: it has no config.json or *.safetensors weights")
    return chosen


def run_config(run_dir: Path, ckpt: checkpoint.Checkpoint) -> tuple[ExperimentConfig, str]:
    """The run's config, validated with the model pointed at the checkpoint (the base model need not be on this
    machine), and `model.path` as the run recorded it."""
    tree = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    model = tree.setdefault("model", {})
    base = str(model.get("path", ""))
    model["path"] = str(ckpt.path)
    return from_dict(tree), base


def export_run(run_dir: Path, out: Path, step: int | None = None) -> Exported:
    """Write the model directory of `run_dir`'s checkpoint (`step`, default the latest complete one) to `out`,
    atomically: into a staging sibling, then renamed."""
    ckpt = select_checkpoint(run_dir, step)
    config, base = run_config(run_dir, ckpt)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} already exists and is not an empty directory; pick a new one")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        # Deferred: transformers costs seconds, and `strat --help` imports the CLI modules.
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ckpt.path, trust_remote_code=config.model.trust_remote_code)
        _write_weights(ckpt.path, staging, config.model.trust_remote_code)
        tokenizer.save_pretrained(staging)
        _write_generation_config(ckpt.path, staging, tokenizer, config)
        sidecar.write(sidecar.PlaySettings.from_config(config, ckpt.step), staging)
        sample = card.example(run_dir, config, ckpt.step, tokenizer)
        from strat import metrics  # deferred with the rest: TensorBoard's writer comes along
        from strat.train.resume import read_overrides

        records = metrics.read_for_report(run_dir)  # the card goes on past unreadable lines, and says how many
        text = card.render(config, base, ckpt.step, records.records, sample, read_overrides(run_dir))
        (staging / "README.md").write_text(text)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        out.rmdir()
    staging.rename(out)
    return Exported(out, ckpt, config.learner.lora.enabled, records.skipped_note())


def _write_weights(source: Path, target: Path, trust_remote_code: bool) -> None:
    """The checkpoint's weights and config.json: copied when every float tensor has one dtype, else rewritten in the
    widest (with config.json's dtype to match)."""
    from safetensors import safe_open

    files = sorted(source.glob("*.safetensors"))
    dtypes: set[str] = set()
    for file in files:
        with safe_open(file, framework="pt") as handle:
            dtypes |= {handle.get_slice(name).get_dtype() for name in handle.keys()}  # noqa: SIM118 (a safetensors handle is not iterable)
    floats = dtypes & set(_FLOAT_WIDTH)
    if len(floats) <= 1:
        for file in [*files, source / "model.safetensors.index.json", source / "config.json"]:
            if file.is_file():
                shutil.copy2(file, target / file.name)
        return
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    widest = max(floats, key=lambda name: _FLOAT_WIDTH[name])
    dtype = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}[widest]
    state = {}
    for file in files:
        state.update(load_file(file))
    write_safetensors({k: t.to(dtype) if t.is_floating_point() else t for k, t in state.items()}, target)
    model_config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    model_config.dtype = dtype
    model_config.save_pretrained(target)


def _write_generation_config(source: Path, target: Path, tokenizer: object, config: ExperimentConfig) -> None:
    """The checkpoint's generation config (or a fresh one) with every end-of-turn token Strat stopped on as
    `eos_token_id`, a pad token, and the run's sampling: its response budget as `max_new_tokens`, `temperature` and
    `top_p` (written even where they equal transformers' defaults, which `save_pretrained` leaves out)."""
    from transformers import GenerationConfig

    from strat.engines.base import stop_token_ids

    generation = (GenerationConfig.from_pretrained(source) if (source / "generation_config.json").is_file()
                  else GenerationConfig())
    present = generation.eos_token_id
    eos = [present] if isinstance(present, int) else list(present or [])
    eos += [token for token in stop_token_ids(tokenizer) if token not in eos]
    generation.eos_token_id = eos
    if generation.pad_token_id is None:
        pad = getattr(tokenizer, "pad_token_id", None)
        generation.pad_token_id = pad if pad is not None else eos[-1]
    reasoning = config.reasoning
    generation.max_new_tokens = reasoning.max_new_tokens
    generation.do_sample, generation.temperature, generation.top_p = True, reasoning.temperature, reasoning.top_p
    generation.save_pretrained(target)
    path = target / "generation_config.json"
    written = json.loads(path.read_text())
    written.update({key: getattr(reasoning, key) for key in sidecar.GENERATION_KEYS})
    path.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
