"""What did rules pretraining teach? The model answers held-out questions of its game's rules corpus, greedily, and
each kind of question gets its share of exact answers:

    python experiments/can_the_model_read_its_game/rules_answers.py --config CONFIG
        [--model DIR] [--questions N] [--seed S] [key=value ...]

The model is the config's rules-pretrained model (`pretrain:` settings; trained on first use and cached, as
`strat pretrain` does), or `--model` (a warm start, say, to see what the warm start kept). The questions are
`--questions` of each kind the config pretrains on, drawn from the corpus with `--seed` (it must differ from
`pretrain.seed`); a question whose prompt is also in the training corpus is counted apart as seen (a small game
such as two-player Kuhn has only about a hundred distinct questions, so most are seen). Printed per kind: the share
of exact answers to the unseen and to the seen questions with its 95% interval (Wilson), and for `legal_moves` the
share of the moves named that are legal (precision) and of the legal moves that are named (recall), means over the
unseen questions, with a model that guesses blindly in mind: an untrained model answers nothing exactly.

The pieces are functions over an `Answer` (messages -> text), so tests drive them with a fake model.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import games  # noqa: E402
from games.rules_corpus import Kind, RulesExample, kinds_for, rules_corpus  # noqa: E402
from strat.engines.base import chat_prompt_ids  # noqa: E402
from strat.train.pretrain import rules_messages  # noqa: E402
from strat.train.supervised import Messages  # noqa: E402

Answer = Callable[[Messages], str]
"""A model's greedy answer to one question's chat."""


@dataclass(frozen=True)
class Share:
    """k of n, with its Wilson 95% interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        if not self.n:
            return (float("nan"), float("nan"))
        p, n = self.value, self.n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))

    def __str__(self) -> str:
        low, high = self.interval()
        return f"{self.value:.3f} [{low:.3f}, {high:.3f}] ({self.k} of {self.n})"


@dataclass(frozen=True)
class KindAnswers:
    """The answers to one kind of question."""

    kind: Kind
    exact: Share
    """Unseen questions answered exactly (after stripping surrounding white space)."""
    seen: Share
    """Questions whose prompt is in the training corpus (left out of the other figures), answered exactly."""
    precision: float | None = None
    """legal_moves: mean share of the named moves that are legal (None for other kinds or no answer naming a move)."""
    recall: float | None = None
    """legal_moves: mean share of the legal moves that are named."""


def named_moves(answer: str) -> list[str]:
    """The move names of a legal_moves answer ("a1, b2, c3")."""
    return [name.strip() for name in answer.split(",") if name.strip()]


def question_key(example: RulesExample) -> tuple[str, str, str]:
    """What the model sees of a question: its observation, history and wording."""
    return (example.observation, example.history, example.question)


def answer_kind(answer: Answer, rules: str, kind: Kind, questions: Sequence[RulesExample],
                seen: set[tuple[str, str, str]]) -> KindAnswers:
    """Answer the unseen `questions` of one kind and score them."""
    unseen = [example for example in questions if question_key(example) not in seen]
    exact, precisions, recalls = 0, [], []
    for example in unseen:
        given = answer(rules_messages(rules, example)).strip()
        exact += given == example.answer.strip()
        if kind == "legal_moves":
            named, legal = named_moves(given), set(named_moves(example.answer))
            if named:
                precisions.append(sum(name in legal for name in named) / len(named))
            recalls.append(len(legal & set(named)) / len(legal) if legal else 1.0)
    known = [example for example in questions if question_key(example) in seen]
    recalled = sum(answer(rules_messages(rules, example)).strip() == example.answer.strip() for example in known)
    return KindAnswers(kind, Share(exact, len(unseen)), Share(recalled, len(known)),
                       _mean(precisions) if kind == "legal_moves" else None,
                       _mean(recalls) if kind == "legal_moves" else None)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rules_answers(answer: Answer, game: str, kinds: Sequence[Kind], per_kind: int, seed: int,
                  training: Sequence[RulesExample], options: Mapping[str, object] | None = None
                  ) -> list[KindAnswers]:
    """Each kind's answers to `per_kind` questions drawn with `seed`, leaving out those whose prompt is in
    `training` (the pretraining corpus)."""
    options = dict(options or {})
    rules = games.make(game, **options).rules()
    seen = {question_key(example) for example in training}
    drawn = rules_corpus(game, per_kind * len(kinds), seed=seed, kinds=kinds, **options)
    return [answer_kind(answer, rules, kind, [example for example in drawn if example.kind == kind], seen)
            for kind in kinds]


def greedy_answer(model, tokenizer, max_new_tokens: int) -> Answer:  # noqa: ANN001
    """An `Answer` from a causal LM: its chat prompt, then greedy decoding to the end-of-turn token."""
    import torch

    def answer(messages: Messages) -> str:
        ids = torch.tensor([chat_prompt_ids(tokenizer, messages)], device=next(model.parameters()).device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
        return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    return answer


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from strat.config_loading import load_config
    from strat.engines import resolve_device
    from strat.train.pretrain import ensure_pretrained
    from strat.train.settings import base_model_path, pretrain_settings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", type=Path, help="a model directory instead of the config's rules-pretrained one")
    parser.add_argument("--questions", type=int, default=60, help="questions of each kind")
    parser.add_argument("--seed", type=int, default=7, help="draws the questions; must differ from pretrain.seed")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    config = load_config(args.config, list(args.overrides))
    settings = pretrain_settings(config)
    if args.seed == settings.seed:
        parser.error(f"--seed {args.seed} is pretrain.seed: the questions would be the training corpus's own")
    game, options = config.game.name, dict(config.game.options)
    kinds = settings.kinds or kinds_for(game, **options)
    model_dir = args.model or ensure_pretrained(base_model_path(config), game, settings)
    training = rules_corpus(game, settings.examples, seed=settings.seed, kinds=kinds, **options)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True)
    answer = greedy_answer(model.to(resolve_device("auto")).eval(), tokenizer, args.max_new_tokens)
    print(f"{game}, model {model_dir}, {args.questions} questions of each kind (seed {args.seed})")
    for result in rules_answers(answer, game, kinds, args.questions, args.seed, training, options):
        line = f"{result.kind}: unseen, exact {result.exact}; seen in training, exact {result.seen}"
        if result.kind == "legal_moves" and result.recall is not None:
            precision = "n/a" if result.precision is None else f"{result.precision:.3f}"
            line += f"; named moves legal {precision}, legal moves named {result.recall:.3f}"
        print(line)


if __name__ == "__main__":
    main()
