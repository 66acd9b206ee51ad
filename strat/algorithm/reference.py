"""One Strat-Reasoner training step in plain Python and torch: Kuhn poker, a transformers model in memory, no Ray, no
vLLM. Read it first; the distributed path (`strat.train.trainer.Trainer._train_step`) does the same over about
13 files, and `tests/algorithm/test_reference_step.py` replays that path's step-1 episodes through this file.

The step: `rollout` (self-play with `generate`) -> `compare` (prediction and belief scores, depth 1) -> `advantages`
(hybrid, group-relative, per seat) -> `update` (the clipped surrogate with the k3 KL, token mean, AdamW).

Re-derived here, so that it can disagree with Strat's own functions: the outcome (worst format penalty, else the
game's return), the prediction and belief scores and their weighted mean, the group normalisation and the hybrid
advantage, the log-probs at the sampling temperature, the truncated importance weight, the clipped surrogate, the
KL estimator, the token mean and the gradient clipping. Shared, because re-deriving them would only copy text or
rules: the game (`games`), the prompts, the response parser, the move decision and the misstated-card check
(`strat.algorithm.reasoning`), the belief-value overlap (`games.base.value_overlap`), the `Episode`/`Turn` records
(plain data) and torch's AdamW. Covered: depths 0-2 (agreement by token F1), top_p = 1, one opponent (self-play), full
fine-tuning in float32 (or float64, which its test uses to check the maths); no credit by segment, score targets,
EMA baseline, entropy bonus or LoRA.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass

import torch

import games
from games.base import value_overlap
from strat.algorithm.reasoning import BELIEF_MARKER, build_messages, decide, misstates_private_info, parse_response
from strat.algorithm.records import Episode, Turn


@dataclass(frozen=True)
class Settings:
    """The defaults are configs/kuhn_poker_tiny.yaml's."""

    depth: int = 1
    group_size: int = 8
    max_new_tokens: int = 160
    temperature: float = 1.0
    format_penalty: float = -3.0
    weights: tuple[float, float, float] = (1.0, 1.0, 0.5)  # prediction, belief, agreement
    lam: float = 0.5
    eps: float = 1e-6
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.2
    is_cap: float = 2.0
    grad_clip: float = 1.0


@dataclass(frozen=True)
class Sample:
    """One ego turn to learn from."""

    key: tuple[str, int]  # (episode id, turn index)
    prompt: list[int]
    response: list[int]
    behaviour: list[float]  # the sampler's log-probs of `response`
    advantage: float


def rollout(model, tokenizer, deal_seeds: list[int], s: Settings, seed: int = 0, game: str = "kuhn_poker") -> list[Episode]:
    """`group_size` self-play games per deal seed, one `generate` call per decision."""
    torch.manual_seed(seed)
    stops = model.generation_config.eos_token_id
    stops = set(stops if isinstance(stops, list) else [stops if stops is not None else tokenizer.eos_token_id])
    episodes = []
    for group, deal in enumerate(deal_seeds):
        for member in range(s.group_size):
            env, rng, turns = games.make(game), random.Random(f"{seed}-{deal}-{member}"), []
            env.reset(seed=deal)
            while not env.finished():
                agent = env.agent_selection
                prompt = tokenizer.apply_chat_template(build_messages(env, agent, s.depth), add_generation_prompt=True,
                                                       tokenize=True, return_dict=False)
                out = model.generate(torch.tensor([prompt]), do_sample=True, temperature=s.temperature, top_p=1.0,
                                     top_k=0, max_new_tokens=s.max_new_tokens, output_scores=True,
                                     return_dict_in_generate=True, pad_token_id=tokenizer.eos_token_id)
                response = out.sequences[0, len(prompt):].tolist()
                stop = next((i + 1 for i, t in enumerate(response) if t in stops), len(response))
                response = response[:stop]
                behaviour = [float(torch.log_softmax(out.scores[i][0].float(), -1)[t]) for i, t in enumerate(response)]
                text = tokenizer.decode(response, skip_special_tokens=True)
                parsed = parse_response(text, s.depth)
                decision = decide(parsed, env, agent, rng, s.format_penalty)
                penalty = decision.penalty
                if penalty is None and (not parsed.format_valid or misstates_private_info(text, env.private_info(agent))):
                    penalty = s.format_penalty
                turns.append(Turn(f"g{group}-e{member}", agent, len(turns), decision.action, decision.action_name,
                                  valid=decision.valid, penalty=penalty, response=parsed, response_text=text,
                                  prompt_token_ids=tuple(prompt), response_token_ids=tuple(response),
                                  behaviour_logprobs=tuple(behaviour)))
                env.step(decision.action)
                env.skip_finished()
            agents = tuple(env.possible_agents)
            episodes.append(Episode(f"g{group}-e{member}", f"g{group}", deal, game, agents, agents, tuple(turns),
                                    {a: float(v) for a, v in env.returns().items()},
                                    {a: env.private_info(a) for a in agents}))
    return episodes


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _f1(guess: str, truth: str) -> float:
    shared = sum((Counter(_words(guess)) & Counter(_words(truth))).values())
    return 0.0 if shared == 0 else 2 * shared / (len(_words(guess)) + len(_words(truth)))


def compare(episodes: list[Episode], s: Settings) -> dict[tuple[str, int], float | None]:
    """The central comparison: each ego turn's weighted mean of the scores that apply to it, None where none does.
    Depth >= 1: prediction (does `<predict>` name the opponent's next move, "none" when the game ended) and belief
    (the belief line's overlap with the opponent's card, once the opponent has acted); depth 2: agreement (token F1
    of `<their_view>` with the `<past>` the opponent wrote at its next turn, where it wrote one). One opponent."""
    scores = {}
    for e in episodes:
        extract = games.belief_values(e.game)
        for t in (t for t in e.turns if t.agent in e.ego_agents and t.response is not None):
            parts, sections = [], t.response.sections
            later = [u for u in e.turns if u.turn_index > t.turn_index and u.agent != t.agent]
            if t.response.depth >= 1:
                actual = later[0].action_name if later else "none"
                parts.append((s.weights[0], float(sections.predict is not None
                                                  and _words(sections.predict) == _words(actual))))
                truth = [info for agent, info in e.private_info.items() if agent != t.agent and info]
                acted = any(u.turn_index < t.turn_index and u.agent != t.agent for u in e.turns)
                if extract is not None and truth and acted:
                    past = sections.past or ""
                    at = past.lower().rfind(BELIEF_MARKER)
                    line = past[at + len(BELIEF_MARKER):].split("\n")[0] if at >= 0 else None
                    claim = re.sub(r"player[\s_]*\d+", " ", line, flags=re.IGNORECASE) if line is not None else None
                    belief = value_overlap(extract(claim), extract(truth[0])) if claim is not None else 0.0
                    parts.append((s.weights[1], belief))
            if t.response.depth >= 2 and later and later[0].response is not None and later[0].response.sections.past:
                parts.append((s.weights[2], _f1(sections.their_view or "", later[0].response.sections.past)))
            parts = [(w, v) for w, v in parts if w > 0]
            scores[(e.episode_id, t.turn_index)] = sum(w * v for w, v in parts) / sum(w for w, _ in parts) if parts else None
    return scores


def _normalised(values: list[float], eps: float) -> list[float]:
    if not values or max(values) == min(values):
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + eps) for v in values]


def advantages(episodes: list[Episode], scores: dict[tuple[str, int], float | None], s: Settings) -> list[Sample]:
    """Hybrid group-relative advantages, per (group, seat): the seat's outcome normalised over the group's games, plus
    lam x the turn's score normalised over the group's scored turns of that seat (0 for an unscored turn)."""
    seats: dict[tuple[str, str], list[Episode]] = {}
    for e in episodes:
        for agent in e.ego_agents:
            seats.setdefault((e.group_id, agent), []).append(e)
    samples = []
    for (_, agent), members in seats.items():
        outcomes = []
        for e in members:
            penalties = [t.penalty for t in e.turns if t.agent == agent and t.penalty is not None]
            outcomes.append(min(penalties) if penalties else e.returns[agent])
        outcome = _normalised(outcomes, s.eps)
        turns = [(i, e, t) for i, e in enumerate(members) for t in e.turns if t.agent == agent]
        raw = [scores.get((e.episode_id, t.turn_index)) for _, e, t in turns]
        process = iter(_normalised([v for v in raw if v is not None], s.eps))
        for (i, e, t), value in zip(turns, raw, strict=True):
            advantage = outcome[i] + s.lam * (next(process) if value is not None else 0.0)
            samples.append(Sample((e.episode_id, t.turn_index), list(t.prompt_token_ids),
                                  list(t.response_token_ids), list(t.behaviour_logprobs), advantage))
    return samples


def logprobs(model, sample: Sample, temperature: float) -> torch.Tensor:
    """log pi(response token | prompt, earlier tokens) at the sampling temperature, one sequence, no padding."""
    ids = torch.tensor([sample.prompt + sample.response])
    logits = model(input_ids=ids).logits[0, len(sample.prompt) - 1 : -1]
    logits = (logits if logits.dtype == torch.float64 else logits.float()) / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.response)[:, None])[:, 0]


def update(model, reference, optimizer, samples: list[Sample], s: Settings,
           minibatches: list[list[int]] | None = None) -> list[float]:
    """One optimizer step per minibatch (indices into `samples`; default one on all), each on the mean over its
    response tokens of: the clipped surrogate on pi/pi_old (pi_old = the weights at the update's start), weighted
    by pi_old/behaviour truncated at `is_cap`, plus kl_coef x k3 = ref/pi - 1 - log(ref/pi). Returns the losses."""
    samples = [x for x in samples if x.response]
    with torch.no_grad():
        old = [logprobs(model, x, s.temperature) for x in samples]
        ref = [logprobs(reference, x, s.temperature) for x in samples]
    losses = []
    for part in minibatches or [list(range(len(samples)))]:
        optimizer.zero_grad()
        total, tokens = 0.0, sum(len(samples[i].response) for i in part)
        for i in part:
            new = logprobs(model, samples[i], s.temperature)
            ratio = torch.exp(new - old[i])
            weight = torch.exp(torch.clamp(old[i] - torch.tensor(samples[i].behaviour), max=math.log(s.is_cap)))
            a = samples[i].advantage
            surrogate = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - s.clip_low, 1 + s.clip_high) * a) * weight
            kl = torch.exp(ref[i] - new) - 1 - (ref[i] - new)
            loss = (surrogate + s.kl_coef * kl).sum() / tokens
            loss.backward()
            total += float(loss.detach())
        params = [p for p in model.parameters() if p.grad is not None]
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params))
        with torch.no_grad():
            for p in params:
                p.grad.mul_(min(1.0, s.grad_clip / (norm + 1e-6)))
        optimizer.step()
        losses.append(total)
    return losses


def train_step(model, reference, optimizer, tokenizer, deal_seeds: list[int], s: Settings, seed: int = 0) -> dict:
    """Rollout -> compare -> advantage -> update, with `reference` the KL's frozen anchor."""
    model.eval()
    with torch.no_grad():
        episodes = rollout(model, tokenizer, deal_seeds, s, seed)
    samples = advantages(episodes, compare(episodes, s), s)
    model.train()
    losses = update(model, reference, optimizer, samples, s)
    return {"episodes": episodes, "samples": samples, "losses": losses}
