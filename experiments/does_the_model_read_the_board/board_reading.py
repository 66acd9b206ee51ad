"""Does a warm-started model read the board? Where its probability goes when it names a cell, at tic-tac-toe
decisions, given the prompt and the templated reasoning up to that point.

    python experiments/does_the_model_read_the_board/board_reading.py
        [--config configs/tic_tac_toe_tiny.yaml] [--model DIR] [--states 30] [key=value ...]

The model is the config's initial policy (its cached warm start, trained on first use), or `--model`. Decisions are
reached by random play from seeded deals (1-5 moves in); at each one a random legal move is templated as the warm
start templates it. Three figures, means over the decisions, each from the model's probabilities of the nine cells
(a cell is two tokens, " c" then "2", so each is the product of its tokens' probabilities, renormalised over the nine):

- **legal mass at the first mention**: after "They will see", where the templated response first names its move (the
  move is chosen there): the share on legal (empty) cells. A model that ignores the board puts the empty cells' share
  of the nine there (about 0.67 at these depths); one that reads it, near 1.
- **legal mass at `<action>`**: the same after the `<action>` tag.
- **planned cell's mass at `<action>`**: the share on the cell the response has already named twice (in
  `<their_view>` and `<plan>`): 1/9 when the model does not copy its own plan, near 1 when it does.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import torch  # noqa: E402

import games  # noqa: E402
from strat.algorithm.reasoning import build_messages  # noqa: E402
from strat.config_loading import load_config  # noqa: E402
from strat.train.trainer import Trainer  # noqa: E402
from strat.train.warmstart import templated_response  # noqa: E402

GAME = "tic_tac_toe"
CELLS = tuple(f"{column}{row}" for row in "123" for column in "abc")
FIRST_MENTION = "They will see"
ACTION_TAG = "<action>"


@dataclass(frozen=True)
class Reading:
    """The three figures of the module docstring, over `states` decisions."""

    states: int
    legal_at_first_mention: float
    legal_at_action: float
    planned_at_action: float


def cell_probabilities(model, tokenizer, context_ids: Sequence[int], space: bool) -> dict[str, float]:  # noqa: ANN001
    """The model's probability of each cell as the next text after `context_ids` (" a1" with a leading space when
    `space`), from the product of its tokens' probabilities, renormalised over the nine cells."""
    continuations = [tokenizer((" " if space else "") + cell, add_special_tokens=False)["input_ids"] for cell in CELLS]
    width = len(context_ids) + max(map(len, continuations))
    rows = [list(context_ids) + tokens for tokens in continuations]
    ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits.float(), dim=-1)
    start = len(context_ids)
    scores = torch.tensor([
        sum(float(logprobs[k, position - 1, row[position]]) for position in range(start, len(row)))
        for k, row in enumerate(rows)
    ])
    return dict(zip(CELLS, torch.softmax(scores, dim=0).tolist(), strict=True))


def read_boards(model, tokenizer, states: int, seed: int = 0, depth: int = 2) -> Reading:  # noqa: ANN001
    """The figures over `states` decisions reached by random play from seeded deals."""
    rng = random.Random(seed)
    first, action, planned = [], [], []
    deal = 0
    while len(action) < states:
        env = games.make(GAME)
        env.reset(seed=seed * 1_000_003 + deal)
        deal += 1
        for _ in range(rng.randint(1, 5)):
            env.step(rng.choice(env.legal_actions(env.agent_selection)))
            if env.pyspiel_state.is_terminal():
                break
        if env.pyspiel_state.is_terminal():
            continue
        agent = env.agent_selection
        legal = {env.action_name(move, agent) for move in env.legal_actions(agent)}
        move = rng.choice(env.legal_actions(agent))
        response = templated_response(env, agent, move, depth, rng)
        prompt = tokenizer.apply_chat_template(build_messages(env, agent, depth), add_generation_prompt=True,
                                               tokenize=False)

        def at(marker: str, space: bool, response: str = response, prompt: str = prompt) -> dict[str, float]:
            prefix = response[: response.index(marker) + len(marker)]
            context = tokenizer(prompt + prefix, add_special_tokens=False)["input_ids"]
            return cell_probabilities(model, tokenizer, context, space)

        if FIRST_MENTION in response:
            first.append(sum(p for cell, p in at(FIRST_MENTION, True).items() if cell in legal))
        at_action = at(ACTION_TAG, False)
        action.append(sum(p for cell, p in at_action.items() if cell in legal))
        planned.append(at_action[env.action_name(move, agent)])
    return Reading(len(action), _mean(first), _mean(action), _mean(planned))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/tic_tac_toe_tiny.yaml")
    parser.add_argument("--model", type=Path, help="a model directory instead of the config's initial policy")
    parser.add_argument("--states", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    config = load_config(args.config, list(args.overrides))
    if config.game.name != GAME:
        parser.error(f"the reading is written for {GAME}, not {config.game.name}")
    model_dir = args.model or Trainer.initial_model_path(config)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).eval()
    reading = read_boards(model, tokenizer, args.states, args.seed, config.reasoning.depth)
    print(f"model {model_dir}; {reading.states} decisions")
    print(f"legal mass at the first mention: {reading.legal_at_first_mention:.3f}")
    print(f"legal mass at <action>:          {reading.legal_at_action:.3f}")
    print(f"planned cell's mass at <action>: {reading.planned_at_action:.3f} (1/9 = 0.111 without copying)")


if __name__ == "__main__":
    main()
