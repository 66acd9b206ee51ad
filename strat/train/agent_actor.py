"""AgentActor: one inference engine; batched generation with log-probs, weight updates."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

import ray
import torch

from strat.engines import Engine, EngineSettings, Generation, SamplingParams, build_engine
from strat.sync.fingerprint import WeightsTag
from strat.sync.process_group import TensorMeta
from strat.train.agreement_models import chat_completions


@ray.remote
class AgentActor:
    """Serves generation requests from rollout workers and takes weights from the learner."""

    def __init__(self, backend: str, model_path: str, settings: EngineSettings) -> None:
        self.engine: Engine = build_engine(backend, model_path, settings)
        self.max_model_len = settings.max_model_len
        self.version = 0
        self._fingerprint: str | None = None
        """The fingerprint of the weights held now, once asked for (cleared by every load)."""

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.engine.generate(prompts, params)

    def complete_chat(self, conversations: list[list[dict[str, str]]], params: SamplingParams) -> list[str]:
        """The completion text of each chat conversation (the comparator's judge when the policy judges)."""
        return chat_completions(self.engine, conversations, params, self.max_model_len)

    def load_state_dict(self, state: Mapping[str, torch.Tensor], version: int) -> int:
        self.engine.load_state_dict(state)
        self.version = version
        self._fingerprint = None
        return version

    def load_weights_dir(self, path: str, version: int) -> int:
        """Reload the weights from a directory of safetensors, which must be readable on this agent's node."""
        if not Path(path).is_dir():
            raise FileNotFoundError(
                f"weights directory {path} is not visible on agent node {socket.gethostname()}: engine.sync_dir"
                " (and the run directory) must be on storage that every agent's node can read at the same path"
            )
        self.engine.load_weights_dir(path)
        self.version = version
        self._fingerprint = None
        return version

    def weight_group_ranks(self) -> int:
        """How many ranks this agent takes in a weight group: one per worker of its engine."""
        return self.engine.weight_group_ranks

    def join_weight_group(self, address: str, first_rank: int, world_size: int, backend: str) -> None:
        """Join the learner's weight group (every member at once; see strat.sync.weights.WeightBroadcast)."""
        self.engine.join_weight_group(address, first_rank, world_size, backend)

    def receive_weights(self, metadata: list[TensorMeta], version: int) -> int:
        """Take the weights the learner broadcasts in the weight group now."""
        self.engine.receive_weights(metadata)
        self.version = version
        self._fingerprint = None
        return version

    def weights(self) -> WeightsTag:
        """Which weights this agent holds: their version and fingerprint (computed once per load)."""
        if self._fingerprint is None:
            self._fingerprint = self.engine.weights_fingerprint()
        return WeightsTag(self.version, self._fingerprint)

    def close(self) -> None:
        """Free the engine now (a multi-process engine stops its processes) rather than when the actor dies."""
        self.engine.close()
