"""The config, composed into the settings each part of a run is built with. The parts never take the whole config.

A part takes its config section itself where one section says all it needs (the opponents: `game.opponents`'
`OpponentConfig` records). The functions here remain where a part needs more than a copy of one section (those of
the game loop and its engines, `rollout_settings`, `target_settings` and `engine_settings`, are in
`strat.play.settings`, below evaluation, which plays through them too):
- `learner_settings`, `agreement_settings`, `warm_start_settings` draw on several sections, derive values (move
  names, Hub model directories) or build records that the benchmarks and tests also build without any config;
- `advantage_config` and the loss in `learner_settings` build `strat/algorithm` records: the method stays pure
  logic, free of the pydantic config;
- `base_model_path` feeds `strat/model/tiny.py`, where the config takes the tiny model's default sizes from (the
  config imports it, so it cannot import the config);
- `lora_settings` turns `learner.lora` into None (full fine-tuning) or the adapter to add."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import games
from strat.algorithm.advantage import AdvantageConfig
from strat.algorithm.losses import LossConfig
from strat.config import TINY_PRETRAIN_LR, TINY_WARM_START_LR, ExperimentConfig
from strat.model import hub
from strat.model.build import LoraSettings
from strat.model.tiny import TinyModelSettings, resolve_model_path
from strat.play.settings import engine_settings
from strat.train.agreement_models import AgreementSettings
from strat.train.learner import LearnerSettings
from strat.train.pretrain import PretrainSettings
from strat.train.warmstart import WarmStartSettings


def learner_settings(config: ExperimentConfig) -> LearnerSettings:
    """The learner's optimizer, loss, device and model options."""
    algo = config.algorithm
    return LearnerSettings(
        lr=algo.lr,
        lr_schedule=algo.lr_schedule,
        lr_final=algo.lr_final,
        total_updates=config.schedule.steps,
        kl_reference=config.algorithm.kl_reference,
        epochs=algo.epochs,
        minibatches=algo.minibatches,
        micro_batch=algo.micro_batch,
        grad_clip=algo.grad_clip,
        temperature=config.reasoning.temperature,
        top_p=config.reasoning.top_p,
        loss=LossConfig(
            clip_eps_low=algo.clip_eps_low,
            clip_eps_high=algo.clip_eps_high,
            loss_agg=algo.loss_agg,
            kl_type=algo.kl_type,
            kl_coef=algo.kl_coef,
            entropy_coef=algo.entropy_coef,
            move_entropy_coef=algo.move_entropy_coef,
            dph_divergence=algo.dph_divergence,
            dph_eta=algo.dph_eta,
            policy_loss=algo.policy_loss,
            fiberpo_delta=algo.fiberpo_delta,
            fiberpo_eps=algo.fiberpo_eps,
            is_cap=algo.is_cap,
        ),
        seed=config.run.seed,
        device=config.learner.device,
        dtype=config.learner.dtype,
        gradient_checkpointing=config.learner.gradient_checkpointing,
        lora=lora_settings(config),
        export_dtype=config.engine.dtype,
        move_names=tuple(games.make(config.game.name, **config.game.options).all_action_names()),
        freeze=tuple(config.learner.freeze),
        share_prefix=config.learner.share_prefix,
        rehearsal_batch=algo.dph_batch,
    )


def lora_settings(config: ExperimentConfig) -> LoraSettings | None:
    """The LoRA adapter to train, or None to train the full model."""
    lora = config.learner.lora
    if not lora.enabled:
        return None
    return LoraSettings(r=lora.r, alpha=lora.alpha, dropout=lora.dropout, target_modules=tuple(lora.target_modules))



def agreement_settings(config: ExperimentConfig) -> AgreementSettings:
    """How the comparator scores agreement; a separate judge's engine is built as the agents' are, on one device
    and without running code shipped with the judge's checkpoint."""
    comparison = config.comparison
    key = "judge_model" if comparison.agreement == "judge" else "embedding_model"
    model = getattr(comparison, key)
    return AgreementSettings(
        method=comparison.agreement,
        judge_engine=comparison.judge_engine,
        model_dir=None if model is None else str(hub.local_dir(model, f"comparison.{key}")),
        backend=config.engine.backend,
        engine=dataclasses.replace(engine_settings(config), tensor_parallel_size=1, trust_remote_code=False),
    )


def base_model_path(config: ExperimentConfig) -> Path:
    """The configured model's directory before any warm start; a `tiny:<game>` model is built with the
    config's `model.tiny` sizes on first use and cached, its tokenizer trained on the text the configured game shows
    (the game's text options, such as Kuhn's `move_names`, included)."""
    settings = TinyModelSettings(**config.model.tiny.model_dump())
    return resolve_model_path(config.model.path, settings=settings, text_options=tiny_text_options(config))


def tiny_text_options(config: ExperimentConfig) -> tuple[tuple[str, int | float | str | bool], ...]:
    """The configured game's text options for its `tiny:<game>` model (none when the model is another game's)."""
    if config.model.path != f"tiny:{config.game.name}":
        return ()
    text = games.text_options(config.game.name)
    return tuple(sorted((key, value) for key, value in config.game.options.items() if key in text))


def pretrain_settings(config: ExperimentConfig) -> PretrainSettings:
    pretrain = config.pretrain
    return PretrainSettings(
        examples=pretrain.examples, epochs=pretrain.epochs,
        lr=TINY_PRETRAIN_LR if pretrain.lr is None else pretrain.lr, batch_size=pretrain.batch_size,
        max_seconds=pretrain.max_seconds, seed=pretrain.seed, kinds=tuple(pretrain.kinds or ()),
        game_options=tuple(sorted(config.game.options.items())),
    )


def warm_start_settings(config: ExperimentConfig) -> WarmStartSettings:
    warm = config.warm_start
    return WarmStartSettings(
        episodes=warm.episodes, epochs=warm.epochs, lr=TINY_WARM_START_LR if warm.lr is None else warm.lr,
        batch_size=warm.batch_size,
        max_seconds=warm.max_seconds, seed=warm.seed, depth=config.reasoning.depth, player=warm.player,
        game_options=tuple(sorted(config.game.options.items())), rules_examples=warm.rules_examples,
        name_legal_moves=warm.name_legal_moves, move_examples=warm.move_examples, context_loss=warm.context_loss,
        move_target=warm.move_target, move_points=warm.move_points,
    )


def advantage_config(config: ExperimentConfig) -> AdvantageConfig:
    """How advantages are computed: the mode, lambda, baseline and credit."""
    algo, weights = config.algorithm, config.comparison.weights
    return AdvantageConfig(
        mode=algo.advantage_mode,
        lam=algo.lam,
        baseline=algo.baseline,
        outcome_scale=algo.outcome_scale,
        ema_decay=algo.ema_decay,
        drop_zero_signal=algo.zero_spread == "drop",
        penalty_scope=algo.penalty_scope,
        credit=algo.credit,
        process_baseline=algo.process_baseline,
        component_weights=(weights.predict, weights.belief, weights.agreement),
    )
