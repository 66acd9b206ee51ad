"""The supervised fine-tuning loop shared by the stages before RL (the rules pretraining and the warm start): chat
examples with the loss on the reply's tokens only, AdamW with warm-up and cosine decay, and an atomic save.

An example is (prompt messages, reply). The prompt (system and user messages, formatted by the tokenizer's chat
template) gets no loss; a whole reply (text) and its end-of-turn token do. A `PartialReply` is a reply cut where one
skill is exercised: its opening is given without loss, and only its target (e.g. a move's name) is learnt. Where the
target was drawn uniformly from several (`PartialReply.drawn_from`, e.g. a random legal move), the token where they
part is learnt as the distribution they give it, the draw's expectation without its noise (`soft_label`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.engines.base import chat_prompt_ids
from strat.model.tiny import build_once

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class PartialReply:
    """A reply cut where one skill is exercised: `prefix` opens the reply and gets no loss, `target` follows it and
    is learnt; no end-of-turn token follows (the reply would go on after the target)."""

    prefix: str
    target: str
    drawn_from: tuple[str, ...] = ()
    """The targets `target` was drawn from uniformly (it among them), e.g. every legal move's name: the first token
    where they part is then learnt as their distribution over it (`soft_label`), the loss's expectation over the draw
    without its sampling noise; the tokens before and after it are `target`'s. Empty: `target` alone."""

    def __post_init__(self) -> None:
        if self.drawn_from and self.target not in self.drawn_from:
            raise ValueError(f"PartialReply target {self.target!r} is not among drawn_from {self.drawn_from!r}")


@dataclass(frozen=True)
class SoftLabel:
    """A distribution in place of one labelled token: at `position` (an index into the example's input ids, whose
    hard label the loss then ignores), the target is `weights` over `tokens`."""

    position: int
    tokens: tuple[int, ...]
    weights: tuple[float, ...]


Example = tuple[Messages, str | PartialReply]
"""(prompt messages, reply) for one supervised example: a whole reply, or a `PartialReply`."""

IGNORE_INDEX = -100
"""Label of positions that get no loss (prompt and padding), as torch's cross-entropy expects."""
PROGRESS_EVERY_S = 60.0
"""How often, at most, a line of training progress (step, loss, time left) is logged."""
log = logging.getLogger("strat.supervised")


@dataclass(frozen=True)
class FitSettings:
    """The optimisation of one supervised stage."""

    epochs: int
    """Passes over the examples."""
    lr: float
    """Peak AdamW learning rate (linear warm-up, then cosine decay to a tenth of it)."""
    batch_size: int
    """Examples per optimizer step."""
    max_seconds: float
    """Stop training after this long even if epochs remain: a guard for very slow machines, not the normal end."""
    seed: int
    """Seeds the example order."""
    example_mean: bool = False
    """Average each example's labelled tokens first, then the examples, so that a `PartialReply`'s one or two target
    tokens weigh as much as a whole reply's hundred; False: every labelled token weighs the same."""
    context_loss: float = 0.0
    """Add this weight times each example's mean next-token loss over its context (`context_loss`): a dense signal
    for reading the game's text. 0: the reply alone is learned."""


def _token_ids(encoded: object) -> list[int]:
    """Token ids from a tokenizer call, which returns a list or a BatchEncoding depending on the version."""
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    return list(encoded)


def encode_example(tokenizer, messages: Messages, response: str | PartialReply) -> tuple[list[int], list[int]]:
    """(input ids, labels): the chat prompt then the response and end-of-turn token; labels are IGNORE_INDEX on the
    prompt, so only the response is learned. A `PartialReply`: the chat prompt, its prefix (no loss, tokenized alone as
    an engine's output would be) and its target (learnt), with no end-of-turn token."""
    prompt = chat_prompt_ids(tokenizer, messages)
    if isinstance(response, PartialReply):
        prompt = prompt + (_token_ids(tokenizer(response.prefix, add_special_tokens=False)) if response.prefix else [])
        target = _token_ids(tokenizer(response.target, add_special_tokens=False))
    else:
        target = _token_ids(tokenizer(response, add_special_tokens=False)) + [tokenizer.eos_token_id]
    return prompt + target, [IGNORE_INDEX] * len(prompt) + target


def soft_label(tokenizer, response: str | PartialReply, length: int) -> SoftLabel | None:
    """The distribution that replaces one label of `encode_example`'s (whose ids are `length` long, the target last):
    for a `PartialReply` with `drawn_from`, at the first token where the candidates' tokenizations part (after any
    they share, such as a leading space), the share of candidates that continue with each token. None for any other
    example, or where every candidate tokenizes alike. A ValueError where one candidate's tokens are a prefix of
    another's (no token tells them apart there)."""
    if not isinstance(response, PartialReply) or len(set(response.drawn_from)) < 2:
        return None
    candidates = [_token_ids(tokenizer(name, add_special_tokens=False)) for name in response.drawn_from]
    part = 0
    while all(len(ids) > part for ids in candidates) and len({ids[part] for ids in candidates}) == 1:
        part += 1
    if any(len(ids) <= part for ids in candidates):
        raise ValueError(f"the candidate targets {response.drawn_from!r}: one's tokens are a prefix of another's")
    shares: dict[int, float] = {}
    for ids in candidates:
        shares[ids[part]] = shares.get(ids[part], 0.0) + 1.0 / len(candidates)
    start = length - len(_token_ids(tokenizer(response.target, add_special_tokens=False)))
    return SoftLabel(start + part, tuple(shares), tuple(shares.values()))


def collate(encoded: Sequence[tuple[list[int], list[int]]], pad_id: int,
            soft: Sequence[SoftLabel | None] = ()) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (IGNORE_INDEX on padding) for a batch, and `context_labels`:
    the input ids where the labels ignore them (the context: the prompt and a partial reply's prefix), IGNORE_INDEX
    elsewhere. With any `soft` labels (one per row, None for most), also `soft_position` (-1 where a row has none;
    its hard label there becomes IGNORE_INDEX), `soft_tokens` and `soft_weights` (zero-padded)."""
    width = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    labels = torch.full((len(encoded), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, (ids, target) in enumerate(encoded):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(ids)] = torch.tensor(target)
        attention[row, : len(ids)] = 1
    context = torch.where((labels == IGNORE_INDEX) & (attention == 1), input_ids, IGNORE_INDEX)
    batch = {"input_ids": input_ids, "attention_mask": attention, "labels": labels, "context_labels": context}
    if any(label is not None for label in soft):
        if len(soft) != len(encoded):
            raise ValueError(f"{len(soft)} soft labels for {len(encoded)} examples")
        width = max(len(label.tokens) for label in soft if label is not None)
        batch["soft_position"] = torch.full((len(encoded),), -1, dtype=torch.long)
        batch["soft_tokens"] = torch.zeros((len(encoded), width), dtype=torch.long)
        batch["soft_weights"] = torch.zeros((len(encoded), width), dtype=torch.float32)
        for row, label in enumerate(soft):
            if label is None:
                continue
            batch["soft_position"][row] = label.position
            batch["soft_tokens"][row, : len(label.tokens)] = torch.tensor(label.tokens)
            batch["soft_weights"][row, : len(label.weights)] = torch.tensor(label.weights)
            labels[row, label.position] = IGNORE_INDEX
    return batch


def shared_prefix(batch: Mapping[str, torch.Tensor]) -> int:
    """Leading columns that are the same prompt tokens in every row (the system prompt), less one so that the first
    token after them is still predicted inside the graph."""
    ids, labels = batch["input_ids"], batch["labels"]
    same = (ids == ids[:1]).all(dim=0) & (labels == IGNORE_INDEX).all(dim=0)
    differing = (~same).nonzero()
    length = int(differing[0]) if len(differing) else ids.shape[1]
    return max(0, length - 1)


def _row_means(per_token: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean over the rows that have any target of each row's mean over its targets."""
    counts = (targets != IGNORE_INDEX).sum(dim=1)
    rows = counts > 0
    return (per_token.sum(dim=1)[rows] / counts[rows]).mean()


def response_loss(model, batch: Mapping[str, torch.Tensor], example_mean: bool = False,
                  context_loss: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled (response) tokens of the batch; with `example_mean`, the mean
    over the rows of each row's mean (every example weighs the same, however many tokens its reply has).

    The prompt prefix shared by every row carries no loss, so it is encoded once, without gradient, and reused as the
    KV cache of each row: the same loss at a fraction of the cost on CPU (prompts are mostly the system prompt).

    With `context_loss`, the loss adds that weight times the mean over the rows of each row's mean next-token
    cross-entropy over its whole context (`collate`'s `context_labels`): the game's text itself (the board, the
    history, the legal moves that follow from them), as `copy_curve.py --context-loss` measures it. The shared prefix
    is then not cached: its tokens are learned too, and the loss does not depend on which examples share a batch.
    """
    ids, shared = batch["input_ids"], 0 if context_loss else shared_prefix(batch)
    cache = None
    if shared:
        with torch.no_grad():
            cache = model(input_ids=ids[:1, :shared], use_cache=True).past_key_values
        cache.batch_repeat_interleave(ids.shape[0])
    positions = torch.arange(shared, ids.shape[1]).expand(ids.shape[0], -1)
    logits = model(
        input_ids=ids[:, shared:],
        attention_mask=batch["attention_mask"],
        position_ids=positions,
        past_key_values=cache,
        use_cache=cache is not None,
    ).logits[:, :-1]
    targets = batch["labels"][:, shared + 1 :]
    if "soft_position" in batch:
        loss = _loss_with_soft(logits, targets, batch, shared, example_mean)
    elif not example_mean:
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX)
    else:
        loss = _row_means(F.cross_entropy(logits.transpose(1, 2).float(), targets, ignore_index=IGNORE_INDEX,
                                          reduction="none"), targets)
    if context_loss:
        context = batch["context_labels"][:, 1:]
        if (context != IGNORE_INDEX).any():
            loss = loss + context_loss * _row_means(F.cross_entropy(
                logits.transpose(1, 2).float(), context, ignore_index=IGNORE_INDEX, reduction="none"), context)
    return loss


def _loss_with_soft(logits: torch.Tensor, targets: torch.Tensor, batch: Mapping[str, torch.Tensor], shared: int,
                    example_mean: bool) -> torch.Tensor:
    """`response_loss`'s loss over the labelled tokens where some rows have a soft label: at its position the
    cross-entropy against its weights takes the place of the (ignored) hard label's, counted as one token."""
    per_token = F.cross_entropy(logits.transpose(1, 2).float(), targets, ignore_index=IGNORE_INDEX, reduction="none")
    counted = (targets != IGNORE_INDEX).float()
    rows = (batch["soft_position"] >= 0).nonzero().flatten()
    columns = batch["soft_position"][rows] - 1 - shared  # the logits at index i predict the token at i + 1 + shared
    log_probs = torch.log_softmax(logits[rows, columns].float(), dim=-1)
    soft = -(log_probs.gather(1, batch["soft_tokens"][rows]) * batch["soft_weights"][rows]).sum(dim=1)
    per_token = per_token.index_put((rows, columns), soft, accumulate=True)
    counted = counted.index_put((rows, columns), torch.ones_like(soft), accumulate=True)
    if not example_mean:
        return per_token.sum() / counted.sum()
    counts = counted.sum(dim=1)
    kept = counts > 0
    return (per_token.sum(dim=1)[kept] / counts[kept]).mean()


def _lr_factor(step: int, total: int) -> float:
    warmup = max(1, total // 20)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress)))


def save_atomically(model, tokenizer, out_dir: Path, info_file: str, info: dict[str, object]) -> None:
    """Write the model directory, with `info` as JSON in `info_file`, to a staging folder beside `out_dir`, then move
    it into place."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / info_file).write_text(json.dumps(info, indent=2, sort_keys=True))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def training_threads() -> Iterator[None]:
    """Two torch intra-op threads when the process may use two cores or more, for a supervised stage only, then as
    they were. The stages run before the actors start, alone: on a 2-core box two threads fit the tiny model 1.33x
    faster than the process-wide one (same losses); more threads were not measured."""
    previous = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(previous, min(cores, 2)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fit(model_dir: Path, out_dir: Path, examples: Sequence[Example], settings: FitSettings, label: str,
        section: str, info_file: str, info: dict[str, object]) -> dict[str, float]:
    """Fine-tune the model in `model_dir` on `examples` and save it to `out_dir` atomically, with `info` and the
    figures in `info_file`; returns examples, steps, first/final loss, stopped_early (0/1) and seconds. `label` names
    the stage in the log (e.g. "warm start of kuhn_poker"), `section` the config section of its settings."""
    with training_threads():
        return _fit(Path(model_dir), Path(out_dir), examples, settings, label, section, info_file, info)


def _fit(model_dir: Path, out_dir: Path, examples: Sequence[Example], settings: FitSettings, label: str,
         section: str, info_file: str, info: dict[str, object]) -> dict[str, float]:
    start = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True)
    model.train()
    encoded = [encode_example(tokenizer, messages, response) for messages, response in examples]
    soft = [soft_label(tokenizer, response, len(ids))
            for (_, response), (ids, _) in zip(examples, encoded, strict=True)]
    if all(label is None for label in soft):
        soft = []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    per_epoch = math.ceil(len(encoded) / settings.batch_size)
    total = per_epoch * settings.epochs
    order = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    stopped_early = False
    log.info("%s: %d examples x %d epoch(s) = %d steps (stopped after %s.max_seconds=%g s)",
             label, len(encoded), settings.epochs, total, section, settings.max_seconds)
    reported = start
    for _ in range(settings.epochs):
        permutation = torch.randperm(len(encoded), generator=order).tolist()
        for first in range(0, len(encoded), settings.batch_size):
            if time.monotonic() - start > settings.max_seconds:
                stopped_early = True
                break
            chosen = permutation[first : first + settings.batch_size]
            batch = collate([encoded[i] for i in chosen], pad_id, [soft[i] for i in chosen] if soft else ())
            for group in optimizer.param_groups:
                group["lr"] = settings.lr * _lr_factor(len(losses), total)
            loss = response_loss(model, batch, settings.example_mean, settings.context_loss)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            now = time.monotonic()
            if now - reported >= PROGRESS_EVERY_S:
                reported = now
                left = (now - start) / len(losses) * (total - len(losses))
                log.info("%s: step %d of %d, loss %.3f, ~%.0f min left", label, len(losses), total, losses[-1],
                         left / 60)
        if stopped_early:
            break
    model.eval()
    if stopped_early:
        warnings.warn(f"{label} stopped after {settings.max_seconds} s at step {len(losses)} of {total}; "
                      f"raise {section}.max_seconds for the full run", stacklevel=4)
    tail = losses[-max(1, len(losses) // 10) :]
    figures = {
        "examples": float(len(encoded)),
        "steps": float(len(losses)),
        "first_loss": losses[0] if losses else float("nan"),
        "final_loss": sum(tail) / len(tail) if tail else float("nan"),
        "stopped_early": float(stopped_early),
        "seconds": time.monotonic() - start,
    }
    save_atomically(model, tokenizer, out_dir, info_file, {**info, "figures": figures})
    return figures


def stopped_early(model_dir: Path, info_file: str) -> bool:
    """Whether the stage that wrote `model_dir` (its `info_file`) was cut short by its `max_seconds` guard."""
    info = Path(model_dir) / info_file
    if not info.is_file():
        return False
    return bool(json.loads(info.read_text()).get("figures", {}).get("stopped_early"))


# --- the cache ------------------------------------------------------------------------------------------------------


def cache_key(model_dir: Path, payload: Mapping[str, object]) -> str:
    """16 hex digits over the model's weights, tokenizer and config and a stage's `payload` (its version, settings
    and a hash of its examples): a stage's cached output is reused only for the same model and the same training."""
    digest = hashlib.sha256()
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {model_dir}")
    # config.json too: two architectures can share every tensor's shape and bytes (e.g. 2 heads of 64 or 4 of 32).
    for path in [*files, Path(model_dir) / "tokenizer.json", Path(model_dir) / "config.json"]:
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    digest.update(json.dumps(payload, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def examples_hash(examples: Sequence[Example]) -> str:
    """The SHA-256 of a stage's examples, for its cache key."""
    return hashlib.sha256(json.dumps(examples, default=_hashed).encode()).hexdigest()


def _hashed(record: object) -> dict[str, object]:
    """A dataclass as `examples_hash` hashes it: a `PartialReply` without candidates as it was before they existed,
    so that caches built then keep their keys."""
    fields = asdict(record)
    if isinstance(record, PartialReply) and not record.drawn_from:
        del fields["drawn_from"]
    return fields


def ensure_built(target: Path, build: Callable[[Path], object], info_file: str) -> Path:
    """The cached stage output `target`, built by `build(out_dir)` on first use (safe when several processes race).
    A build cut short by its max_seconds guard (a slow or busy machine) serves the run that made it but is moved out
    of the cache, so that the next run with the same settings trains the whole stage instead of reusing a
    half-trained model."""
    built = build_once(target, build)
    if not stopped_early(built, info_file):
        return built
    aside = built.with_name(f"{built.name}-stopped-early-{os.getpid()}-{time.time_ns()}")
    try:
        os.rename(built, aside)
    except OSError:  # another process moved it first: this one trains its own
        return ensure_built(target, build, info_file)
    return aside
