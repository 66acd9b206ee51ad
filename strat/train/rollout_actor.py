"""RolloutWorker: plays groups of games, batching every pending LLM decision to an AgentActor."""

from __future__ import annotations

from typing import Any

import ray
from transformers import AutoTokenizer

from strat.algorithm.records import Episode
from strat.engines import Generation, SamplingParams
from strat.engines.base import chat_prompt_ids
from strat.eval.exploitability import ExploitabilityEstimate, estimate_exploitability
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings, VersusGames, evaluate_vs
from strat.train.token_offsets import TokenOffsets


@ray.remote
class RolloutWorker:
    """Owns the games and scripted opponents; the policy and snapshot live in agent actors."""

    def __init__(self, settings: RolloutSettings, model_path: str, agent: Any, snapshot: Any | None = None) -> None:
        tokenizer = AutoTokenizer.from_pretrained(model_path)

        def encode(messages: list[dict[str, str]]) -> list[int]:
            return chat_prompt_ids(tokenizer, messages)

        def remote(handle: Any):
            def generate(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
                return ray.get(handle.generate.remote(prompts, params))

            return generate

        self.settings = settings
        self._remote = remote
        self.runner = RolloutRunner(settings, encode, remote(agent), remote(snapshot) if snapshot is not None else None,
                                    spans=TokenOffsets(tokenizer).spans)

    def ready(self) -> bool:
        return True

    def set_agents(self, agent: Any, snapshot: Any | None = None) -> None:
        """Point at restarted agent actors (the driver replaces one that died)."""
        self.runner.policy = self._remote(agent)
        self.runner.snapshot = self._remote(snapshot) if snapshot is not None else None

    def run(self, plans: list[GroupPlan], sampling_seed: int) -> list[Episode]:
        return self.runner.run(plans, sampling_seed)

    def play_vs(self, opponent: str, num_games: int, seed: int) -> VersusGames:
        """The policy's game returns, wins and draws against a scripted opponent, seats alternating."""
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
