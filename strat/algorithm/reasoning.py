"""Recursive-reasoning prompts, the tolerant response parser, and turning a response into a move."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from strat.algorithm.records import ParsedResponse, Sections

if TYPE_CHECKING:
    from games import TextGameEnv

DEPTH_SECTIONS: dict[int, tuple[str, ...]] = {
    0: ("think", "action"),
    1: ("past", "plan", "predict", "action"),
    2: ("past", "their_view", "plan", "predict", "action"),
}
"""The sections a response of each depth must contain, in order."""

SECTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Sections))

BELIEF_MARKER = "belief:"
"""Games with private information ask `<past>` to end with this marker and a guess (see comparison.py)."""

_DESCRIPTIONS = {
    "think": "your reasoning about the game and the best move.",
    "past": "what the other players' earlier actions reveal about their private information and intentions.",
    "their_view": "how the other players will read the move you are about to make.",
    "plan": "your own strategy for this turn, given the above.",
    "predict": "the next action you expect from the next other player to act: one action name, "
    "or none if your move ends the game.",
    "action": "your move: exactly one of the legal action names.",
}
_BELIEF_ONE = (
    f' End it with a line "{BELIEF_MARKER} <guess>": your best guess of the other player\'s private information,'
    " written like your own."
)
_BELIEF_MANY = (
    f' End it with a line "{BELIEF_MARKER} player <n> <guess>; player <n> <guess>; ...": your best guess of each'
    " other player's private information, written like your own."
)
_INTRO = {
    0: "You are playing {game}. Choose the best move.",
    1: "You are playing {game}. Reason strategically about the other players: what their moves reveal and "
    "what they will do next.",
    2: "You are playing {game}. Reason strategically about the other players: what their moves reveal, how "
    "they will read your move, and what they will do next.",
}
_FORMAT_HEADER = "Answer in exactly this format, with nothing before or after it:"
_HISTORY_HEADER = "History:"
_NO_HISTORY = "No moves yet."
_LEGAL_HEADER = "Legal actions:"
_PRIVATE_HEADER = "Your private information:"

OWN_INFO_LEAD = "My private information:"
"""How a response restates the player's own private information (the warm start's templates do, before the move)."""
_OWN_INFO = re.compile(re.escape(OWN_INFO_LEAD) + r"\s*([^.\n<]*)", re.IGNORECASE)

_TAG = re.compile(r"<\s*(/?)\s*(think|past|their[\s_-]?view|plan|predict|action)\s*>", re.IGNORECASE)


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer that formats chat messages."""

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: object) -> str | list[int]: ...


@dataclass(frozen=True)
class Decision:
    """The move played for one response: the parsed action if legal, else a random legal fallback and the penalty."""

    action: int
    action_name: str
    valid: bool
    fallback_used: bool
    penalty: float | None


def _check_depth(depth: int) -> None:
    if depth not in DEPTH_SECTIONS:
        raise ValueError(f"reasoning depth {depth!r} is not supported (allowed: 0, 1, 2)")


def _format_block(depth: int, belief: str) -> str:
    tags = "\n".join(f"<{name}>...</{name}>" for name in DEPTH_SECTIONS[depth])
    lines = [f"{name}: {_DESCRIPTIONS[name]}" for name in DEPTH_SECTIONS[depth]]
    if "past" in DEPTH_SECTIONS[depth]:
        lines[0] += belief
    return f"{_FORMAT_HEADER}\n{tags}\n\n" + "\n".join(lines)


def _belief_instruction(num_players: int, perfect_information: bool) -> str:
    if perfect_information:
        return ""
    return _BELIEF_ONE if num_players == 2 else _BELIEF_MANY


def system_prompt(game: TextGameEnv, depth: int) -> str:
    """The game's rules and the response format for `depth`."""
    _check_depth(depth)
    spec = game.spec
    belief = _belief_instruction(spec.num_players, spec.perfect_information)
    intro = _INTRO[depth].format(game=spec.name.replace("_", " "))
    return f"{intro}\n\nRules:\n{game.rules()}\n\n{_format_block(depth, belief)}"


def state_view(observation: str, history: str) -> str:
    """An agent's view of the state as every prompt shows it: its observation, then the history under its header."""
    return f"{observation}\n\n{_HISTORY_HEADER}\n{history.strip() or _NO_HISTORY}"


def user_prompt(game: TextGameEnv, agent: str, depth: int) -> str:
    """What `agent` sees now: observation, history and legal actions by name.

    When `<past>` asks for a belief, the agent's own private information is repeated verbatim as the form to use.
    """
    legal = ", ".join(game.legal_action_names(agent))
    private = game.private_info(agent)
    observation = game.observation_text(agent)
    if private and "past" in DEPTH_SECTIONS[depth]:
        observation += f"\n{_PRIVATE_HEADER} {private}"
    return f"{state_view(observation, game.history_text(agent))}\n\n{_LEGAL_HEADER} {legal}"


def build_messages(game: TextGameEnv, agent: str, depth: int) -> list[dict[str, str]]:
    """Chat messages (system, user) asking `agent` for its move; the tokenizer's chat template formats them."""
    return [
        {"role": "system", "content": system_prompt(game, depth)},
        {"role": "user", "content": user_prompt(game, agent, depth)},
    ]


def format_prompt(tokenizer: ChatTokenizer, messages: list[dict[str, str]]) -> str:
    """The prompt text for `messages` in `tokenizer`'s chat template, ending where the reply starts."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template returned {type(text).__name__}, expected str with tokenize=False")
    return text


def render_response(sections: Sections, depth: int) -> str:
    """A well-formed response of `depth` from `sections`; `parse_response` reads it back unchanged."""
    _check_depth(depth)
    required = DEPTH_SECTIONS[depth]
    for name in SECTION_NAMES:
        content = getattr(sections, name)
        if (content is None) == (name in required):
            raise ValueError(f"depth {depth} responses have exactly the sections {required}; {name!r} is {content!r}")
        if content is not None and (content != content.strip() or _TAG.search(content)):
            raise ValueError(f"section {name!r} must be stripped text without section tags, got {content!r}")
    return "\n".join(f"<{name}>{getattr(sections, name)}</{name}>" for name in required)


def _canonical(tag: str) -> str:
    lowered = tag.lower()
    return "their_view" if lowered.startswith("their") else lowered


def parse_response(text: str, depth: int) -> ParsedResponse:
    """Sections of a model response; never raises on any text.

    A section's content is its first occurrence, stripped. A section left open is closed by the next section
    tag or the end of the text (truncated output). `format_valid` is True only when exactly the sections of
    `depth` appear once each, closed, in order, with nothing else outside them.
    """
    _check_depth(depth)
    occurrences, clean = section_occurrences(text)
    found: dict[str, str] = {}
    for name, start, end in occurrences:
        if name in found:
            clean = False
        else:
            found[name] = text[start:end].strip()
    order = tuple(name for name, _, _ in occurrences)
    format_valid = clean and order == DEPTH_SECTIONS[depth]
    return ParsedResponse(depth=depth, sections=Sections(**found), format_valid=format_valid)


def section_occurrences(text: str) -> tuple[list[tuple[str, int, int]], bool]:
    """Every section of `text` as `parse_response` reads it: (name, start, end) of its raw content's characters,
    in order, repeats included; and whether the tags were clean (each section closed by its own tag, nothing
    outside them). A section left open is closed by the next section tag or the end of the text."""
    occurrences: list[tuple[str, int, int]] = []
    clean = True
    open_name: str | None = None
    open_end = 0
    outside_start = 0
    for match in _TAG.finditer(text):
        closing, name = bool(match.group(1)), _canonical(match.group(2))
        if open_name is None:
            if text[outside_start : match.start()].strip() or closing:
                clean = False
            if closing:
                outside_start = match.end()
            else:
                open_name, open_end = name, match.end()
            continue
        if closing and name == open_name:
            occurrences.append((open_name, open_end, match.start()))
            open_name, outside_start = None, match.end()
            continue
        # A mismatched closing tag or a new opening tag ends the open section early.
        clean = False
        occurrences.append((open_name, open_end, match.start()))
        if closing:
            open_name, outside_start = None, match.end()
        else:
            open_name, open_end = name, match.end()
    if open_name is not None:
        clean = False
        occurrences.append((open_name, open_end, len(text)))
    elif text[outside_start:].strip():
        clean = False
    return occurrences, clean


def decide(
    parsed: ParsedResponse, game: TextGameEnv, agent: str, rng: random.Random, format_penalty: float
) -> Decision:
    """The move for `parsed`: its `<action>` if it names a legal action, else a random legal one with the penalty."""
    text = parsed.sections.action
    action = game.parse_action(text, agent) if text is not None else None
    if action is not None:
        return Decision(action, game.action_name(action, agent), valid=True, fallback_used=False, penalty=None)
    legal = game.legal_actions(agent)
    if not legal:
        raise ValueError(f"{agent} has no legal action; decide() is only for the agent to act")
    fallback = rng.choice(legal)
    return Decision(
        fallback, game.action_name(fallback, agent), valid=False, fallback_used=True, penalty=format_penalty
    )


@lru_cache(maxsize=16)
def _move_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    words = sorted({name.strip() for name in names if name.strip()}, key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(word) for word in words) + r")(?!\w)", re.IGNORECASE)


def move_mention_indices(pieces: Sequence[str], names: Sequence[str]) -> list[int]:
    """Indices of the tokens where a move name is mentioned, in a response whose tokens decode to `pieces`: the
    token holding the first character of each whole-word, case-insensitive occurrence of one of `names`.

    A reasoning response names its move before `<action>` ("They will see bet", "I will play bet"), and the
    move is sampled at its first mention: the `<action>` tag only copies it. These tokens are where the move
    entropy bonus (`algorithm.move_entropy_coef`) acts; mentions that copy a known move (the opponent's, a
    repeat of one's own) are near-certain, and the entropy's gradient vanishes there.
    """
    pattern = _move_pattern(tuple(names))
    if pattern is None or not pieces:
        return []
    starts = [match.start() for match in pattern.finditer("".join(pieces))]
    indices: list[int] = []
    offset, index = 0, 0
    for start in starts:
        while offset + len(pieces[index]) <= start:
            offset += len(pieces[index])
            index += 1
        if not indices or indices[-1] != index:
            indices.append(index)
    return indices


def misstates_private_info(text: str, private: str) -> bool:
    """True when `text` restates the player's own private information ("My private information: X.") as
    anything but `private`. A response that never restates it does not misstate it.

    The move of a model that restates its card before acting depends on the restatement, so a wrong one
    lets the policy act on a card it does not hold: learning would then move the restatement, not the move.
    """
    if not private:
        return False
    expected = " ".join(private.split()).casefold()
    return any(" ".join(m.group(1).split()).casefold() != expected for m in _OWN_INFO.finditer(text))


def validate_format_penalty(penalty: float, return_range: tuple[float, float]) -> None:
    """Raise ValueError unless `penalty` is strictly worse than the game's worst legal return."""
    worst = return_range[0]
    if not penalty < worst:
        raise ValueError(
            f"format penalty {penalty} must be strictly below the worst legal return {worst}, "
            "or invalid output would pay off in lost games"
        )


def corpus_texts(depth: int) -> list[str]:
    """The fixed prompt and response texts of `depth` (intro, format instructions, tags, labels) for a tokenizer."""
    _check_depth(depth)
    tags = [f"<{name}>" for name in DEPTH_SECTIONS[depth]] + [f"</{name}>" for name in DEPTH_SECTIONS[depth]]
    texts = [
        _INTRO[depth].format(game="the game"),
        "Rules:",
        *(_format_block(depth, belief) for belief in ("", _BELIEF_ONE, _BELIEF_MANY)),
        _HISTORY_HEADER,
        _NO_HISTORY,
        _LEGAL_HEADER,
        _PRIVATE_HEADER,
        " ".join(tags),
    ]
    return list(dict.fromkeys(texts))
