"""A fake LLM for the evaluation tests: it answers every prompt with a well-formed response naming an
action drawn from a scripted policy's distribution, so that the LLM sampling path can be checked
against an exact exploitability."""

from __future__ import annotations

import random
from collections.abc import Callable

import games
from games.base import TextGameEnv
from strat.algorithm.reasoning import render_response, user_prompt
from strat.algorithm.records import Sections
from strat.engines.base import Generation, SamplingParams
from strat.eval.policies import LLMPolicy, PolicyInfo
from strat.play.rollout import RolloutSettings, derive_seed

ActionProbs = Callable[[TextGameEnv, str], dict[int, float]]


def _names_by_prompt(game: str, depth: int, probs: ActionProbs) -> dict[str, dict[str, float]]:
    """Every decision's user prompt -> the scripted distribution over action names there."""
    env = games.make(game)
    stack = [env.pyspiel_state.get_game().new_initial_state()]
    table: dict[str, dict[str, float]] = {}
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack.extend(state.child(action) for action, _ in state.chance_outcomes())
            continue
        env.load_state(state)
        agent = env.agent_selection
        named = {env.action_name(a, agent): p for a, p in probs(env, agent).items()}
        assert table.setdefault(user_prompt(env, agent, depth), named) == named, "a prompt must identify its infoset"
        stack.extend(state.child(action) for action in state.legal_actions())
    return table


class FakeLLM:
    """`encode` numbers each distinct prompt; `generate` writes a response drawn from the scripted policy
    (or garbage with probability `garbage`), seeded per (batch seed, row) like the real engines."""

    def __init__(self, game: str, probs: ActionProbs, depth: int = 2, garbage: float = 0.0) -> None:
        self.depth, self.garbage = depth, garbage
        self.table = _names_by_prompt(game, depth, probs)
        self.prompts: list[str] = []
        self.calls = 0

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        self.prompts.append(messages[-1]["content"])
        return [len(self.prompts) - 1]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.calls += 1
        out = []
        for row, prompt in enumerate(prompts):
            rng = random.Random(derive_seed(params.seed, row))
            names = self.table[self.prompts[prompt[0]]]
            if rng.random() < self.garbage:
                text = "<action>I refuse</action> trailing words"
            else:
                action = rng.choices(list(names), weights=list(names.values()))[0]
                sections = Sections(
                    past="They have acted.\nbelief: Jack",
                    their_view="They will read strength." if self.depth >= 2 else None,
                    plan="Play the mixed strategy.",
                    predict="pass",
                    action=action,
                )
                text = render_response(sections, self.depth)
            out.append(Generation(tuple(prompt), (1, 2), (-0.1, -0.2), text, "stop"))
        return out


def fake_policy(game: str, probs: ActionProbs, garbage: float = 0.0, depth: int = 2) -> tuple[LLMPolicy, FakeLLM]:
    """An LLMPolicy driven by a FakeLLM, playing `game` in the depth-`depth` format."""
    fake = FakeLLM(game, probs, depth, garbage)
    settings = RolloutSettings(game=game, depth=depth, format_penalty=-3.0)
    info = PolicyInfo(name="fake", kind="llm", depth=depth)
    return LLMPolicy(info, settings, fake.encode, fake.generate), fake
