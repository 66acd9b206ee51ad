"""The benchmark's agent actor: an `AgentActor` that also logs every generate call, so that the
bare engine can replay exactly the calls of a rollout (same prompts, sampling params and seeds)
in the same process. Ray appears here and in the bench driver only."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import ray

from strat.engines import Engine, EngineSettings, Generation, SamplingParams, build_engine


@dataclass(frozen=True)
class CallLog:
    """What an agent served since its log was last cleared."""

    calls: int
    completions: int
    generated_tokens: int
    engine_s: float


@dataclass(frozen=True)
class Replay:
    """The bare engine replaying the logged calls back to back."""

    calls: int
    generated_tokens: int
    engine_s: float
    same_lengths: int
    """Completions whose replayed length equals the logged one."""
    completions: int


@ray.remote
class RecordingAgent:
    """Serves `generate` like `strat.train.agent_actor.AgentActor`, logging each call."""

    def __init__(self, backend: str, model_path: str, settings: EngineSettings) -> None:
        self.engine: Engine = build_engine(backend, model_path, settings)
        self._log: list[tuple[list[list[int]], SamplingParams, list[Generation], float]] = []

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        started = time.perf_counter()
        out = self.engine.generate(prompts, params)
        self._log.append((prompts, params, out, time.perf_counter() - started))
        return out

    def clear(self) -> None:
        """Forget the log and the engine's prefix cache, so that a measurement starts cold."""
        self._log = []
        self.reset_cache()

    def reset_cache(self) -> None:
        llm = getattr(self.engine, "llm", None)
        if llm is not None:
            llm.reset_prefix_cache()

    def summary(self) -> CallLog:
        return CallLog(
            calls=len(self._log),
            completions=sum(len(out) for _, _, out, _ in self._log),
            generated_tokens=sum(len(g.token_ids) for _, _, out, _ in self._log for g in out),
            engine_s=sum(seconds for *_, seconds in self._log),
        )

    def calls(self) -> list[tuple[list[list[int]], SamplingParams, list[Generation]]]:
        """The logged calls and what they returned, in order."""
        return [(prompts, params, out) for prompts, params, out, _ in self._log]

    def replay(self) -> Replay:
        """Run the logged calls again on the bare engine, from a cold prefix cache as the original
        ran; the log is kept."""
        self.reset_cache()
        tokens = same = completions = 0
        seconds = 0.0
        for prompts, params, out, _ in self._log:
            started = time.perf_counter()
            again = self.engine.generate(prompts, params)
            seconds += time.perf_counter() - started
            tokens += sum(len(g.token_ids) for g in again)
            same += sum(len(a.token_ids) == len(b.token_ids) for a, b in zip(again, out, strict=True))
            completions += len(out)
        return Replay(calls=len(self._log), generated_tokens=tokens, engine_s=seconds, same_lengths=same,
                      completions=completions)
