"""The plain, single-process loops Strat is measured against: a transformers
forward/backward/AdamW loop on given micro-batches, transformers `generate`, and a minimal GRPO
loop (generate, reward, group-normalised advantage, the same policy loss, AdamW). Written for the
benchmark, in one thread, without anything that would slow them on purpose. No Ray here."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import games
from strat.algorithm.advantage import normalise
from strat.algorithm.losses import policy_loss
from strat.algorithm.reasoning import build_messages, decide, parse_response
from strat.algorithm.records import TrainBatch, TrainSample
from strat.benchmarks.results import GRPOBaseline, chunks
from strat.engines.base import Generation, SamplingParams, chat_prompt_ids, stop_token_ids
from strat.play.rollout import derive_seed
from strat.train.sequences import sequence_logprobs


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` intra-op threads, restoring the previous number afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def load_model(model_path: str | Path, train: bool):
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True)
    return model.train() if train else model.eval()


def chat_encoder(tokenizer) -> Callable[[list[dict[str, str]]], list[int]]:
    """Chat messages -> prompt ids, as the rollout worker encodes them."""

    def encode(messages: list[dict[str, str]]) -> list[int]:
        return chat_prompt_ids(tokenizer, messages)

    return encode


# --- learner ------------------------------------------------------------------------------------


def plain_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[TrainBatch],
                 grad_clip: float) -> float:
    """One plain update: cross-entropy on the response tokens of every micro-batch (mean over all
    response tokens), backward, gradient clipping, AdamW step. Returns the loss."""
    total = sum(int(b.response_mask.sum()) for b in batches)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for batch in batches:
        attention = batch.attention_mask.long()
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        response_len = batch.response_ids.shape[1]
        logits = model(input_ids=batch.input_ids, attention_mask=attention, position_ids=positions,
                       logits_to_keep=response_len + 1).logits[:, :-1, :]
        loss = torch.nn.functional.cross_entropy(
            logits[batch.response_mask], batch.response_ids[batch.response_mask], reduction="sum"
        ) / max(total, 1)
        loss.backward()
        loss_sum += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss_sum


# --- generation ---------------------------------------------------------------------------------


@torch.inference_mode()
def hf_generate(model, tokenizer, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float = 1.0,
                top_p: float = 1.0, min_new_tokens: int = 0) -> list[list[int]]:
    """Plain transformers `generate` on left-padded prompts; each completion cut after its first stop token."""
    stops = stop_token_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
        attention[row, width - len(prompt):] = 1
    out = model.generate(
        input_ids=input_ids, attention_mask=attention, do_sample=True, temperature=temperature, top_p=top_p,
        top_k=0, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens or None,
        eos_token_id=stops, pad_token_id=pad,
    )
    responses = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, token in enumerate(row) if token in stops), len(row))
        responses.append(row[:cut])
    return responses


def reference_generate_tok_s(model_path: str | Path, prompts: int = 64, tokens: int = 32, repeats: int = 3) -> float:
    """transformers generate, one thread, `prompts` short prompts x up to `tokens` sampled tokens
    (a random model seldom stops early), best of `repeats`: the reference figure docs/performance.md quotes
    (~9,000 tok/s for the tiny model)."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = load_model(model_path, train=False)
    encode = chat_encoder(tokenizer)
    batch = [encode([{"role": "user", "content": f"Kuhn poker, game {i}. You hold the King. Legal actions: pass, bet"}])
             for i in range(prompts)]
    torch.manual_seed(0)
    with torch_threads(1):
        hf_generate(model, tokenizer, batch[:4], max_new_tokens=4, min_new_tokens=4)  # warm-up
        best = 0.0
        for _ in range(repeats):
            started = time.perf_counter()
            out = hf_generate(model, tokenizer, batch, max_new_tokens=tokens)
            best = max(best, sum(len(r) for r in out) / (time.perf_counter() - started))
    return best


# --- minimal GRPO loop --------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOSettings:
    """What the minimal loop takes from the experiment config."""

    game: str
    depth: int
    group_size: int
    groups: int
    max_new_tokens: int
    temperature: float
    top_p: float
    lr: float
    micro_batch: int
    grad_clip: float
    format_penalty: float
    seed: int = 0


def plain_grpo(model_path: str | Path, settings: GRPOSettings, loss_config, steps: int,
               reference_tok_s: float = 0.0) -> GRPOBaseline:
    """`steps` timed GRPO steps (after one warm-up step) in this process, one thread.

    Each step deals `groups` games, asks the model for the first decision of each `group_size`
    times (transformers generate), rewards a well-formed legal answer, normalises rewards within
    each group, and takes one AdamW step on the same clipped policy loss Strat uses."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_token_ids(tokenizer)[0]
    encode = chat_encoder(tokenizer)
    model = load_model(model_path, train=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    torch.manual_seed(settings.seed)

    generated = 0
    step_s = generate_s = learn_s = 0.0
    with torch_threads(1):
        threads = torch.get_num_threads()
        for step in range(steps + 1):
            started = time.perf_counter()
            envs, prompts = [], []
            for group in range(settings.groups):
                env = games.make(settings.game)
                env.reset(seed=derive_seed(settings.seed, step, group, "deal") % (2**31))
                envs.append(env)
                prompts.append(encode(build_messages(env, env.agent_selection, settings.depth)))
            model.eval()
            responses = hf_generate(model, tokenizer, [p for p in prompts for _ in range(settings.group_size)],
                                    settings.max_new_tokens, settings.temperature, settings.top_p)
            generated_at = time.perf_counter()
            rng = random.Random(settings.seed)
            samples: list[TrainSample] = []
            for group, (env, prompt) in enumerate(zip(envs, prompts, strict=True)):
                rows = responses[group * settings.group_size:(group + 1) * settings.group_size]
                rewards = []
                for response in rows:
                    parsed = parse_response(tokenizer.decode(response, skip_special_tokens=True), settings.depth)
                    decision = decide(parsed, env, env.agent_selection, rng, settings.format_penalty)
                    rewards.append(1.0 if decision.valid and parsed.format_valid else settings.format_penalty)
                advantages = normalise(torch.tensor(rewards), 1e-6).tolist()
                samples.extend(
                    TrainSample(f"g{group}", f"g{group}-e{i}", env.agent_selection, 0, tuple(prompt), tuple(response),
                                (0.0,) * len(response), advantage)
                    for i, (response, advantage) in enumerate(zip(rows, advantages, strict=True)) if response
                )
            model.train()
            optimizer.zero_grad(set_to_none=True)
            total = sum(len(s.response_token_ids) for s in samples)
            for chunk in chunks(samples, settings.micro_batch):
                batch = TrainBatch.collate(chunk, pad)
                logprobs = sequence_logprobs(model, batch, settings.temperature)
                out = policy_loss(loss_config, logprobs, logprobs.detach(), batch.advantages, batch.response_mask)
                (out.loss * (int(batch.response_mask.sum()) / max(total, 1))).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            optimizer.step()
            finished = time.perf_counter()
            if step == 0:
                continue  # warm-up
            generated += sum(len(r) for r in responses)
            step_s += finished - started
            generate_s += generated_at - started
            learn_s += finished - generated_at
    return GRPOBaseline(
        steps=steps, groups=settings.groups, group_size=settings.group_size, max_new_tokens=settings.max_new_tokens,
        threads=threads, generated_tokens=generated, step_s=step_s, generate_s=generate_s, learn_s=learn_s,
        mean_response_tokens=generated / max(1, steps * settings.groups * settings.group_size),
        reference_tok_s=reference_tok_s,
    )


# --- the rollout's own CPU work -----------------------------------------------------------------


class ReplayPolicy:
    """A `Generate` that returns recorded generations in order, checking that the prompts match:
    the rollout path with a zero-cost engine."""

    def __init__(self, calls: Sequence[tuple[list[list[int]], SamplingParams, list[Generation]]]) -> None:
        self._calls = list(calls)
        self._next = 0

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if self._next >= len(self._calls):
            raise RuntimeError("the replayed rollout asked for more generations than were recorded")
        recorded_prompts, recorded_params, out = self._calls[self._next]
        self._next += 1
        if [list(p) for p in recorded_prompts] != [list(p) for p in prompts] or recorded_params != params:
            raise RuntimeError("the replayed rollout diverged from the recorded one")
        return out
