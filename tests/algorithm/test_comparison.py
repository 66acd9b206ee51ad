"""CoT comparison scorers on hand-made texts and episodes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import games
from games.bargaining import item_values
from games.cards import card_values
from games.liars_dice import dice_values
from strat.algorithm.comparison import (
    AgreementPair,
    ComparisonWeights,
    agreement_scorer,
    belief_accuracy,
    combine,
    cosine_agreement,
    embedding_scorer,
    judge_messages,
    judge_scorer,
    parse_judge_score,
    prediction_accuracy,
    score_episodes,
    token_f1,
)
from strat.algorithm.records import NO_SCORE, Episode, Sections
from strat.config import OpponentConfig
from strat.engines.base import Generation, SamplingParams
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings

from .helpers import episode, kuhn_self_play, turn


def test_prediction_accuracy() -> None:
    assert prediction_accuracy("Bet.", "bet") == 1.0
    assert prediction_accuracy(" none ", "none") == 1.0
    assert prediction_accuracy("pass", "bet") == 0.0
    assert prediction_accuracy(None, "bet") == 0.0


def test_belief_accuracy_cards() -> None:
    truth = {"player_1": "King"}
    assert belief_accuracy("They bet.\nbelief: King", truth, card_values) == 1.0
    assert belief_accuracy("They bet.\nBELIEF:  the kings", truth, card_values) == 1.0
    assert belief_accuracy("belief: Queen", truth, card_values) == 0.0
    assert belief_accuracy("belief: King or Queen", truth, card_values) == 0.5
    assert belief_accuracy("belief: Jack\nthen more\nbelief: King", truth, card_values) == 1.0
    # Without the marker a card named in passing is not a claim.
    assert belief_accuracy("I hold the King.", truth, card_values) == 0.0
    assert belief_accuracy(None, truth, card_values) == 0.0
    assert belief_accuracy("belief: player_1 King", truth, card_values) == 1.0


def test_belief_accuracy_several_opponents() -> None:
    truths = {"player_1": "King", "player_2": "Ace"}
    assert belief_accuracy("belief: player 1 King; player_2 Jack", truths, card_values) == 0.5
    assert belief_accuracy("belief: Player 2 ace; player 1 king", truths, card_values) == 1.0
    assert belief_accuracy("belief: King", truths, card_values) == 0.0


def test_belief_accuracy_dice_ignores_player_numbers() -> None:
    truth = {"player_1": "2 5"}
    assert dice_values("2 5") == ("2", "5")
    assert belief_accuracy("belief: player 1 has 5 and 2", truth, dice_values) == 1.0
    assert belief_accuracy("belief: 2 2", truth, dice_values) == 0.5
    assert belief_accuracy("belief: 2 5 6", truth, dice_values) == pytest.approx(2 / 3)


def test_token_f1_by_hand() -> None:
    assert token_f1("a b c", "A, b d") == pytest.approx(2 / 3)
    assert token_f1("a a b", "a b b") == pytest.approx(2 / 3)
    assert token_f1("", "a") == 0.0
    assert token_f1("x", "y") == 0.0


def test_cosine_agreement() -> None:
    assert cosine_agreement([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    assert cosine_agreement([1.0, 1.0], [1.0, 0.0]) == pytest.approx(2**-0.5)
    assert cosine_agreement([1.0, 0.0], [-1.0, 0.0]) == 0.0
    assert cosine_agreement([0.0, 0.0], [1.0, 0.0]) == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Score: 7", 0.7),
        ("**Score:** 10", 1.0),
        ("score of 3.5 because", 0.35),
        ("I'd give it 8/10.", 0.8),
        ("Score: 6/10, close", 0.6),
        (" 4\n", 0.4),
        ("Score: 11", None),
        ("12/10", None),
        ("they agree", None),
        ("", None),
    ],
)
def test_parse_judge_score(text: str, expected: float | None) -> None:
    assert parse_judge_score(text) == (pytest.approx(expected) if expected is not None else None)


def test_parse_judge_score_never_raises() -> None:
    rng = random.Random(1)
    pieces = ["Score", ":", " ", "7", "/10", "10", ".", "5", "999", "score of", "x", "\n", "-", "*"]
    for _ in range(2000):
        value = parse_judge_score("".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))))
        assert value is None or 0.0 <= value <= 1.0


def test_judge_scorer_batches_and_parses() -> None:
    pairs = [
        AgreementPair("e", 0, "kuhn_poker", "they will fold", "player 0 is strong"),
        AgreementPair("e", 2, "kuhn_poker", "", "anything"),
        AgreementPair("e", 4, "kuhn_poker", "they will call", "weak"),
    ]
    prompts: list = []

    def generate(batch: list) -> list[str]:
        prompts.extend(batch)
        return ["Score: 5", "no idea"]

    assert judge_scorer(generate)(pairs) == [0.5, 0.0, None]
    # The empty expectation is scored 0 without asking the judge.
    assert len(prompts) == 2
    assert "they will fold" in prompts[0][1]["content"] and "player 0 is strong" in prompts[0][1]["content"]
    assert [m["role"] for m in judge_messages(pairs[0])] == ["system", "user"]
    with pytest.raises(ValueError, match="completions"):
        judge_scorer(lambda batch: [])(pairs)


def test_agreement_scorer_choice() -> None:
    pair = [AgreementPair("e", 0, "g", "a b", "a b")]
    assert agreement_scorer("token_f1")(pair) == [1.0]
    embed = lambda texts: [[1.0, float(len(text))] for text in texts]
    assert agreement_scorer("embedding", embed=embed)(pair) == [pytest.approx(1.0)]
    with pytest.raises(ValueError, match="embed"):
        agreement_scorer("embedding")
    with pytest.raises(ValueError, match="generate"):
        agreement_scorer("judge")


def test_embedding_scorer_embeds_all_texts_in_one_call() -> None:
    pairs = [
        AgreementPair("e", 0, "g", "ab", "abcd"),
        AgreementPair("e", 2, "g", "", "anything"),
        AgreementPair("e", 4, "g", "abc", "abc"),
    ]
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [[1.0, float(len(text))] for text in texts]

    # (1, 2)·(1, 4) / (sqrt 5 sqrt 17) = 9 / sqrt 85; identical texts 1; the empty expectation 0 unasked.
    assert embedding_scorer(embed)(pairs) == [pytest.approx(9 / 85**0.5), 0.0, pytest.approx(1.0)]
    assert calls == [["ab", "abcd", "abc", "abc"]]
    with pytest.raises(ValueError, match="vectors"):
        embedding_scorer(lambda texts: [])(pairs)


def test_judge_verdict_score_7_is_0_7_in_the_turn_score() -> None:
    judge = judge_scorer(lambda batch: ["Score: 7"] * len(batch))
    [scored] = score_episodes([kuhn_self_play()], ComparisonWeights(), judge)
    first = scored.scores[0]
    # Turn 0: predict 0 (pass predicted, the opponent bet), no belief yet, agreement 7/10: (0 + 0.7) / 2.
    assert (first.predict, first.belief, first.agreement) == (0.0, None, pytest.approx(0.7))
    assert first.score == pytest.approx(0.35) and first.comparable


def test_unreadable_verdict_leaves_agreement_out() -> None:
    nonsense = judge_scorer(lambda batch: ["\x19exldues strategically"] * len(batch))
    [scored] = score_episodes([kuhn_self_play()], ComparisonWeights(), nonsense)
    first = scored.scores[0]
    # Only the prediction (0) is left to combine.
    assert (first.agreement, first.score, first.comparable) == (None, 0.0, True)
    [only_agreement] = score_episodes([kuhn_self_play()], ComparisonWeights(predict=0.0, belief=0.0), nonsense)
    assert [(s.comparable, s.score) for s in only_agreement.scores] == [(False, NO_SCORE), (False, NO_SCORE)]


def test_combine_and_weights() -> None:
    weights = ComparisonWeights(predict=1.0, belief=2.0, agreement=1.0)
    assert combine(1.0, 0.5, None, weights) == (pytest.approx(2 / 3), True)
    assert combine(None, None, None, weights) == (NO_SCORE, False)
    assert combine(1.0, None, None, ComparisonWeights(predict=0.0)) == (NO_SCORE, False)
    with pytest.raises(ValueError, match="weights"):
        ComparisonWeights(predict=0.0, belief=0.0, agreement=0.0)
    with pytest.raises(ValueError, match="weights"):
        ComparisonWeights(predict=-1.0)


def test_score_episode_by_hand() -> None:
    [scored] = score_episodes([kuhn_self_play()], ComparisonWeights())
    first, second = scored.scores
    # Turn 0: predicted pass, the opponent bet; no earlier opponent move, so no belief score;
    # token F1 of {a, bet, shows, strength} vs {player, 0, bet, shows, strength, belief, king}: P 3/4, R 3/7.
    assert (first.predict, first.belief) == (0.0, None)
    assert first.agreement == pytest.approx(6 / 11)
    assert first.score == pytest.approx(3 / 11) and first.comparable
    # Turn 1: its call ends the game ("none" is right), it names player 0's King; nobody reads its move.
    assert (second.predict, second.belief, second.agreement) == (1.0, 1.0, None)
    assert second.score == 1.0 and second.comparable
    [only_agreement] = score_episodes([kuhn_self_play()], ComparisonWeights(predict=0.0, belief=0.0))
    assert only_agreement.scores[0].score == pytest.approx(6 / 11)
    assert not only_agreement.scores[1].comparable and only_agreement.scores[1].score == NO_SCORE


def test_depth_decides_the_components() -> None:
    [depth1] = score_episodes([kuhn_self_play(depth=1)], ComparisonWeights())
    assert [s.agreement for s in depth1.scores] == [None, None]
    baseline = episode(
        "d0",
        "g",
        [turn("player_0", 0, "bet", Sections(think="hm", action="bet"), 0), turn("player_1", 1)],
        {"player_0": 1.0, "player_1": -1.0},
        private_info={"player_0": "King", "player_1": "Queen"},
    )
    [scored] = score_episodes([baseline], ComparisonWeights())
    assert [(s.turn_index, s.comparable, s.score) for s in scored.scores] == [(0, False, NO_SCORE)]


def test_scripted_opponent_and_missing_sections() -> None:
    ego = Sections(past="belief: King")  # depth 2 asked, most sections missing
    ep = episode(
        "s",
        "g",
        [turn("player_0", 0, "bet", ego, 2), turn("player_1", 1, "pass")],
        {"player_0": 1.0, "player_1": -1.0},
        private_info={"player_0": "Queen", "player_1": "King"},
    )
    [scored] = score_episodes([ep], ComparisonWeights())
    # A missing <predict> scores 0; a scripted opponent wrote no <past>, so agreement is not compared.
    assert [(s.predict, s.belief, s.agreement, s.comparable) for s in scored.scores] == [(0.0, None, None, True)]


def test_unscored_games_have_no_belief() -> None:
    ep = kuhn_self_play()
    ttt = episode("t", "g", list(ep.turns), ep.returns, ego=ep.ego_agents, game="tic_tac_toe", private_info={})
    [scored] = score_episodes([ttt], ComparisonWeights())
    assert [s.belief for s in scored.scores] == [None, None]


def test_dice_and_item_extractors() -> None:
    assert dice_values("belief: a six, then 2 fives") == ("6", "2", "5")
    assert belief_accuracy("belief: they hold a six", {"player_1": "6"}, dice_values) == 1.0
    assert item_values("book 6 hat 1 ball 1") == ("book=6", "hat=1", "ball=1")
    assert belief_accuracy(
        "belief: a book 6, a hat 2, a ball 1", {"player_1": "book 6 hat 1 ball 1"}, item_values
    ) == pytest.approx(2 / 3)


def _liars_dice_highest_bid() -> Episode:
    """Player 0 makes Liar's dice's highest bid and predicts "liar"; player 1, left one legal move, calls it and
    predicts "none". The number of choices comes from the game itself."""
    env = games.make("liars_dice")
    env.reset(seed=0)
    first_choices = len(env.legal_actions())
    highest = env.action_from_name("bid 2 sixes")
    assert highest is not None
    env.step(highest)
    assert env.legal_action_names() == ["liar"]
    bid = Sections(past="No moves yet.", their_view="they must call", plan="bid high", predict="liar",
                   action="bid 2 sixes")
    call = Sections(past="they bid 2 sixes\nbelief: 6", their_view="none", plan="call", predict="none", action="liar")
    turns = [
        replace(turn("player_0", 0, sections=bid), action_name="bid 2 sixes", choices=first_choices),
        replace(turn("player_1", 1, sections=call), action_name="liar", choices=1),
    ]
    return episode("d", "g", turns, {"player_0": -1.0, "player_1": 1.0}, ego=("player_0", "player_1"),
                   game="liars_dice", private_info={"player_0": "3", "player_1": "6"})


def test_forced_predictions_are_scored_unless_skipped() -> None:
    ep = _liars_dice_highest_bid()
    assert ep.turns[0].choices > 1
    [kept] = score_episodes([ep], ComparisonWeights(agreement=0.0))
    assert [s.predict for s in kept.scores] == [1.0, 1.0]
    [skipped] = score_episodes([ep], ComparisonWeights(), skip_forced=True)
    # The bid left one legal reply and the call ended the game: neither prediction needed a model of the opponent,
    # and neither turn gets a process score, though player 0's agreement and player 1's belief (a 6: wrong) are
    # still reported.
    assert [s.predict for s in skipped.scores] == [None, None]
    assert [s.comparable for s in skipped.scores] == [False, False]
    assert [s.score for s in skipped.scores] == [NO_SCORE, NO_SCORE]
    assert skipped.scores[0].agreement is not None and skipped.scores[1].belief == 0.0


def test_a_scripted_players_certain_reply_is_skipped_like_a_forced_one() -> None:
    """Against the truthful bidder, "bid 2 fours" (which it cannot top with one die) is always answered "liar",
    though the rules leave it eleven other moves: with `skip_forced` that prediction is not scored either."""
    bid = Sections(past="No moves yet.", their_view="they will call", plan="bid two", predict="liar",
                   action="bid 2 fours")
    ego = replace(turn("player_0", 0, sections=bid), action_name="bid 2 fours", choices=12)
    reply = replace(turn("player_1", 1), action_name="liar", choices=3, response=None)
    for certain, skipped in ((False, False), (True, True)):
        ep = episode("d", "g", [ego, replace(reply, certain=certain)], {"player_0": -1.0, "player_1": 1.0},
                     ego=("player_0",), game="liars_dice", private_info={"player_0": "4", "player_1": "2"})
        [plain] = score_episodes([ep], ComparisonWeights())
        [scored] = score_episodes([ep], ComparisonWeights(), skip_forced=True)
        assert plain.scores[0].predict == 1.0  # without skip_forced every prediction is scored
        assert (scored.scores[0].predict is None) is skipped and scored.scores[0].comparable is not skipped


def test_rollouts_mark_a_scripted_players_certain_moves() -> None:
    """The truthful bidder's rule gives one move at every decision; the random player's never does (two or more
    legal moves), so only the first is marked certain."""
    def generate(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return [Generation(tuple(p), (5,), (-1.0,), "<action>liar</action>", "stop") for p in prompts]

    for name, expected in (("truthful", True), ("random", False)):
        opponent = OpponentConfig(kind="scripted", name=name)
        settings = RolloutSettings(game="liars_dice", depth=0, group_size=2, max_tokens=8, opponents=(opponent,))
        runner = RolloutRunner(settings, lambda messages: [1, 2, 3], generate)
        plans = [GroupPlan(group_id=f"g{i}", seed=i, opponent=opponent, ego_seat=1) for i in range(4)]
        scripted = [t for ep in runner.run(plans, sampling_seed=0) for t in ep.turns if t.response is None]
        assert scripted and all(t.certain is (expected or t.choices == 1) for t in scripted), name


def test_a_prediction_of_a_real_choice_is_scored_when_forced_ones_are_skipped() -> None:
    ep = kuhn_self_play()
    ep = replace(ep, turns=tuple(replace(t, choices=2) for t in ep.turns))
    [plain] = score_episodes([ep], ComparisonWeights())
    [skipped] = score_episodes([ep], ComparisonWeights(), skip_forced=True)
    # Player 0's prediction is about player 1's choice of two moves: scored either way; player 1's "none" is not.
    assert skipped.scores[0] == plain.scores[0] and plain.scores[0].predict is not None
    assert plain.scores[1].comparable and not skipped.scores[1].comparable and skipped.scores[1].predict is None
    # A ledger written before `choices` was recorded (0) reads as a choice, as it was scored then.
    old = replace(ep, turns=tuple(replace(t, choices=0) for t in ep.turns))
    [old_scored] = score_episodes([old], ComparisonWeights(), skip_forced=True)
    assert old_scored.scores[0].predict == plain.scores[0].predict
