"""Can the stand-in model learn to name a legal cell at all, and from how many examples? (issue 41)

The board probe (`perception_probes.py`) finds that a warm-started tiny model puts the probability of a model that
ignores the board on legal cells at the first mention of its move, whatever the warm start's size. This script
measures the learning curve of that one skill in isolation: it trains a model on the probe's own task (the prompt,
a templated response cut at the first mention of the move, then a uniformly drawn legal move: a legal move, not a
choice of strategy) with the loss on the move's tokens only, and prints the probe's figure on held-out decisions
every `--every` examples.

    python experiments/can_the_model_read_its_game/copy_curve.py --config configs/tic_tac_toe_tiny.yaml \\
        --examples 20000 --every 2000 [--model DIR] [--lr 1e-3] [--context full|user|legal] [--one-token]
        [--curriculum legal:8000,user:8000] [--soft] [key=value ...]

The rate matters, and the target more: on the 2 x 128 model 1e-3 learns nothing in the whole prompt where 3e-4 does,
and at 3e-4 `--soft` (the uniform distribution over the legal moves as the target, instead of one drawn legal move)
reaches 0.921 after 24,000 examples where the drawn move reaches 0.686 (docs/results.md, "Models that read their
game").

Training decisions come from seeded random games of seed `--train-seed` (default 1); the probe's come from seed 0,
as `perception_probes.py --seed 0` draws them. Early positions recur in random play, so a probe decision can match
a training one; the script prints the share of probe decisions whose prompt occurs among the training examples, and the
figure over the unseen decisions alone.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perception_probes as probes  # noqa: E402

from strat.algorithm.reasoning import build_messages, format_prompt  # noqa: E402
from strat.train.warmstart import templated_response  # noqa: E402


@dataclass(frozen=True)
class Decision:
    """One training decision: the probe's context (prompt, templated response cut at the first mention of the move)
    and the move that follows it, a uniformly drawn legal one."""

    messages: list[dict[str, str]]
    prefix: str
    space: bool
    """Whether the cut dropped a space before the move (it is then scored as " name")."""
    move: str
    legal: tuple[str, ...]
    names: tuple[str, ...]
    """Every move name of the game (the probe's candidates)."""


def one_token_names(names: list[str]) -> dict[str, str]:
    """Each move name's stand-in of one digit (1-9 in the game's order), which every tokenizer here keeps as one
    token: a cell such as "b2" is two (" b", "2")."""
    if len(names) > 9:
        raise ValueError(f"{len(names)} move names: one digit each needs at most 9")
    return {name: str(index + 1) for index, name in enumerate(names)}


def renamed(text: str, names: dict[str, str]) -> str:
    """`text` with every move name (a whole word) replaced by its stand-in."""
    pattern = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, names)) + r")(?![\w])")
    return pattern.sub(lambda found: names[found.group(1)], text)


def decisions(game: str, depth: int, count: int, seed: int, options: dict[str, object],
              name_legal: bool, one_token: bool = False) -> list[Decision]:
    """`count` decisions of seeded random games of `seed` (`probes.board_decisions`), each cut as the probe cuts;
    with `one_token`, every move name in the texts is replaced by a one-digit stand-in (`one_token_names`)."""
    rng = random.Random(seed + 1)
    out = []
    for env in probes.board_decisions(game, count, seed, options):
        agent = env.agent_selection
        move = rng.choice(env.legal_actions(agent))
        response = templated_response(env, agent, move, depth, rng, name_legal)
        name = env.action_name(move, agent)
        prefix, space = probes.first_mention(response, name, depth)
        decision = Decision(build_messages(env, agent, depth), prefix, space, name,
                            tuple(env.legal_action_names(agent)), tuple(env.all_action_names()))
        if one_token:
            names = one_token_names(env.all_action_names())
            decision = Decision([{**m, "content": renamed(m["content"], names)} for m in decision.messages],
                                renamed(prefix, names), space, names[name], tuple(names[n] for n in decision.legal),
                                tuple(names.values()))
        out.append(decision)
    return out


CONTEXTS = ("full", "user", "legal")
"""`full`: the probe's context (the whole prompt in the chat template, the response up to the mention); `user`: the
same without the system message (the rules and the format: most of the prompt's length); `legal`: the prompt's
`Legal actions:` line alone, then "I play" (is the prompt's length what the model cannot read through?)."""


def context_ids(tokenizer, decision: Decision, context: str = "full") -> tuple[list[int], bool]:  # noqa: ANN001
    """The ids before the move, and whether the move follows a space."""
    if context == "legal":
        user = decision.messages[-1]["content"]
        line = next(line for line in user.splitlines() if line.startswith("Legal actions:"))
        return tokenizer(line + "\nI play", add_special_tokens=False)["input_ids"], True
    messages = decision.messages if context == "full" else [m for m in decision.messages if m["role"] != "system"]
    text = format_prompt(tokenizer, messages) + decision.prefix
    return tokenizer(text, add_special_tokens=False)["input_ids"], decision.space


def curriculum(text: str) -> list[tuple[str, int]]:
    """`--curriculum`'s stages, in order: "legal:8000,user:8000" -> [("legal", 8000), ("user", 8000)]."""
    stages = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        context, _, count = part.partition(":")
        if context not in CONTEXTS or not count.isdigit() or int(count) <= 0:
            raise ValueError(f"--curriculum stage {part!r}: expected CONTEXT:EXAMPLES with CONTEXT one of"
                             f" {', '.join(CONTEXTS)}, e.g. legal:8000")
        stages.append((context, int(count)))
    return stages


Example = tuple[list[int], list[int], tuple[int, ...]]
"""(context ids, target ids, the legal moves' last token ids: empty unless the target is soft)."""


def tokenized(tokenizer, decision: Decision, context: str = "full", soft: bool = False) -> Example:  # noqa: ANN001
    """(context ids, target ids, soft ids) of a decision. With `soft`, the target is the uniform distribution over
    the legal moves: every legal name must tokenize as one shared prefix (the space) and one token of its own, the
    target ids are that prefix and the soft ids the legal names' own tokens (a ValueError otherwise)."""
    ids, space = context_ids(tokenizer, decision, context)
    target = tokenizer((" " if space else "") + decision.move, add_special_tokens=False)["input_ids"]
    if not soft:
        return ids, target, ()
    names = [tokenizer((" " if space else "") + name, add_special_tokens=False)["input_ids"] for name in decision.legal]
    if any(len(name) != len(target) or name[:-1] != target[:-1] for name in names):
        raise ValueError(f"--soft: the legal names {decision.legal} do not share all but their last token")
    return ids, target[:-1], tuple(name[-1] for name in names)


def legal_shares(model, tokenizer, held_out: list[Decision], context: str = "full") -> list[float]:  # noqa: ANN001
    """Each decision's share of the move names' probability on its legal moves (`perception_probes.legal_mass`'s
    per-decision figure with the full context)."""
    shares = []
    for decision in held_out:
        ids, space = context_ids(tokenizer, decision, context)
        probabilities = probes.name_probabilities(model, tokenizer, ids, decision.names, space)
        shares.append(sum(probabilities[name] for name in decision.legal))
    return shares


def batch_loss(model, pad_id: int, batch: list[Example],  # noqa: ANN001
               context_weight: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy of the target tokens given their context (right-padded batch), and where an example has
    soft ids, the cross-entropy of its next token against the uniform distribution over them; with `context_weight`,
    plus that weight times each example's mean next-token cross-entropy over its context (the prompt and the
    response before the move: a language model's loss on the game's own text, where the legal-moves line follows
    from the board and the board from the history)."""
    rows = [context + target for context, target, _ in batch]
    width = max(map(len, rows))
    ids = torch.tensor([row + [pad_id] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    logits = model(input_ids=ids, attention_mask=mask).logits
    losses = []
    for k, (context, target, soft) in enumerate(batch):
        positions = torch.arange(len(context) - 1, len(context) + len(target) - 1)
        loss = (torch.nn.functional.cross_entropy(logits[k, positions].float(), torch.tensor(target)) * len(target)
                if target else logits.new_zeros(()))
        if soft:
            log_probs = torch.log_softmax(logits[k, len(context) + len(target) - 1].float(), dim=-1)
            loss = loss - log_probs[list(soft)].mean()
        loss = loss / (len(target) + (1 if soft else 0))
        if context_weight:
            loss = loss + context_weight * torch.nn.functional.cross_entropy(
                logits[k, :len(context) - 1].float(), torch.tensor(context[1:]))
        losses.append(loss)
    return torch.stack(losses).mean()


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from strat.config_loading import load_config
    from strat.train.trainer import Trainer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", type=Path, help="a model directory instead of the config's initial policy")
    parser.add_argument("--examples", type=int, default=20000)
    parser.add_argument("--every", type=int, default=2000, help="probe every this many examples")
    parser.add_argument("--states", type=int, default=60, help="the probe's held-out decisions")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--train-seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", choices=CONTEXTS, default="full", help="full: the probe's context; user: it"
                        " without the system message; legal: the prompt's legal-moves line alone")
    parser.add_argument("--one-token", action="store_true", help="replace each move name by a one-digit stand-in in"
                        " every text, training and probe alike (is the two-token name what the model cannot copy?)")
    parser.add_argument("--curriculum", default="", help="stages trained before `--examples` in the probed"
                        " context, e.g. legal:8000,user:8000 (their own decisions of the same seed; the figure stays"
                        " that of --context)")
    parser.add_argument("--context-loss", type=float, default=0.0, help="also train the next-token loss on the"
                        " context's tokens at this weight (each example's mean), a dense signal for reading: the"
                        " legal-moves line is the board's free cells")
    parser.add_argument("--soft", action="store_true", help="train each decision on the uniform distribution over"
                        " its legal moves (the expectation of the drawn move's one-hot target, without its noise)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    if args.train_seed == 0:
        parser.error("--train-seed 0 draws the probe's own decisions")
    try:
        stages = [*curriculum(args.curriculum), (args.context, args.examples)]
    except ValueError as err:
        parser.error(str(err))
    torch.set_num_threads(args.threads)
    config = load_config(args.config, list(args.overrides))
    game, depth, options = config.game.name, config.reasoning.depth, dict(config.game.options)
    if game not in probes.BOARD_GAMES:
        parser.error(f"the copy curve is for the board games ({', '.join(probes.BOARD_GAMES)})")
    name_legal = config.warm_start.name_legal_moves
    model_dir = args.model or Trainer.initial_model_path(config)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True)
    print(f"{game}, depth {depth}, model {model_dir}, lr {args.lr}, batch {args.batch}, list {name_legal}, one-token"
          f" names {args.one_token}, context {args.context}, context loss {args.context_loss}, soft {args.soft}"
          + (f", curriculum {args.curriculum}" if args.curriculum else ""), flush=True)
    started = time.monotonic()
    drawn = decisions(game, depth, sum(count for _, count in stages), args.train_seed, options, name_legal,
                      args.one_token)
    rng = random.Random(args.train_seed)
    examples, taken = [], 0
    for context, count in stages:  # each stage's examples shuffled within it, the stages in order
        stage = [tokenized(tokenizer, decision, context, args.soft) for decision in drawn[taken:taken + count]]
        rng.shuffle(stage)
        examples.extend(stage)
        taken += count
    seen = {decision.messages[-1]["content"] for decision in drawn}
    held_out = decisions(game, depth, args.states, 0, options, name_legal, args.one_token)  # the probe's own
    known = [decision.messages[-1]["content"] in seen for decision in held_out]
    blind = [len(d.legal) / len(d.names) for d in held_out]
    print(f"{len(examples)} examples in {time.monotonic() - started:.0f} s; {sum(known) / len(known):.2f} of the"
          f" probe's decisions occur among them; ignoring the board gives {sum(blind) / len(blind):.3f}", flush=True)

    def probe(done: int, loss: float) -> None:
        """The board probe's figure (`perception_probes.legal_mass`: the same decisions and cuts with the full
        context), over every held-out decision and over those whose prompt training never showed."""
        model.eval()
        shares = legal_shares(model, tokenizer, held_out, args.context)
        model.train()
        unseen = [share for share, seen_before in zip(shares, known, strict=True) if not seen_before]
        unseen_blind = [b for b, seen_before in zip(blind, known, strict=True) if not seen_before]
        figure = (f"{probes.t_interval(unseen)} (ignoring the board {sum(unseen_blind) / len(unseen_blind):.3f})"
                  if unseen else "none")
        print(f"examples {done:6d}  loss {loss:.3f}  legal mass {probes.t_interval(shares)}  unseen decisions"
              f" {figure}  {time.monotonic() - started:.0f} s", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    probe(0, float("nan"))
    model.train()
    recent: list[float] = []
    for start in range(0, len(examples), args.batch):
        loss = batch_loss(model, tokenizer.pad_token_id, examples[start:start + args.batch], args.context_loss)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        recent = (recent + [loss.item()])[-50:]
        done = min(start + args.batch, len(examples))
        if done // args.every != start // args.every or done == len(examples):
            probe(done, sum(recent) / len(recent))


if __name__ == "__main__":
    main()
