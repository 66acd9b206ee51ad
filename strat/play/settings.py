"""The config, composed into the settings the game loop and its engines are built with (the rest of a run's parts:
`strat.train.settings`). The parts never take the whole config: a part takes its config section itself where one
section says all it needs (the opponents: `game.opponents`' `OpponentConfig` records), and the functions here draw
on several sections (e.g. the rollout's game, reasoning and penalty rules) or build records that the benchmarks and
tests also build without any config."""

from __future__ import annotations

from strat.algorithm.targets import TargetSettings
from strat.config import ExperimentConfig
from strat.engines import EngineSettings
from strat.play.exploiter import EXPLOITER, Exploiter
from strat.play.rollout import RolloutSettings


def rollout_settings(config: ExperimentConfig) -> RolloutSettings:
    """How the rollout plays: the game, the reasoning depth and sampling, the group size and the opponents."""
    return RolloutSettings(
        game=config.game.name,
        game_options=dict(config.game.options),
        depth=config.reasoning.depth,
        format_penalty=config.algorithm.format_penalty,
        penalize_malformed=config.algorithm.penalize_malformed,
        penalize_misstated=config.algorithm.penalize_misstated,
        group_size=config.algorithm.group_size,
        max_tokens=config.reasoning.max_new_tokens,
        temperature=config.reasoning.temperature,
        top_p=config.reasoning.top_p,
        opponents=tuple(config.game.opponents),
        seeded=config.run.deterministic_rollouts,
        targets=target_settings(config),
        constrain_action=config.reasoning.constrain_action,
        ego_seat=None if config.game.seats is None else config.game.seats.index("policy"),
    )


def target_settings(config: ExperimentConfig) -> TargetSettings:
    """Which score targets the rollout estimates (`comparison.*_target`, `policy_*`, `diagnose_targets`)."""
    comparison = config.comparison
    return TargetSettings(prediction=comparison.prediction_target, belief=comparison.belief_target,
                          min_visits=comparison.policy_min_visits, samples=comparison.policy_samples,
                          diagnose=comparison.diagnose_targets)


def engine_settings(config: ExperimentConfig) -> EngineSettings:
    """How every agent actor's engine is built."""
    return EngineSettings(
        dtype=config.engine.dtype,
        max_model_len=config.engine.max_model_len,
        kv_cache_bytes=config.engine.kv_cache_bytes,
        max_num_seqs=config.engine.max_num_seqs,
        tensor_parallel_size=config.engine.tensor_parallel_size,
        gpu_memory_utilization=config.engine.gpu_memory_utilization,
        seed=config.run.seed,
        trust_remote_code=config.model.trust_remote_code,
        multiprocess=config.engine.multiprocess,
        constrain_action=config.reasoning.constrain_action,
        device=config.engine.device,
    )


def new_exploiter(config: ExperimentConfig) -> Exploiter | None:
    """The exploiter's empty count of the policy's moves, where `game.opponents` has an exploiter."""
    found = [opponent for opponent in config.game.opponents if opponent.kind == EXPLOITER]
    return Exploiter(config.game.name, dict(config.game.options), found[0].exploiter_keep) if found else None
