"""Prompts, the tolerant parser (round trips, edge cases, random strings), decisions and the format penalty."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import games
from strat.algorithm.reasoning import (
    DEPTH_SECTIONS,
    build_messages,
    corpus_texts,
    decide,
    format_prompt,
    move_mention_indices,
    parse_response,
    render_response,
    validate_format_penalty,
)
from strat.algorithm.records import ParsedResponse, Sections

GAMES = games.names()


def _sections(depth: int, action: str, text: str = "some words") -> Sections:
    values = {name: f"{name}: {text}" for name in DEPTH_SECTIONS[depth]}
    values["action"] = action
    if "predict" in values:
        values["predict"] = "none"
    return Sections(**values)


def _fresh(name: str) -> games.TextGameEnv:
    env = games.make(name)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("depth", sorted(DEPTH_SECTIONS))
@pytest.mark.parametrize("name", GAMES)
def test_render_parse_round_trip_for_each_game(name: str, depth: int) -> None:
    env = _fresh(name)
    agent = env.agent_selection
    for legal in env.legal_action_names(agent):
        sections = _sections(depth, legal, text=f"I reason about {name}.\nbelief: something")
        parsed = parse_response(render_response(sections, depth), depth)
        assert parsed == ParsedResponse(depth, sections, format_valid=True)
        decision = decide(parsed, env, agent, random.Random(0), format_penalty=-10.0)
        assert (decision.action_name, decision.valid, decision.fallback_used, decision.penalty) == (
            legal,
            True,
            False,
            None,
        )


_CONTENT = st.text(st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=40).map(str.strip)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(DEPTH_SECTIONS)), st.lists(_CONTENT, min_size=5, max_size=5))
def test_round_trip_any_content(depth: int, texts: list[str]) -> None:
    sections = Sections(**dict(zip(DEPTH_SECTIONS[depth], texts, strict=False)))
    assert parse_response(render_response(sections, depth), depth) == ParsedResponse(depth, sections, True)


@pytest.mark.parametrize(
    ("text", "depth", "expected", "valid"),
    [
        ("<think>hm</think>\n<action>bet</action>", 0, Sections(think="hm", action="bet"), True),
        ("  < THINK >hm</Think>  <ACTION> bet </action >\n", 0, Sections(think="hm", action="bet"), True),
        ("<think>hm</think>", 0, Sections(think="hm"), False),
        ("<action>bet</action><think>hm</think>", 0, Sections(think="hm", action="bet"), False),
        ("<think>a</think><think>b</think><action>x</action>", 0, Sections(think="a", action="x"), False),
        ("<think>a</think><action>x</action><action>y</action>", 0, Sections(think="a", action="x"), False),
        ("<think>a</think><action>x</action> and more", 0, Sections(think="a", action="x"), False),
        ("Sure! <think>a</think><action>x</action>", 0, Sections(think="a", action="x"), False),
        ("<think>a</think><action>be", 0, Sections(think="a", action="be"), False),
        ("<think>a<action>x</action>", 0, Sections(think="a", action="x"), False),
        ("<think>a</action><action>x</action>", 0, Sections(think="a", action="x"), False),
        ("</think><think>a</think><action>x</action>", 0, Sections(think="a", action="x"), False),
        ("<think></think><action></action>", 0, Sections(think="", action=""), True),
        ("bet", 0, Sections(), False),
        ("", 1, Sections(), False),
        (
            "<past>p</past><their view>t</their view><plan>q</plan><predict>none</predict><action>x</action>",
            2,
            Sections(past="p", their_view="t", plan="q", predict="none", action="x"),
            True,
        ),
        (
            "<past>p</past><their-view>t</their_view><plan>q</plan><predict>n</predict><action>x</action>",
            1,
            Sections(past="p", their_view="t", plan="q", predict="n", action="x"),
            False,
        ),
        (
            "<past>a <b>bold</b> 3 < 4</past><plan>q</plan><predict>n</predict><action>x</action>",
            1,
            Sections(past="a <b>bold</b> 3 < 4", plan="q", predict="n", action="x"),
            True,
        ),
    ],
)
def test_parser_edge_cases(text: str, depth: int, expected: Sections, valid: bool) -> None:
    assert parse_response(text, depth) == ParsedResponse(depth, expected, valid)


def test_ten_thousand_random_strings_never_raise() -> None:
    rng = random.Random(0)
    fragments = [
        "<think>",
        "</think>",
        "<past>",
        "</past>",
        "<their_view>",
        "</their view>",
        "<plan>",
        "</plan>",
        "<predict>",
        "</predict>",
        "<action>",
        "</action>",
        "<ACTION >",
        "< /past>",
        "<",
        ">",
        "/",
        "</",
        "bet",
        "pass",
        " ",
        "\n",
        "\t",
        "é",
        "\x00",
        "<b>",
        "their",
        "_view",
        "belief: King",
        "🂡",
    ]
    for _ in range(10_000):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(0, 20)))
        depth = rng.randint(0, 2)
        parsed = parse_response(text, depth)
        assert parsed.depth == depth and isinstance(parsed.format_valid, bool)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(sorted(DEPTH_SECTIONS)))
def test_arbitrary_text_never_raises(text: str, depth: int) -> None:
    parsed = parse_response(text, depth)
    assert all(value is None or isinstance(value, str) for value in vars(parsed.sections).values())


def test_render_rejects_what_would_not_round_trip() -> None:
    with pytest.raises(ValueError, match="exactly the sections"):
        render_response(Sections(think="t"), 0)
    with pytest.raises(ValueError, match="exactly the sections"):
        render_response(Sections(think="t", past="p", action="a"), 0)
    with pytest.raises(ValueError, match="stripped"):
        render_response(Sections(think=" t", action="a"), 0)
    with pytest.raises(ValueError, match="tags"):
        render_response(Sections(think="<action>x", action="a"), 0)
    with pytest.raises(ValueError, match="depth"):
        parse_response("", 3)


@pytest.mark.parametrize("name", GAMES)
def test_invalid_actions_fall_back_with_the_penalty(name: str) -> None:
    env = _fresh(name)
    agent = env.agent_selection
    legal = env.legal_actions(agent)
    for text in ("<think>x</think>", "<think>x</think><action>definitely not a move</action>"):
        parsed = parse_response(text, 0)
        first = decide(parsed, env, agent, random.Random(7), format_penalty=-5.0)
        again = decide(parsed, env, agent, random.Random(7), format_penalty=-5.0)
        assert first == again
        assert first.action in legal and first.action_name == env.action_name(first.action, agent)
        assert (first.valid, first.fallback_used, first.penalty) == (False, True, -5.0)


def test_validate_format_penalty() -> None:
    validate_format_penalty(-3.0, (-2.0, 2.0))
    for penalty in (-2.0, 0.0):
        with pytest.raises(ValueError, match=r"strictly below the worst legal return -2\.0") as err:
            validate_format_penalty(penalty, (-2.0, 2.0))
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", GAMES)
def test_messages_carry_rules_state_and_format(name: str) -> None:
    env = _fresh(name)
    agent = env.agent_selection
    for depth, sections in DEPTH_SECTIONS.items():
        system, user = build_messages(env, agent, depth)
        assert (system["role"], user["role"]) == ("system", "user")
        assert env.rules() in system["content"]
        assert all(f"<{section}>" in system["content"] for section in sections)
        assert env.observation_text(agent) in user["content"]
        assert ", ".join(env.legal_action_names(agent)) in user["content"]
        assert ("belief:" in system["content"]) == (depth > 0 and not env.spec.perfect_information)
        private_line = f"Your private information: {env.private_info(agent)}"
        assert (private_line in user["content"]) == (depth > 0 and bool(env.private_info(agent)))


def test_format_prompt_asks_for_the_generation_prompt() -> None:
    class Tokenizer:
        def apply_chat_template(self, conversation, **kwargs):
            self.kwargs = kwargs
            return "|".join(m["content"] for m in conversation) + "|assistant:"

    tokenizer = Tokenizer()
    text = format_prompt(tokenizer, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert text == "s|u|assistant:"
    assert tokenizer.kwargs == {"tokenize": False, "add_generation_prompt": True}


def test_corpus_texts_cover_tags_and_instructions() -> None:
    for depth, sections in DEPTH_SECTIONS.items():
        corpus = "\n".join(corpus_texts(depth))
        assert all(f"<{s}>" in corpus and f"</{s}>" in corpus for s in sections)
        assert "Legal actions:" in corpus
        assert ("belief:" in corpus) == (depth > 0)


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        # Every mention, in any section: the first one ("They will see bet") is where the move is sampled.
        (["<their_view>", "They will see", " bet", ".", "</their_view>", "<action>", "bet", "</action>"], [2, 6]),
        # A name split over tokens is marked at its first token; case does not matter.
        (["I will", " p", "ass", " now:", " PASS"], [1, 4]),
        # Whole words only: "bets", "better", "passed" and "bypass" are not moves.
        (["He bets", " better", " than", " he passed", " a bypass"], []),
        # One token holding two mentions is marked once; a token starting a mention mid-token is marked.
        (["bet/pass", " x", "ybet", ":bet"], [0, 3]),
        ([], []),
    ],
)
def test_move_mention_indices(pieces: list[str], expected: list[int]) -> None:
    assert move_mention_indices(pieces, ["pass", "bet"]) == expected


def test_move_mentions_of_multi_word_names_and_no_names() -> None:
    pieces = ["I", " call", " 3", " dice", " showing", " 5", " and", " call", " liar"]
    # The longer name wins where both match.
    assert move_mention_indices(pieces, ["call", "call 3 dice showing 5", "liar"]) == [1, 7, 8]
    assert move_mention_indices(pieces, []) == []
