"""RolloutWorker: plays groups of games, batching every pending LLM decision to an AgentActor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ray
from transformers import AutoTokenizer

from strat.algorithm.records import Episode
from strat.engines import Generation, SamplingParams
from strat.engines.base import chat_prompt_ids
from strat.eval.exploitability import ExploitabilityEstimate, estimate_exploitability
from strat.play.exploiter import MoveTable
from strat.play.rollout import GroupPlan, LLMPlayer, RolloutRunner, RolloutSettings, VersusGames, evaluate_vs
from strat.train.fixed_policies import FixedPolicy
from strat.train.token_offsets import TokenOffsets


def _encoder(tokenizer: Any) -> Callable[[list[dict[str, str]]], list[int]]:
    """Chat messages to prompt ids in `tokenizer`'s chat template."""
    return lambda messages: chat_prompt_ids(tokenizer, messages)


def _remote(handle: Any) -> Callable[[list[list[int]], SamplingParams], list[Generation]]:
    """Generation on the agent actor `handle`, waited for."""
    return lambda prompts, params: ray.get(handle.generate.remote(prompts, params))


@ray.remote
class RolloutWorker:
    """Owns the games and scripted opponents; the policy and snapshot live in agent actors."""

    def __init__(self, settings: RolloutSettings, model_path: str, agent: Any, snapshot: Any | None = None,
                 fixed: Sequence[tuple[FixedPolicy, Any]] = ()) -> None:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.settings = settings
        self.runner = RolloutRunner(settings, _encoder(tokenizer), _remote(agent),
                                    _remote(snapshot) if snapshot is not None else None,
                                    spans=TokenOffsets(tokenizer).spans)
        # Each fixed policy prompts in its own tokenizer and chat template, and reads in its own format.
        self._fixed = {policy.name: policy for policy, _ in fixed}
        self._fixed_encoders = {policy.name: _encoder(AutoTokenizer.from_pretrained(policy.model_dir))
                                for policy, _ in fixed}
        self.set_fixed({policy.name: handle for policy, handle in fixed})

    def ready(self) -> bool:
        return True

    def set_agents(self, agent: Any, snapshot: Any | None = None) -> None:
        """Point at restarted agent actors (the driver replaces one that died)."""
        self.runner.policy = _remote(agent)
        self.runner.snapshot = _remote(snapshot) if snapshot is not None else None

    def set_fixed(self, handles: dict[str, Any]) -> None:
        """Point at the fixed policies' agent actors by name (at the start, and after a restart)."""
        for name, handle in handles.items():
            policy = self._fixed[name]
            self.runner.fixed[name] = LLMPlayer(policy.settings, self._fixed_encoders[name], _remote(handle))

    def run(self, plans: list[GroupPlan], sampling_seed: int, exploited: MoveTable | None = None) -> list[Episode]:
        """`plans` played (an exploiter answering `exploited`, the driver's count of the policy's moves)."""
        return self.runner.run(plans, sampling_seed, exploited)

    def play_vs(self, opponent: str, num_games: int, seed: int) -> VersusGames:
        """The policy's game returns, wins and draws against a scripted opponent or a fixed policy (`policy:<name>`),
        seats alternating."""
        return evaluate_vs(self.runner, opponent, num_games, seed)

    def exploitability(self, samples_per_infoset: int, seed: int, bootstrap: int) -> ExploitabilityEstimate:
        """The policy's exploitability, sampled in its reasoning format at every information set."""
        return estimate_exploitability(
            self.settings.game,
            lambda located, n: self.runner.sample_actions(located, n, seed),
            samples_per_infoset,
            seed=seed,
            bootstrap=bootstrap,
            options=dict(self.settings.game_options),
        )
