"""GPU smoke check for a node that will run Strat: needs only torch and transformers (and Strat's source tree).

On a randomly initialised model with Qwen2.5-0.5B's shape it runs bf16 learner steps (temperature-
scaled token log-probs over response tokens, a clipped surrogate, AdamW) and KV-cached batched
generation, then prints learner tokens/s, generation tokens/s and peak GPU memory. Then Strat's own
learner (`strat.train.learner.PolicyLearner`, which imports torch, transformers and safetensors only) runs one
bf16 update on the same shape, saved with a word-level tokenizer built here, on samples whose behaviour log-probs
come from a separate bf16 transformers forward standing in for the engine: it reports the engine-learner log-prob
gap, the update's time and its peak memory. The module imports no Strat, Ray or vLLM code at its top: a lent GPU
machine may have only torch and transformers, and `--no-strat` skips Strat's check where its source is absent.

    python bench/gpu_smoke.py               # one GPU, a few minutes
    python bench/gpu_smoke.py --cpu-smoke   # a tiny shape on CPU, seconds: checks the script runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int


QWEN2_5_0_5B = Shape(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936)
TINY = Shape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=1024)


@dataclass(frozen=True)
class Settings:
    batch: int = 8
    prompt_len: int = 512
    response_len: int = 512
    learner_steps: int = 6
    gen_batch: int = 64
    gen_prompt_len: int = 256
    gen_new_tokens: int = 256
    temperature: float = 1.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    lr: float = 1e-6
    max_seconds: float = 420.0


CPU_SETTINGS = Settings(batch=2, prompt_len=16, response_len=16, learner_steps=2, gen_batch=4, gen_prompt_len=8,
                        gen_new_tokens=8, max_seconds=60.0)


def build_model(shape: Shape, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, intermediate_size=shape.intermediate,
        max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype)


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probs of each next token under temperature-scaled logits (the sampling distribution)."""
    logits = model(input_ids=input_ids).logits[:, :-1].float() / temperature
    return torch.gather(F.log_softmax(logits, dim=-1), -1, input_ids[:, 1:, None]).squeeze(-1)


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      clip_low: float, clip_high: float) -> torch.Tensor:
    """Token-mean of the asymmetric PPO-clip objective over response tokens (as a loss)."""
    ratio = torch.exp(logp - old_logp)
    objective = torch.minimum(ratio * advantages, ratio.clamp(1 - clip_low, 1 + clip_high) * advantages)
    return -(objective * mask).sum() / mask.sum().clamp(min=1)


def learner_bench(model: torch.nn.Module, shape: Shape, settings: Settings, device: torch.device,
                  deadline: float) -> dict[str, float]:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    seq = settings.prompt_len + settings.response_len
    generator = torch.Generator(device="cpu").manual_seed(1)
    input_ids = torch.randint(2, shape.vocab, (settings.batch, seq), generator=generator).to(device)
    mask = torch.zeros(settings.batch, seq - 1, device=device)
    mask[:, settings.prompt_len - 1:] = 1.0  # targets that are response tokens
    advantages = torch.randn(settings.batch, 1, generator=generator).to(device)
    with torch.no_grad():
        old_logp = token_logprobs(model, input_ids, settings.temperature)
    times, losses = [], []
    for step in range(settings.learner_steps + 1):  # step 0 warms up kernels and allocator
        _sync(device)
        started = time.perf_counter()
        logp = token_logprobs(model, input_ids, settings.temperature)
        loss = clipped_surrogate(logp, old_logp, advantages, mask, settings.clip_low, settings.clip_high)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        _sync(device)
        if step > 0:
            times.append(time.perf_counter() - started)
            losses.append(float(loss.detach()))
        if time.perf_counter() > deadline and times:
            break
    if not all(math.isfinite(x) for x in losses):
        raise RuntimeError(f"learner loss is not finite: {losses}")
    tokens = settings.batch * seq
    return {"learner_steps": len(times), "learner_step_s": sum(times) / len(times),
            "learner_tokens_per_s": tokens * len(times) / sum(times), "learner_last_loss": losses[-1]}


@torch.no_grad()
def generation_bench(model: torch.nn.Module, shape: Shape, settings: Settings, device: torch.device) -> dict[str, float]:
    model.eval()
    generator = torch.Generator(device="cpu").manual_seed(2)
    prompts = torch.randint(2, shape.vocab, (settings.gen_batch, settings.gen_prompt_len), generator=generator).to(device)
    attention = torch.ones_like(prompts)

    def generate(new_tokens: int) -> torch.Tensor:
        return model.generate(
            input_ids=prompts, attention_mask=attention, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            do_sample=True, temperature=settings.temperature, top_k=0, top_p=1.0, use_cache=True, pad_token_id=1,
        )

    generate(4)  # warm-up
    _sync(device)
    started = time.perf_counter()
    out = generate(settings.gen_new_tokens)
    _sync(device)
    seconds = time.perf_counter() - started
    new = (out.shape[1] - settings.gen_prompt_len) * settings.gen_batch
    return {"gen_seconds": seconds, "gen_tokens": float(new), "gen_tokens_per_s": new / seconds}


def write_model_dir(shape: Shape, directory: Path) -> Path:
    """A loadable model directory: the shape's Qwen2 model with random weights (safetensors) and a word-level
    tokenizer of its vocabulary ("t0".."t<vocab-1>", t1 ending a turn and padding), built offline."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    build_model(shape, torch.device("cpu"), torch.float32).save_pretrained(directory, safe_serialization=True)
    words = Tokenizer(WordLevel({f"t{i}": i for i in range(shape.vocab)}, unk_token="t2"))
    words.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="t0", eos_token="t1", pad_token="t1",
                                        unk_token="t2")
    tokenizer.save_pretrained(directory)
    return directory


def strat_learner_check(shape: Shape, settings: Settings, device: torch.device, dtype: torch.dtype
                        ) -> dict[str, float | list[str]]:
    """One update of Strat's own learner on `device` in `dtype` (bf16: mixed precision over float32 weights), on
    `settings.batch` random samples whose behaviour log-probs come from a plain transformers forward in `dtype`
    (what an engine would report). Returns the engine-learner gap, the update's time, its peak GPU memory, and the
    heavy modules the learner pulled in (none expected)."""
    root = Path(__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from strat.algorithm.records import TrainSample
    from strat.train.learner import LearnerSettings, PolicyLearner

    generator = torch.Generator(device="cpu").manual_seed(3)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model_dir(shape, Path(tmp))
        from transformers import AutoModelForCausalLM

        engine = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, use_safetensors=True).to(device).eval()
        seq = settings.prompt_len + settings.response_len
        ids = torch.randint(2, shape.vocab, (settings.batch, seq), generator=generator)
        with torch.no_grad():
            behaviour = token_logprobs(engine, ids.to(device), settings.temperature)[:, settings.prompt_len - 1:]
        del engine
        advantages = torch.randn(settings.batch, generator=generator).tolist()
        samples = [TrainSample(f"g{row}", f"e{row}", "player_0", 0, tuple(ids[row, : settings.prompt_len].tolist()),
                               tuple(ids[row, settings.prompt_len:].tolist()), tuple(behaviour[row].float().tolist()),
                               advantages[row]) for row in range(settings.batch)]
        learner_settings = LearnerSettings(lr=settings.lr, micro_batch=settings.batch, temperature=settings.temperature,
                                           device=device.type, dtype="bfloat16" if dtype == torch.bfloat16 else "float32")
        learner = PolicyLearner(model_dir, learner_settings)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        started = time.perf_counter()
        metrics = learner.update(samples)
        _sync(device)
        seconds = time.perf_counter() - started
    heavy = sorted({name.split(".")[0] for name in sys.modules} & {"pydantic", "ray", "vllm", "games", "pyspiel"})
    result: dict[str, float | list[str]] = {
        "strat_update_s": seconds,
        "strat_engine_learner_gap": metrics["logprob/engine_learner_gap"],
        "strat_loss": metrics["loss/policy"],
        "strat_heavy_modules": heavy,
    }
    if device.type == "cuda":
        result["strat_peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return result


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="Run a tiny shape on CPU (checks the script).")
    parser.add_argument("--max-seconds", type=float, default=None, help="Stop learner steps after this long.")
    parser.add_argument("--no-strat", action="store_true", help="Skip the check of Strat's own learner.")
    args = parser.parse_args(argv)

    import transformers

    if args.cpu_smoke:
        device, dtype, shape, settings = torch.device("cpu"), torch.float32, TINY, CPU_SETTINGS
    elif not torch.cuda.is_available():
        print("gpu_smoke: no CUDA GPU visible (torch.cuda.is_available() is False); this measures a GPU. "
              "Use --cpu-smoke to check the script on CPU with a tiny shape.", file=sys.stderr)
        return 2
    else:
        device, dtype, shape, settings = torch.device("cuda", 0), torch.bfloat16, QWEN2_5_0_5B, Settings()
        torch.backends.cuda.matmul.allow_tf32 = True
    if args.max_seconds is not None:
        settings = Settings(**{**asdict(settings), "max_seconds": args.max_seconds})
    started = time.perf_counter()
    deadline = started + settings.max_seconds
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}; torch {torch.__version__}; transformers {transformers.__version__}; dtype {dtype}",
          flush=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(shape, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: Qwen2 shape {asdict(shape)}, {params / 1e6:.1f} M parameters (random weights)", flush=True)

    result: dict[str, float | str] = {"device": name, "params_m": params / 1e6}
    result.update(learner_bench(model, shape, settings, device, deadline))
    print(f"learner: {result['learner_tokens_per_s']:.0f} tokens/s "
          f"({settings.batch} x {settings.prompt_len + settings.response_len} tokens per step, "
          f"{result['learner_step_s']:.3f} s/step over {result['learner_steps']} steps)", flush=True)
    result.update(generation_bench(model, shape, settings, device))
    print(f"generation: {result['gen_tokens_per_s']:.0f} tokens/s "
          f"({settings.gen_batch} sequences x {settings.gen_new_tokens} new tokens, KV cache)", flush=True)
    if device.type == "cuda":
        result["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        print(f"peak GPU memory: {result['peak_gpu_memory_gib']:.2f} GiB allocated", flush=True)
    if not args.no_strat:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result.update(strat_learner_check(shape, settings, device, dtype))
        peak = result.get("strat_peak_gpu_memory_gib")
        print(f"Strat's learner: one update in {result['strat_update_s']:.2f} s, engine-learner log-prob gap "
              f"{result['strat_engine_learner_gap']:.2e}" + (f", peak {peak:.2f} GiB" if peak is not None else ""),
              flush=True)
    result["total_seconds"] = time.perf_counter() - started
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
