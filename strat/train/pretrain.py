"""Rules pretraining: before the warm start, the stand-in model learns to read its game from the game's own engine.

A pretrained LLM already reads a board, knows its own card and can weigh what an opponent's moves say about theirs;
the tiny random-weight stand-in cannot. This stage fine-tunes it on short questions and answers that the game writes
(`games.rules_corpus`): the legal moves of a state, what an agent sees after a move, its own private information, and
the exact posterior over another player's private information under a stated policy. Nothing in it is a move choice,
so it teaches perception, not strategy; the warm start then teaches the response format on top of it.

Each example is a chat like the RL prompts: the system message holds the game's rules, the user message the agent's
view of the state as the RL prompt shows it (`reasoning.state_view`) and the question, the reply the answer. The
pretrained model is cached under `$STRAT_CACHE_DIR/pretrained/`, keyed by the model, the settings and the corpus.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import games
from games.rules_corpus import KINDS, RulesExample, kinds_for, rules_corpus
from strat.algorithm.reasoning import state_view
from strat.config import TINY_PRETRAIN_LR
from strat.model.tiny import cache_dir
from strat.train import supervised
from strat.train.supervised import Example, FitSettings, Messages, fit

PRETRAIN_VERSION = 1
"""Bumped whenever the stage changes in a way the settings and the corpus do not capture (part of the cache key)."""
PRETRAIN_INFO = "strat_pretrain.json"
"""Written into a pretrained model directory: the game, the settings and the training figures."""
GameOptions = tuple[tuple[str, int | float | str | bool], ...]


@dataclass(frozen=True)
class PretrainSettings:
    """The corpus and the optimisation of rules pretraining; every field is part of the cache key."""

    examples: int = 20_000
    """Questions and answers generated from the game's engine, in equal shares of the kinds."""
    epochs: int = 1
    """Passes over them."""
    lr: float = TINY_PRETRAIN_LR
    """Peak AdamW learning rate."""
    batch_size: int = 16
    """Examples per optimizer step."""
    max_seconds: float = 1800.0
    """A guard for slow machines: training stops after this long (then not cached)."""
    seed: int = 0
    """Seeds the corpus and the example order."""
    kinds: tuple[str, ...] = ()
    """The kinds of question (`games.rules_corpus.KINDS`); empty: every kind the game supports."""
    game_options: GameOptions = ()
    """The game's options as sorted (key, value) pairs; the corpus is of that game."""

    def __post_init__(self) -> None:
        for name in ("examples", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"pretrain.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0 or not self.max_seconds > 0:
            raise ValueError(f"pretrain.lr and max_seconds must be > 0, got {self.lr} and {self.max_seconds}")
        unknown = [kind for kind in self.kinds if kind not in KINDS]
        if unknown:
            raise ValueError(f"pretrain.kinds: unknown {unknown} (allowed: {', '.join(KINDS)})")


def rules_messages(rules: str, example: RulesExample) -> Messages:
    """The chat of one example: the rules as the system message, the agent's view of the state and the question as
    the user message."""
    return [
        {"role": "system", "content": f"Rules:\n{rules}"},
        {"role": "user", "content": f"{state_view(example.observation, example.history)}\n\n{example.question}"},
    ]


def pretrain_examples(game: str, settings: PretrainSettings) -> list[Example]:
    """(messages, answer) for every example of the game's rules corpus under `settings`."""
    options = dict(settings.game_options)
    rules = games.make(game, **options).rules()
    kinds = settings.kinds or kinds_for(game, **options)
    corpus = rules_corpus(game, settings.examples, seed=settings.seed, kinds=kinds, **options)
    return [(rules_messages(rules, example), example.answer) for example in corpus]


def _fit_settings(settings: PretrainSettings) -> FitSettings:
    return FitSettings(epochs=settings.epochs, lr=settings.lr, batch_size=settings.batch_size,
                       max_seconds=settings.max_seconds, seed=settings.seed)


def _train(model_dir: Path, out_dir: Path, game: str, settings: PretrainSettings,
           examples: list[Example]) -> dict[str, float]:
    return fit(model_dir, out_dir, examples, _fit_settings(settings), f"rules pretraining of {game}", "pretrain",
               PRETRAIN_INFO, {"game": game, "settings": asdict(settings)})


def pretrain(model_dir: Path, out_dir: Path, game: str, settings: PretrainSettings) -> dict[str, float]:
    """Fine-tune the model in `model_dir` on `game`'s rules corpus and save it to `out_dir` atomically; returns
    examples, steps, first/final loss, stopped_early (0/1) and seconds."""
    return _train(Path(model_dir), Path(out_dir), game, settings, pretrain_examples(game, settings))


def _cache_key(model_dir: Path, game: str, settings: PretrainSettings, examples: list[Example]) -> str:
    return supervised.cache_key(model_dir, {"version": PRETRAIN_VERSION, "game": game, "settings": asdict(settings),
                                            "corpus": supervised.examples_hash(examples)})


def ensure_pretrained(model_dir: Path, game: str, settings: PretrainSettings) -> Path:
    """The cached rules-pretrained copy of `model_dir`, trained on first use; safe when several processes race."""
    model_dir = Path(model_dir)
    examples = pretrain_examples(game, settings)
    target = cache_dir() / "pretrained" / f"{game}-{_cache_key(model_dir, game, settings, examples)}"
    return supervised.ensure_built(target, lambda out: _train(model_dir, out, game, settings, examples),
                                   PRETRAIN_INFO)
