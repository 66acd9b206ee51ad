"""Tiny Qwen2-architecture models built offline: a tokenizer trained on the games' own text
and random weights, saved as a Hugging Face directory with safetensors."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import games
from strat.algorithm.reasoning import corpus_texts
from strat.model import hub

# ChatML, as Qwen instruct models use it, so prompts look the same on tiny and real models.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
# Bumped whenever the build below changes in a way the settings do not capture.
BUILD_VERSION = 1


@dataclass(frozen=True)
class TinyModelSettings:
    """Sizes of the tiny model; part of the cache key."""

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 352
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 4096
    corpus_games: int = 200


GameOptions = tuple[tuple[str, int | float | str | bool], ...]


def corpus(game: str, settings: TinyModelSettings = TinyModelSettings(), text_options: GameOptions = ()) -> list[str]:
    """The tokenizer's training text: the game's texts (with its `text_options`, e.g. Kuhn's move names), the
    reasoning formats, chat markup."""
    texts = list(games.text_corpus(game, n_games=settings.corpus_games, seed=0, **dict(text_options)))
    for depth in (0, 1, 2):
        texts.extend(corpus_texts(depth))
    texts.extend(f"{IM_START}{role}\n" for role in ("system", "user", "assistant"))
    return texts


def cache_key(game: str, settings: TinyModelSettings, seed: int, text_options: GameOptions = ()) -> str:
    """A hash of everything the model depends on, so a change to the game texts rebuilds it."""
    digest = hashlib.sha256()
    payload = {
        "build": BUILD_VERSION,
        "game": game,
        "seed": seed,
        "settings": asdict(settings),
        "template": CHAT_TEMPLATE,
        "corpus": corpus(game, settings, text_options),
    }
    digest.update(json.dumps(payload, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where built models are kept: `$STRAT_CACHE_DIR` or `~/.cache/strat`."""
    return Path(os.environ.get("STRAT_CACHE_DIR", Path.home() / ".cache" / "strat"))


def build_tokenizer(texts: list[str], vocab_size: int):  # -> PreTrainedTokenizerFast
    """Train a byte-level BPE tokenizer (any byte string stays encodable) with a chat template."""
    # Imported here for start-up cost: strat.config imports this module for TinyModelSettings, and every CLI verb
    # imports strat.config; tokenizers, transformers and torch take seconds.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(game: str, out: str | os.PathLike[str], seed: int = 0, settings: TinyModelSettings = TinyModelSettings(),
          text_options: GameOptions = ()) -> Path:
    """Build the tiny model for `game` (its text with `text_options`) into `out` (created or replaced);
    deterministic for a seed."""
    import torch  # start-up cost, as in `build_tokenizer`
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(corpus(game, settings, text_options), settings.vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_kv_heads,
        head_dim=settings.head_dim,
        max_position_embeddings=settings.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, bos_token_id=eos_id)

    target = Path(out)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent if target.parent.exists() else None))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "strat_tiny.json").write_text(
            json.dumps({"game": game, "seed": seed, "settings": asdict(settings), "build": BUILD_VERSION,
                        "text_options": dict(text_options)}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_once(target: Path, build_into: Callable[[Path], object]) -> Path:
    """A cached model directory at `target`, written by `build_into(dir)` on first use.

    It is built in a staging folder and renamed into place, so a reader never sees half a model. Processes that
    want the same directory at once take turns on a lock file beside it (`.<name>.lock`): the first builds it, the
    others wait and use its copy instead of building their own (parallel test workers, several runs started
    together). Where the file system refuses the lock they race instead: when another one publishes first, its
    copy is used."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target):
        if (target / "config.json").is_file():  # built by the process that held the lock
            return target
        return _build_into_place(target, build_into)


@contextlib.contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """An exclusive lock on `.<target name>.lock` beside `target`, released when the block ends or the process dies
    (`flock`); none where the file system does not support it."""
    try:
        handle = open(target.parent / f".{target.name}.lock", "a")  # noqa: SIM115 (held across the yield)
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def _build_into_place(target: Path, build_into: Callable[[Path], object]) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build_into(staging / "model")
        try:
            os.rename(staging / "model", target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure(game: str, seed: int = 0, settings: TinyModelSettings = TinyModelSettings(),
           text_options: GameOptions = ()) -> Path:
    """The cached tiny model for `game` (its text with `text_options`), built on first use; safe when several
    processes race."""
    target = cache_dir() / "tiny" / f"{game}-{cache_key(game, settings, seed, text_options)}"
    return build_once(target, lambda out: build(game, out, seed=seed, settings=settings, text_options=text_options))


def resolve_model_path(path: str, seed: int = 0, settings: TinyModelSettings = TinyModelSettings(),
                       text_options: GameOptions = ()) -> Path:
    """A model directory for a config's `model.path`: `tiny:<game>` is built with `settings` (its tokenizer trained
    on the game's text with `text_options`) and cached, a Hub name is taken from the Hugging Face cache or
    downloaded (`strat.model.hub`)."""
    if path.startswith("tiny:"):
        return ensure(path.split(":", 1)[1], seed=seed, settings=settings, text_options=text_options)
    return hub.local_dir(path)
