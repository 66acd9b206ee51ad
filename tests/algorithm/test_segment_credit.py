"""Credit by segment (`algorithm.credit: segment`): each scored section's tokens get their own process term, the
move's tokens the outcome term alone; the spans come from the response's text and its tokens' offsets."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from strat.algorithm.advantage import AdvantageConfig, compute_advantages
from strat.algorithm.records import ScoredEpisode, TrainBatch, TrainSample, TurnScore
from strat.algorithm.segments import monotone_ends, section_char_spans, section_token_spans, token_spans
from strat.config import OpponentConfig
from strat.config_loading import load_config
from strat.engines.base import Generation, SamplingParams
from strat.errors import ConfigError
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings
from strat.train.rollout_record import Rollout, rollout_from_json, rollout_to_json
from strat.train.settings import advantage_config
from strat.train.token_offsets import TokenOffsets

from .helpers import episode, turn

ROOT = Path(__file__).resolve().parents[2]

# Ten response tokens: 0-1 the rest of <past>, 2 its belief line, 3-4 <their_view>, 5-6 <plan>, 7 <predict>,
# 8 <action>, 9 a closing tag.
SPANS = (("past", 0, 3), ("belief", 2, 3), ("their_view", 3, 5), ("plan", 5, 7), ("predict", 7, 8), ("action", 8, 9))
NO_PREDICT = tuple(span for span in SPANS if span[0] != "predict")
PLAN_ACTION = [5, 6, 8]


def _group(predict_c: float = 0.0) -> list[ScoredEpisode]:
    """Three episodes of one group, one ego turn each: returns 1, 0, -1. Scores (predict, belief, agreement):
    a (1, 1, 1); b (0, None, 0), its response without <predict>; c (`predict_c`, 0, None)."""
    def one(name: str, ret: float, spans: tuple, predict: float, belief: float | None, agreement: float | None):
        ep = episode(name, "g", [dataclasses.replace(turn("player_0", 0), response_token_ids=tuple(range(10)),
                                                     behaviour_logprobs=(-0.1,) * 10, section_spans=spans)],
                     {"player_0": ret, "player_1": -ret})
        return ScoredEpisode(ep, (TurnScore("player_0", 0, predict, belief, agreement, 0.5, True),))

    return [one("a", 1.0, SPANS, 1.0, 1.0, 1.0), one("b", 0.0, NO_PREDICT, 0.0, None, 0.0),
            one("c", -1.0, SPANS, predict_c, 0.0, None)]


def _tokens(samples: list[TrainSample]) -> dict[str, list[float]]:
    return {s.episode_id: list(s.token_advantages) or [s.advantage] * len(s.response_token_ids) for s in samples}


def test_segment_advantages_by_hand() -> None:
    samples, stats = compute_advantages(_group(), AdvantageConfig(lam=0.5, eps=0.0, credit="segment"))
    # Outcome over returns [1, 0, -1]: mean 0, population std sqrt(2/3) -> +-sqrt(1.5), 0.
    # Predict [1, 0, 0]: mean 1/3, std sqrt(2)/3 -> sqrt(2), -1/sqrt(2), -1/sqrt(2).
    # Belief over a and c only, [1, 0] -> +1, -1 (b: 0). Agreement over a and b, [1, 0] -> +1, -1 (c: 0).
    o, p, q = math.sqrt(1.5), math.sqrt(2), 1 / math.sqrt(2)
    a = [o, o, o + 0.5, o + 0.5, o + 0.5, o, o, o + 0.5 * p, o, o]
    # b wrote no <predict>: its prediction's term lands on its unsectioned tokens (0, 1, 7, 9).
    b = [-0.5 * q, -0.5 * q, 0.0, -0.5, -0.5, 0.0, 0.0, -0.5 * q, 0.0, -0.5 * q]
    c = [-o, -o, -o - 0.5, -o, -o, -o, -o, -o - 0.5 * q, -o, -o]
    got = _tokens(samples)
    for name, expected in (("a", a), ("b", b), ("c", c)):
        assert got[name] == pytest.approx(expected, abs=1e-12), name
    # The scalar stays the response's hybrid advantage (combined scores all 0.5: the process term is 0).
    assert [s.advantage for s in samples] == pytest.approx([o, 0.0, -o])
    # Scored sections: tokens 2-4 and 7 of a and c, 2-4 of b: 11 of 30.
    assert stats.segment_tokens_frac == pytest.approx(11 / 30) and stats.unspanned_turns == 0


def test_the_action_tokens_advantage_does_not_move_when_a_prediction_score_changes() -> None:
    config = AdvantageConfig(lam=0.5, credit="segment")
    before = _tokens(compute_advantages(_group(predict_c=0.0), config)[0])
    after = _tokens(compute_advantages(_group(predict_c=1.0), config)[0])
    for name in "abc":
        assert [after[name][i] for i in PLAN_ACTION] == [before[name][i] for i in PLAN_ACTION], name
        assert after[name][2:5] == before[name][2:5], "nor do the belief line's and <their_view>'s"
    assert after["a"][7] != before["a"][7] and after["c"][7] != before["c"][7]


def test_outcome_mode_and_lambda_zero_under_segment_credit_are_response_outcome() -> None:
    response, _ = compute_advantages(_group(), AdvantageConfig(mode="outcome"))
    for config in (AdvantageConfig(mode="outcome", credit="segment"), AdvantageConfig(lam=0.0, credit="segment")):
        samples, _ = compute_advantages(_group(), config)
        assert samples == response
        assert all(s.token_advantages == () for s in samples)


def test_process_mode_under_segment_credit_trains_the_scored_sections_only() -> None:
    samples, _ = compute_advantages(_group(), AdvantageConfig(mode="process", eps=0.0, credit="segment"))
    got = _tokens(samples)
    assert got["a"] == pytest.approx([0, 0, 1, 1, 1, 0, 0, math.sqrt(2), 0, 0])
    assert all(got[name][i] == 0.0 for name in "abc" for i in PLAN_ACTION)


def test_response_credit_is_unchanged_by_spans() -> None:
    group = _group()
    spanless = [ScoredEpisode(dataclasses.replace(s.episode, turns=tuple(
        dataclasses.replace(t, section_spans=None) for t in s.episode.turns)), s.scores) for s in group]
    with_spans, _ = compute_advantages(group, AdvantageConfig())
    without, _ = compute_advantages(spanless, AdvantageConfig())
    assert with_spans == without and all(s.token_advantages == () for s in with_spans)
    assert TrainBatch.collate(with_spans, 0).advantages.shape == (3,)


def test_turns_without_spans_keep_the_response_advantage_under_segment_credit() -> None:
    group = _group()
    first = group[0]
    group[0] = ScoredEpisode(dataclasses.replace(first.episode, turns=(
        dataclasses.replace(first.episode.turns[0], section_spans=None),)), first.scores)
    segment, stats = compute_advantages(group, AdvantageConfig(lam=0.5, credit="segment"))
    response, _ = compute_advantages(group, AdvantageConfig(lam=0.5))
    assert segment[0].token_advantages == () and segment[0].advantage == response[0].advantage
    assert stats.unspanned_turns == 1 and segment[1].token_advantages != ()


def test_collate_takes_per_token_advantages_and_checks_their_length() -> None:
    plain = TrainSample("g", "e", "player_0", 0, (1,), (2, 3, 4), (-0.1,) * 3, 0.5)
    spread = TrainSample("g", "f", "player_0", 1, (1, 2), (5, 6), (-0.1,) * 2, 9.0, token_advantages=(1.0, -1.0))
    batch = TrainBatch.collate([plain, spread], pad_token_id=0)
    assert batch.advantages.tolist() == [[0.5, 0.5, 0.5], [1.0, -1.0, 0.0]]
    bad = dataclasses.replace(spread, token_advantages=(1.0,))
    with pytest.raises(ValueError, match=r"^sample f/1: 1 token advantages for 2 response tokens$"):
        TrainBatch.collate([plain, bad], pad_token_id=0)


def test_char_spans_follow_the_parser() -> None:
    text = "<past>they bet\nbelief: King \n</past>\n<plan> bet </plan><predict>call</predict><action>bet"
    spans = {name: text[a:b] for name, a, b in section_char_spans(text)}
    assert spans == {"past": "they bet\nbelief: King", "belief": "King", "plan": "bet", "predict": "call",
                     "action": "bet"}
    assert [name for name, _, _ in section_char_spans("no tags at all")] == []
    # Only the first occurrence of a section is the parser's, and an empty one has no span.
    assert section_char_spans("<plan>a</plan><plan>b</plan><predict> </predict>") == (("plan", 6, 7),)


def test_token_spans_from_end_offsets() -> None:
    # Tokens "<plan>", "be", "t</plan>", "<action>", "bet", "</action>", end-of-turn (empty).
    text = "<plan>bet</plan><action>bet</action>"
    ends = [6, 8, 16, 24, 27, 36, 36]
    assert token_spans(section_char_spans(text), ends) == (("plan", 1, 3), ("action", 4, 5))
    assert monotone_ends([3, 5, 4, 6]) == [3, 4, 4, 6]


def test_spans_of_a_tiny_bpe_tokenizer_are_exact() -> None:
    from strat.model.tiny import build_tokenizer, corpus

    tokenizer = build_tokenizer(corpus("kuhn_poker"), 512)
    text = ("<past>player 0 bet, which shows strength.\nbelief: King</past>\n<their_view>they see a strong bet"
            "</their_view>\n<plan>bet with the King</plan>\n<predict>call</predict>\n<action>bet</action>")
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    offsets = TokenOffsets(tokenizer)
    ends = offsets(ids, text)
    assert ends == [len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True)) for i in range(len(ids))]
    chars = {name: text[a:b] for name, a, b in section_char_spans(text)}
    for name, start, end in offsets.spans(ids, text):
        decoded = tokenizer.decode(ids[start:end], skip_special_tokens=True)
        assert chars[name] in decoded and len(decoded) - len(chars[name]) <= 2, (name, decoded)
    assert {name for name, _, _ in offsets.spans(ids, text)} == set(chars)


class _LeadingSpaceTokenizer:
    """Words with a leading space, decoded alone without it (as SentencePiece does): pieces do not join."""

    vocab = ("<plan>", "bet", " with", " King", "</plan>", "<action>", "</action>", "<eos>")

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text = "".join(self.vocab[i] for i in ids if not (skip_special_tokens and self.vocab[i] == "<eos>"))
        return text[1:] if len(ids) == 1 and text.startswith(" ") else text


def test_offsets_fall_back_to_decoding_prefixes() -> None:
    tokenizer = _LeadingSpaceTokenizer()
    ids = [0, 1, 2, 3, 4, 5, 1, 6, 7]
    text = tokenizer.decode(ids)
    assert TokenOffsets(tokenizer)(ids, text) == [6, 9, 14, 19, 26, 34, 37, 46, 46]
    assert section_token_spans(text, TokenOffsets(tokenizer)(ids, text)) == (("plan", 1, 4), ("action", 6, 7))


def test_the_rollout_records_spans_and_they_round_trip() -> None:
    def generate(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        text = "<think>x</think><action>bet</action>"
        return [Generation(tuple(p), (5, 6), (-1.0, -1.0), text, "stop") for p in prompts]

    settings = RolloutSettings(game="kuhn_poker", depth=0, group_size=1, opponents=(OpponentConfig(kind="self"),))
    spans_seen = []

    def spans(ids, text):
        spans_seen.append((tuple(ids), text))
        return (("think", 0, 1), ("action", 1, 2))

    runner = RolloutRunner(settings, lambda messages: [1, 2, 3], generate, spans=spans)
    [played] = runner.run([GroupPlan("g0", 0, OpponentConfig(kind="self"), 0)], sampling_seed=0)
    assert spans_seen and all(t.section_spans == (("think", 0, 1), ("action", 1, 2)) for t in played.turns)
    rollout = Rollout(1, [played], 0.5, ())
    assert rollout_from_json(json.loads(json.dumps(rollout_to_json(rollout)))) == rollout
    # A rollout saved before spans were recorded loads with them unknown.
    old = rollout_to_json(rollout)
    for item in old["episodes"][0]["turns"]:
        del item["section_spans"]
    assert all(t.section_spans is None for t in rollout_from_json(old).episodes[0].turns)
    # Without a spans function (evaluation, older runners) they stay unknown.
    [bare] = RolloutRunner(settings, lambda messages: [1, 2, 3], generate).run(
        [GroupPlan("g0", 0, OpponentConfig(kind="self"), 0)], sampling_seed=0)
    assert all(t.section_spans is None for t in bare.turns)


def test_credit_is_read_from_the_config() -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.credit=segment"])
    adv = advantage_config(config)
    assert adv.credit == "segment"
    weights = config.comparison.weights
    assert adv.component_weights == (weights.predict, weights.belief, weights.agreement)
    assert advantage_config(load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml")).credit == "response"
    with pytest.raises(ConfigError, match="credit") as refused:
        load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.credit=token"])
    assert "\n" not in str(refused.value).strip()
    with pytest.raises(ValueError, match=r"^unknown credit 'token' \(allowed: response, segment\)$"):
        AdvantageConfig(credit="token")  # type: ignore[arg-type]


def test_segment_advantages_reach_the_loss_per_token() -> None:
    from strat.algorithm.losses import clipped_surrogate

    samples, _ = compute_advantages(_group(), AdvantageConfig(lam=0.5, credit="segment"))
    batch = TrainBatch.collate(samples, pad_token_id=0)
    assert batch.advantages.shape == (3, 10)
    logprobs = torch.zeros((3, 10), requires_grad=True)
    loss = clipped_surrogate(logprobs, logprobs.detach(), batch.advantages, batch.response_mask, 0.2, 0.28,
                             "token_mean").loss
    loss.backward()
    # token_mean: each token's gradient is minus its own advantage over the 30 tokens.
    assert torch.allclose(logprobs.grad, -batch.advantages / 30)
