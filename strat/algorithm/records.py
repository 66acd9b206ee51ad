"""Typed records that move between stages: turns, episodes, scores, training samples and batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Sections:
    """The tagged sections of one response; None means the section is absent."""

    think: str | None = None
    past: str | None = None
    their_view: str | None = None
    plan: str | None = None
    predict: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class ParsedResponse:
    """A parsed response: its sections, the depth it was asked for, and whether the format was followed."""

    depth: int
    sections: Sections
    format_valid: bool


@dataclass(frozen=True)
class Turn:
    """One decision in an episode; scripted players' turns carry no tokens and no parsed response."""

    episode_id: str
    agent: str
    turn_index: int
    """Position of this decision in the episode's sequence of decisions (all agents), from 0."""
    action: int
    action_name: str
    choices: int = 0
    """How many legal actions the player had at this decision; 0 where it was not recorded (older ledgers)."""
    certain: bool = False
    """A scripted player's move that its policy makes with probability 1 at this decision (its rule left it one
    move, as the truthful bidder's "liar" on a bid it cannot top); False for an LLM's turn."""
    valid: bool = True
    """False when the response gave no legal action and the fallback was played."""
    fallback_used: bool = False
    penalty: float | None = None
    """The format penalty this turn earned, None when the action was valid."""
    misstated: bool = False
    """The response restated the player's own private information wrongly."""
    truncated: bool = False
    """The response stopped at the token limit (`reasoning.max_new_tokens`) instead of ending by itself."""
    response: ParsedResponse | None = None
    prompt_text: str = ""
    response_text: str = ""
    prompt_token_ids: tuple[int, ...] = ()
    response_token_ids: tuple[int, ...] = ()
    behaviour_logprobs: tuple[float, ...] = ()
    """Per response token, from the engine's temperature-scaled (processed) distribution."""
    allowed_token_ids: tuple[tuple[int, ...], ...] = ()
    """With a constrained move (`reasoning.constrain_action`): per response token, the ids it was sampled among
    (empty where free); empty when nothing was constrained."""
    info_state: str = ""
    """The acting agent's information state (the game's `info_state_string`, a policy-table key); "" where it was
    not recorded (older ledgers)."""
    section_spans: tuple[tuple[str, int, int], ...] | None = None
    """Where each section of the response lies in `response_token_ids`: (name, first token, end token exclusive),
    the names being the section tags and `belief` (`strat.algorithm.segments`); what credit by segment puts each
    score on. None where unknown: a scripted turn, a rollout without the tokenizer, older ledgers."""


@dataclass(frozen=True)
class BeliefTarget:
    """The posterior over one other agent's private information, as the observer of a turn may hold it."""

    agent: str
    values: tuple[tuple[str, float], ...]
    """(value as the game's `belief_values` names it, posterior probability), summing to 1."""


@dataclass(frozen=True)
class TurnTargets:
    """What an ego turn's reasoning is scored against when the comparison uses estimated targets
    (`comparison.prediction_target: policy`, `comparison.belief_target: posterior`); made by the rollout worker on
    the weights that played (`strat.algorithm.targets`)."""

    turn_index: int
    next_move: tuple[tuple[str, float], ...] | None = None
    """The next other agent's policy at the state where it moved: (action name, probability); ("none", 1) when the
    ego's move ended the game; None when it could not be estimated."""
    beliefs: tuple[BeliefTarget, ...] = ()
    """One posterior per other agent with private information; empty when none could be computed."""


@dataclass(frozen=True)
class Episode:
    """A finished game: every agent's turns in order, the returns and the private information revealed at the end."""

    episode_id: str
    group_id: str
    seed: int
    game: str
    agents: tuple[str, ...]
    ego_agents: tuple[str, ...]
    """The learning seats (both seats in self-play)."""
    turns: tuple[Turn, ...]
    returns: dict[str, float]
    private_info: dict[str, str] = field(default_factory=dict)
    seats: dict[str, str] = field(default_factory=dict)
    """agent -> who played it: `policy`, `snapshot`, or `scripted:<name>`; empty in older ledgers."""
    targets: tuple[TurnTargets, ...] = ()
    """Estimated score targets of the ego turns (empty unless the comparison asks for them)."""

    def targets_of(self, turn_index: int) -> TurnTargets | None:
        """The estimated targets of the turn at `turn_index`, or None."""
        return next((target for target in self.targets if target.turn_index == turn_index), None)

    def turns_of(self, agent: str) -> tuple[Turn, ...]:
        """The turns taken by `agent`, in order."""
        return tuple(turn for turn in self.turns if turn.agent == agent)

    def outcome(self, agent: str) -> float:
        """The return used for learning: the worst format penalty `agent` earned, else its game return."""
        penalties = [turn.penalty for turn in self.turns_of(agent) if turn.penalty is not None]
        return min(penalties) if penalties else self.returns[agent]

    def turn_outcomes(self, agent: str) -> tuple[float, ...]:
        """The return each of `agent`'s turns learns from when the penalty lands on the turn that earned it
        (`algorithm.penalty_scope: turn`): that turn's format penalty, else the game return."""
        return tuple(self.returns[agent] if turn.penalty is None else turn.penalty for turn in self.turns_of(agent))


@dataclass(frozen=True)
class TurnScore:
    """The centralized comparison's scores for one ego turn; a component is None when there was nothing to compare."""

    agent: str
    turn_index: int
    predict: float | None
    belief: float | None
    agreement: float | None
    score: float
    """Weighted mean of the comparable components in [0, 1]; NO_SCORE when none was comparable."""
    comparable: bool
    on_target: int = 0
    """How many of `predict` and `belief` were scored against estimated targets (`TurnTargets`)."""
    sampled_score: float | None = None
    """The score against the sampled move and the true private information, where targets were estimated for this
    turn (to compare old and new targets on the same turns); None otherwise."""
    target_score: float | None = None
    """The score against the estimated targets (the sampled truth for a component without one), where targets were
    estimated for this turn; None otherwise."""
    belief_gap: float | None = None
    """The posterior probability of the most likely value minus the belief's expected score under the posterior
    (0: the belief names the most likely value), mean over the other agents; None without a posterior."""


NO_SCORE = 0.0
"""The score of a turn with nothing to compare; such turns are flagged and left out of process statistics."""


@dataclass(frozen=True)
class ScoredEpisode:
    """An episode with the comparison's scores for its ego turns (empty when the comparison did not run)."""

    episode: Episode
    scores: tuple[TurnScore, ...] = ()

    def score_of(self, turn_index: int) -> TurnScore | None:
        """The score of the turn at `turn_index`, or None when it was not scored."""
        for score in self.scores:
            if score.turn_index == turn_index:
                return score
        return None


@dataclass(frozen=True)
class TrainSample:
    """One ego turn ready for the learner: its tokens, behaviour log-probs and advantage."""

    group_id: str
    episode_id: str
    agent: str
    turn_index: int
    prompt_token_ids: tuple[int, ...]
    response_token_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float
    """The response's advantage (response credit); every token shares it unless `token_advantages` is given."""
    token_advantages: tuple[float, ...] = ()
    """One advantage per response token (credit by segment, `advantage.compute_advantages`); empty: every token
    has `advantage`."""
    allowed_token_ids: tuple[tuple[int, ...], ...] = ()
    """Per response token, the ids a constrained move was sampled among (empty where free, `Turn`); the learner
    scores those tokens under the same mask. Empty: nothing constrained."""


@dataclass(frozen=True)
class TrainBatch:
    """Padded tensors for the learner: prompts left-padded, responses right-padded, per-token tensors over responses.

    For DPH rehearsal batches `behaviour_logprobs` holds the initial policy's stored log-probs.
    """

    prompt_ids: torch.Tensor
    """[B, P] long, left-padded so that every response starts at column P."""
    prompt_mask: torch.Tensor
    """[B, P] bool."""
    response_ids: torch.Tensor
    """[B, R] long, right-padded."""
    response_mask: torch.Tensor
    """[B, R] bool: True on response tokens, the only tokens that get gradient."""
    behaviour_logprobs: torch.Tensor
    """[B, R] float, 0 on padding."""
    advantages: torch.Tensor
    """[B] float, one per turn, every token of the turn's response sharing it; or [B, R] (0 on padding) when any
    sample has per-token advantages (the others' tokens share theirs)."""
    allowed: torch.Tensor | None = None
    """[B, R, K] long: at each response token sampled under a constrained move, the ids it was sampled among (-1
    pads; all -1 where free); None when no sample was constrained."""

    @classmethod
    def collate(cls, samples: Sequence[TrainSample], pad_token_id: int) -> TrainBatch:
        """Pad `samples` into one batch."""
        if not samples:
            raise ValueError("cannot collate an empty list of samples")
        for sample in samples:
            if len(sample.behaviour_logprobs) != len(sample.response_token_ids):
                raise ValueError(
                    f"sample {sample.episode_id}/{sample.turn_index}: {len(sample.behaviour_logprobs)} "
                    f"behaviour log-probs for {len(sample.response_token_ids)} response tokens"
                )
            if sample.allowed_token_ids and len(sample.allowed_token_ids) != len(sample.response_token_ids):
                raise ValueError(
                    f"sample {sample.episode_id}/{sample.turn_index}: {len(sample.allowed_token_ids)} "
                    f"allowed-token sets for {len(sample.response_token_ids)} response tokens"
                )
            if sample.token_advantages and len(sample.token_advantages) != len(sample.response_token_ids):
                raise ValueError(
                    f"sample {sample.episode_id}/{sample.turn_index}: {len(sample.token_advantages)} "
                    f"token advantages for {len(sample.response_token_ids)} response tokens"
                )
        # Imported here for start-up cost: every CLI verb reaches these records through strat.config, and only
        # a training batch needs torch.
        import torch

        batch = len(samples)
        prompt_len = max(len(s.prompt_token_ids) for s in samples)
        response_len = max(len(s.response_token_ids) for s in samples)
        prompt_ids = torch.full((batch, prompt_len), pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((batch, prompt_len), dtype=torch.bool)
        response_ids = torch.full((batch, response_len), pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((batch, response_len), dtype=torch.bool)
        behaviour = torch.zeros((batch, response_len), dtype=torch.float32)
        for row, sample in enumerate(samples):
            p, r = len(sample.prompt_token_ids), len(sample.response_token_ids)
            if p:
                prompt_ids[row, prompt_len - p :] = torch.tensor(sample.prompt_token_ids, dtype=torch.long)
                prompt_mask[row, prompt_len - p :] = True
            if r:
                response_ids[row, :r] = torch.tensor(sample.response_token_ids, dtype=torch.long)
                response_mask[row, :r] = True
                behaviour[row, :r] = torch.tensor(sample.behaviour_logprobs, dtype=torch.float32)
        advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        if any(s.token_advantages for s in samples):
            per_token = torch.zeros((batch, response_len), dtype=torch.float32)
            for row, sample in enumerate(samples):
                r = len(sample.response_token_ids)
                per_token[row, :r] = (torch.tensor(sample.token_advantages, dtype=torch.float32)
                                      if sample.token_advantages else advantages[row])
            advantages = per_token
        allowed = None
        width = max((len(ids) for s in samples for ids in s.allowed_token_ids), default=0)
        if width:
            allowed = torch.full((batch, response_len, width), -1, dtype=torch.long)
            for row, sample in enumerate(samples):
                for column, ids in enumerate(sample.allowed_token_ids):
                    if ids:
                        allowed[row, column, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return cls(prompt_ids, prompt_mask, response_ids, response_mask, behaviour, advantages, allowed)

    @property
    def input_ids(self) -> torch.Tensor:
        """[B, P + R] prompt then response."""
        import torch  # start-up cost, as in `collate`

        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, P + R] bool over real tokens."""
        import torch  # start-up cost, as in `collate`

        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    def to(self, device: torch.device | str) -> TrainBatch:
        """This batch on `device`."""
        moved = (getattr(self, f.name) for f in fields(self))
        return TrainBatch(*(None if value is None else value.to(device) for value in moved))
