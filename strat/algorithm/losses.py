"""Policy losses over response tokens: surrogates registered by name (`clipped`, `fiberpo`, or one added with
`register_policy_loss`, chosen by `algorithm.policy_loss`), and the terms every surrogate gets on top of it in
`policy_loss`: a KL penalty to a reference (`kl_penalty`, named by the divergence its gradient follows), the entropy
bonuses; and DPH-RL's rehearsal term.

All per-token tensors are [B, T] over response tokens, aligned with a bool `mask` that is True on real
tokens; log-probs are those of the temperature-scaled policy. Masked positions may hold any value, even
inf: they are selected away before any arithmetic, so they get exactly zero gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, get_args

import torch

from strat.algorithm.registry import Registry

LossAgg = Literal["token_mean", "seq_mean"]
KLType = Literal["none", "forward", "reverse"]
"""The KL penalty, by the divergence whose gradient it follows (`kl_penalty`): `forward` KL(ref || pi) (the k3
estimator), `reverse` KL(pi || ref) (k2), or `none`."""
Divergence = Literal["none", "forward_kl", "js"]

LOG_RATIO_CLAMP = 20.0
"""DPH-RL clamps the per-token log-ratio to [-20, 20] before exponentiating."""
DIVERGENCE_CLAMP = 10.0
"""DPH-RL clamps each token's divergence value to [-10, 10]."""


@dataclass(frozen=True)
class LossOutput:
    """A scalar loss and its detached diagnostics; ratio statistics are of the ratio that term uses."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor
    """k3 estimate of KL(current || the term's other policy) over masked tokens."""
    ratio_mean: torch.Tensor
    ratio_min: torch.Tensor
    ratio_max: torch.Tensor
    divergence: torch.Tensor | None = None
    """The KL or DPH divergence value, for terms that have one."""
    entropy: torch.Tensor | None = None
    """Mean per-token entropy of the policy, when it was computed."""
    move_entropy: torch.Tensor | None = None
    """Mean entropy of the choice between moves where a move is named, when the move bonus is on."""


@dataclass(frozen=True)
class LossConfig:
    """The policy-update choices; maps onto `algorithm.*` in the experiment config."""

    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    loss_agg: LossAgg = "token_mean"
    kl_type: KLType = "none"
    """The KL penalty (`kl_penalty`): `forward`, `reverse` or `none`."""
    kl_coef: float = 0.0
    dph_divergence: Divergence = "none"
    dph_eta: float = 0.02
    policy_loss: str = "clipped"
    """The surrogate, by registered name (`register_policy_loss`): `clipped` or `fiberpo`."""
    fiberpo_delta: float = 0.2
    fiberpo_eps: float = 0.2
    is_cap: float = 2.0
    entropy_coef: float = 0.0
    """Weight of an entropy bonus over response tokens: keeps the policy sampling every move while it learns."""
    move_entropy_coef: float = 0.0
    """Weight of an entropy bonus on the choice between moves, at the tokens where a move is named (see
    `strat.algorithm.reasoning.move_mention_indices`; the entropy of the policy renormalised over the moves' first tokens,
    so it never moves mass to tokens that name no move). In the advantage's units: the bonus is aggregated like
    the surrogate, 0 on every other token, so a move token's entropy gradient weighs `move_entropy_coef` against
    the advantage's 1. Keeps every move sampled (so that groups keep seeing the alternatives) without loosening
    the reasoning's format."""

    def __post_init__(self) -> None:
        if self.kl_type not in get_args(KLType):
            raise ValueError(f"kl_type={self.kl_type!r} (allowed: {', '.join(get_args(KLType))}; the k3 estimator is"
                             " `forward`, k2 is `reverse`)")


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """`logits` in float32 at least: bf16 logits are upcast, float64 ones (a float64 check of the maths) kept."""
    return logits if logits.dtype == torch.float64 else logits.float()


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probs [B, T] of `token_ids` under softmax(logits / temperature); `logits` [B, T, V] already predict them."""
    logprobs = torch.log_softmax(_upcast(logits) / temperature, dim=-1)
    return logprobs.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy [B, T] of softmax(logits / temperature) at each position; `logits` [B, T, V]."""
    logprobs = torch.log_softmax(_upcast(logits) / temperature, dim=-1)
    return -(logprobs.exp() * logprobs).sum(dim=-1)


def choice_entropy(logits: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy [B, T] of softmax(logits / temperature) restricted to each position's candidate tokens, renormalised:
    the entropy of the choice between them. `logits` [B, T, V]; `candidates` [B, T, K] token ids, -1 for none
    (a position with no candidate gets 0)."""
    present = candidates >= 0
    chosen = _upcast(logits).gather(-1, candidates.clamp(min=0)) / temperature
    chosen = torch.where(present, chosen, torch.full_like(chosen, float("-inf")))
    logprobs = torch.log_softmax(chosen, dim=-1)
    terms = torch.where(present, logprobs.exp() * logprobs, torch.zeros_like(logprobs))
    values = -terms.sum(dim=-1)
    return torch.where(present.any(dim=-1), values, torch.zeros_like(values))


def aggregate(values: torch.Tensor, mask: torch.Tensor, agg: LossAgg) -> torch.Tensor:
    """Masked mean over all tokens (`token_mean`) or of per-sequence means (`seq_mean`); 0 with no tokens."""
    values = torch.where(mask, values, torch.zeros_like(values))
    counts = mask.sum(dim=-1)
    if agg == "token_mean":
        return values.sum() / counts.sum().clamp(min=1)
    per_sequence = values.sum(dim=-1) / counts.clamp(min=1)
    return per_sequence.sum() / (counts > 0).sum().clamp(min=1)


def masked_log_ratio(logprobs: torch.Tensor, other_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log(pi / other) on real tokens, 0 on masked ones."""
    return torch.where(mask, logprobs - other_logprobs, torch.zeros_like(logprobs))


def truncated_is_weight(
    proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Detached proximal/behaviour weight per token, truncated at `cap`: corrects an older policy's samples, and at
    staleness 0 the engine's numerics against the learner's."""
    log_weight = masked_log_ratio(proximal_logprobs, behaviour_logprobs, mask).detach()
    return torch.exp(log_weight.clamp(max=math.log(cap)))


def _output(
    loss: torch.Tensor,
    clip_fraction: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    divergence: torch.Tensor | None = None,
) -> LossOutput:
    with torch.no_grad():
        if not bool(mask.any()):
            zero, one = log_ratio.new_zeros(()), log_ratio.new_ones(())
            return LossOutput(loss, clip_fraction, zero, one, one, one, divergence)
        ratio = torch.exp(log_ratio)
        # k3 with the roles swapped: E_pi[(1/r - 1) + log r] estimates KL(pi || other) from pi's own samples.
        k3 = torch.exp(-log_ratio) - 1 + log_ratio
        return LossOutput(
            loss,
            clip_fraction,
            approx_kl=aggregate(k3, mask, "token_mean"),
            ratio_mean=aggregate(ratio, mask, "token_mean"),
            ratio_min=ratio[mask].min(),
            ratio_max=ratio[mask].max(),
            divergence=divergence,
        )


def clipped_surrogate(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    agg: LossAgg,
    is_weight: torch.Tensor | None = None,
) -> LossOutput:
    """PPO-style clipped surrogate on current/proximal with asymmetric clip [1 - eps_low, 1 + eps_high].

    `advantages` is [B] (one per turn) or [B, T]; `is_weight` [B, T] multiplies each token (the truncated proximal/behaviour weight).
    """
    advantages = _per_token(advantages, logprobs)
    log_ratio = masked_log_ratio(logprobs, proximal_logprobs, mask)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    if is_weight is not None:
        per_token = per_token * is_weight
    with torch.no_grad():
        was_clipped = ((advantages > 0) & (ratio > 1 + eps_high)) | ((advantages < 0) & (ratio < 1 - eps_low))
        clip_fraction = aggregate(was_clipped.float(), mask, "token_mean")
    return _output(aggregate(per_token, mask, agg), clip_fraction, log_ratio, mask)


def fiberpo_surrogate(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    delta: float,
    eps: float,
    agg: LossAgg,
    is_weight: torch.Tensor | None = None,
) -> LossOutput:
    """FiberPO two-level gate: each row (one turn's response) is a trajectory.

    rho = masked mean log-ratio of the row, rho~ = clip(rho, +-delta); e = l - rho~, e~ = clip(e, +-eps);
    g = exp(rho~ + e~); loss = -agg(A * g).
    """
    advantages = _per_token(advantages, logprobs)
    log_ratio = masked_log_ratio(logprobs, proximal_logprobs, mask)
    rho = log_ratio.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp(min=1)
    rho_gated = torch.clamp(rho, -delta, delta)
    residual = log_ratio - rho_gated
    residual_gated = torch.clamp(residual, -eps, eps)
    gate = torch.exp(rho_gated + residual_gated)
    per_token = -advantages * gate
    if is_weight is not None:
        per_token = per_token * is_weight
    with torch.no_grad():
        gated = (rho.abs() > delta) | (residual.abs() > eps)
        clip_fraction = aggregate(gated.float(), mask, "token_mean")
    return _output(aggregate(per_token, mask, agg), clip_fraction, log_ratio, mask)


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    direction: Literal["forward", "reverse"],
    agg: LossAgg,
) -> LossOutput:
    """A KL penalty to `ref` on pi's own samples, named by the divergence whose gradient it follows in expectation
    over those samples. With l = log(pi / ref) per token:

    - `reverse`, k2 = l^2 / 2: grad k2 = l grad log pi, and E_pi[l grad log pi] = grad KL(pi || ref);
    - `forward`, k3 = ref/pi - 1 - log(ref/pi) = exp(-l) - 1 + l: grad k3 = (1 - ref/pi) grad log pi, and
      E_pi[(1 - ref/pi) grad log pi] = -sum_y ref(y) grad log pi(y) = grad KL(ref || pi), the mass-covering one
      (k3's *value* estimates KL(pi || ref), its gradient does not follow it).

    k1 = l, whose value is the unbiased estimate of KL(pi || ref), is not offered: as a loss its gradient is
    grad log pi, zero in expectation (`tests/algorithm/test_kl_estimators.py` checks all three on an exact
    categorical distribution). `divergence` is k3's value whichever the direction: the estimate of KL(pi || ref)
    logged as `loss/kl`, comparable between runs of either penalty."""
    log_ratio = masked_log_ratio(logprobs, ref_logprobs, mask)
    k3 = torch.exp(-log_ratio) - 1 + log_ratio
    if direction == "forward":
        per_token = k3
    elif direction == "reverse":
        per_token = 0.5 * log_ratio.square()
    else:
        raise ValueError(f"unknown KL penalty {direction!r} (forward or reverse)")
    value = aggregate(per_token, mask, agg)
    divergence = aggregate(k3, mask, agg).detach()
    return _output(value, torch.zeros_like(value.detach()), log_ratio, mask, divergence=divergence)


def dph_generator(log_u: torch.Tensor, divergence: Literal["forward_kl", "js"]) -> torch.Tensor:
    """DPH-RL's f-divergence generator f(u) from log u, for samples y ~ pi_0 and u = pi_theta(y) / pi_0(y)
    (arXiv 2509.07430, the mass-covering generators; `strat.train.rehearsal` explains the choice):

    - forward KL(pi_0 || pi_theta) = E_{pi_0}[u - log u - 1];
    - JS(pi_theta, pi_0) = 1/2 E_{pi_0}[u log u - (u + 1) log((u + 1) / 2)] (the generator is twice JS's).

    log u is clamped to +-LOG_RATIO_CLAMP and f(u) to +-DIVERGENCE_CLAMP."""
    log_u = log_u.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    u = torch.exp(log_u)
    if divergence == "forward_kl":
        value = u - log_u - 1
    else:
        # log((u + 1) / 2) = softplus(log u) - log 2 stays accurate for tiny and huge u.
        value = u * log_u - (u + 1) * (torch.nn.functional.softplus(log_u) - math.log(2.0))
    return value.clamp(-DIVERGENCE_CLAMP, DIVERGENCE_CLAMP)


def dph_rehearsal(
    logprobs: torch.Tensor,
    initial_logprobs: torch.Tensor,
    mask: torch.Tensor,
    divergence: Literal["forward_kl", "js"],
    agg: LossAgg,
) -> LossOutput:
    """Mass-covering divergence to the initial policy on its stored samples, u = pi_theta / pi_0 per token."""
    log_ratio = masked_log_ratio(logprobs, initial_logprobs, mask)
    value = aggregate(dph_generator(log_ratio, divergence), mask, agg)
    return _output(value, torch.zeros_like(value.detach()), log_ratio, mask, divergence=value.detach())


@dataclass(frozen=True)
class SurrogateInputs:
    """What a registered surrogate is given: [B, T] per-token tensors over response tokens and their mask."""

    logprobs: torch.Tensor
    """The current policy's log-probs (with gradient)."""
    proximal_logprobs: torch.Tensor
    """The proximal policy's (the weights at the update's start), the ratio's denominator."""
    advantages: torch.Tensor
    """[B] (one per response) or [B, T] (one per token)."""
    mask: torch.Tensor
    is_weight: torch.Tensor | None = None
    """Detached proximal/behaviour weight per token (`truncated_is_weight`), or None."""


PolicySurrogate = Callable[[LossConfig, SurrogateInputs], LossOutput]
"""(the loss options, the inputs) -> the surrogate's loss and diagnostics, aggregated by `config.loss_agg`."""

SURROGATES: Registry[PolicySurrogate] = Registry("policy loss")
"""The registered surrogates (`algorithm.policy_loss`)."""


def register_policy_loss(name: str) -> Callable[[PolicySurrogate], PolicySurrogate]:
    """Register the decorated function as the policy surrogate `name` (`algorithm.policy_loss`)."""
    return SURROGATES.register(name)


def policy_loss_names() -> list[str]:
    """The registered surrogates' names, sorted."""
    return SURROGATES.names()


def policy_surrogate(name: str) -> PolicySurrogate:
    """The surrogate registered as `name`."""
    return SURROGATES.get(name)


@register_policy_loss("clipped")
def clipped(config: LossConfig, inputs: SurrogateInputs) -> LossOutput:
    """`clipped_surrogate` with the config's asymmetric clip."""
    return clipped_surrogate(inputs.logprobs, inputs.proximal_logprobs, inputs.advantages, inputs.mask,
                             config.clip_eps_low, config.clip_eps_high, config.loss_agg, inputs.is_weight)


@register_policy_loss("fiberpo")
def fiberpo(config: LossConfig, inputs: SurrogateInputs) -> LossOutput:
    """`fiberpo_surrogate` with the config's trajectory- and token-level budgets."""
    return fiberpo_surrogate(inputs.logprobs, inputs.proximal_logprobs, inputs.advantages, inputs.mask,
                             config.fiberpo_delta, config.fiberpo_eps, config.loss_agg, inputs.is_weight)


def policy_loss(
    config: LossConfig,
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    behaviour_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    move_entropy: torch.Tensor | None = None,
    move_mask: torch.Tensor | None = None,
) -> LossOutput:
    """The registered surrogate `config.policy_loss`, plus the terms added to every surrogate here and nowhere
    else (`_regularized`): `kl_coef` x the KL penalty to `ref_logprobs`, minus `entropy_coef` x the mean token
    entropy, minus `move_entropy_coef` x the entropy of the choice between moves (`move_entropy` [B, T], see
    `choice_entropy`) on the tokens where a move is named (`move_mask` [B, T] bool), aggregated like the
    surrogate (0 on every other token); diagnostics are the surrogate's.

    With `behaviour_logprobs` (the engine's, which the learner always passes: an older policy's under staleness,
    the same weights in other numerics at staleness 0) each token is weighted by proximal/behaviour truncated at
    `is_cap`.
    `entropy` [B, T] (see `token_entropy`) is needed when `entropy_coef` > 0, `move_entropy` and `move_mask` when
    `move_entropy_coef` > 0. (DPH-RL's rehearsal term is on another batch: `rehearsal_loss`.)
    """
    is_weight = None
    if behaviour_logprobs is not None:
        is_weight = truncated_is_weight(proximal_logprobs, behaviour_logprobs, mask, config.is_cap)
    inputs = SurrogateInputs(logprobs, proximal_logprobs, advantages, mask, is_weight)
    surrogate = policy_surrogate(config.policy_loss)(config, inputs)
    return _regularized(config, surrogate, logprobs, mask, ref_logprobs, entropy, move_entropy, move_mask)


def _regularized(
    config: LossConfig,
    surrogate: LossOutput,
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    entropy: torch.Tensor | None,
    move_entropy: torch.Tensor | None,
    move_mask: torch.Tensor | None,
) -> LossOutput:
    """The surrogate with the KL penalty and the entropy bonuses added, in that order."""
    out = surrogate
    if config.kl_type != "none":
        if ref_logprobs is None:
            raise ValueError(f"kl_type={config.kl_type!r} needs reference log-probs")
        kl = kl_penalty(logprobs, ref_logprobs, mask, config.kl_type, config.loss_agg)
        out = replace(out, loss=out.loss + config.kl_coef * kl.loss, divergence=kl.divergence)
    loss = out.loss
    if config.entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs the per-token entropy")
    mean_entropy = None
    if entropy is not None:
        mean_entropy = aggregate(entropy, mask, config.loss_agg)
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * mean_entropy
        mean_entropy = mean_entropy.detach()
    mean_move_entropy = None
    if config.move_entropy_coef > 0:
        if move_entropy is None or move_mask is None:
            raise ValueError("move_entropy_coef > 0 needs the moves' choice entropy and the move-token mask")
        on_move = move_mask & mask
        on_move_entropy = torch.where(on_move, move_entropy, torch.zeros_like(move_entropy))
        loss = loss - config.move_entropy_coef * aggregate(on_move_entropy, mask, config.loss_agg)
        mean_move_entropy = on_move_entropy.sum().detach() / on_move.sum().clamp(min=1)
    return replace(out, loss=loss, entropy=mean_entropy, move_entropy=mean_move_entropy)


def rehearsal_loss(
    config: LossConfig, logprobs: torch.Tensor, initial_logprobs: torch.Tensor, mask: torch.Tensor
) -> LossOutput:
    """`dph_eta` x the DPH divergence (`dph_generator`, aggregated like the surrogate) on a batch of stored
    initial-policy samples, `initial_logprobs` being pi_0's log-probs of their tokens."""
    if config.dph_divergence == "none":
        raise ValueError("rehearsal_loss needs dph_divergence forward_kl or js, not 'none'")
    term = dph_rehearsal(logprobs, initial_logprobs, mask, config.dph_divergence, config.loss_agg)
    return replace(term, loss=config.dph_eta * term.loss)


def _per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return advantages.unsqueeze(-1).expand_as(like) if advantages.dim() == 1 else advantages
