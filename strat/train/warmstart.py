"""Supervised warm start: weak scripted play with templated Past-Present-Future reasoning, and a short SFT on it.

The actions come from random (or heuristic) players, never the equilibrium, so the warm-started policy follows the
response format without a good strategy; what it gains afterwards is the RL's doing. The reasoning text is written
only from what the acting agent can see (its own private information and the public history), never hidden truth.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import games
from games.heuristics import READER_TURNS
from games.opponents import make_opponent
from strat.algorithm.reasoning import (
    BELIEF_MARKER,
    DEPTH_SECTIONS,
    OWN_INFO_LEAD,
    build_messages,
    decide,
    parse_response,
    render_response,
    section_occurrences,
)
from strat.algorithm.records import Sections
from strat.config import WEAK_PLAYERS, MovePoints, MoveTarget
from strat.engines import SamplingParams, build_engine
from strat.model.tiny import cache_dir
from strat.train import supervised
from strat.train.pretrain import PretrainSettings, pretrain_examples
from strat.train.supervised import Example, FitSettings, PartialReply, fit

if TYPE_CHECKING:

    from games import TextGameEnv

GameOptions = tuple[tuple[str, int | float | str | bool], ...]
"""A game's options as sorted (key, value) pairs: hashable, and part of the warm start's cache key."""

# Bumped whenever training changes in a way the settings and transcripts do not capture (part of the cache key).
WARM_VERSION = 1
WARM_INFO = "strat_warm.json"
"""Written into a warm-started model directory: the game, the settings and the training figures."""

# --- templated reasoning -------------------------------------------------------------------------------------------

_NO_MOVES = (
    "No one has moved before me, so there is nothing to read yet.",
    "I act before the others, so they have shown nothing yet.",
    "There are no earlier moves to learn from.",
)
_PAST_LEAD = ("So far: {moves}", "What I have seen: {moves}", "The moves before mine: {moves}")
_VIEW = (
    "They will see {move}, and {reading}.",
    "When they see {move}, {reading}.",
    "My {move} tells them something: {reading}.",
)
_PLAN = ("I will play {action} {reason}.", "My move is {action}, {reason}.", "I choose {action} {reason}.")
_REASONS = ("to see how they respond", "to keep them guessing", "to mix up my play", "to keep my options open")
_BOARD_INTENT = (
    "They may be building toward a line.",
    "They are trying to take good cells.",
    "They want a line of their own.",
)
LEGAL_LEAD = "Legal now:"
"""Opens the templated `<past>`'s list of one's legal moves (`name_legal`), copied from the prompt's legal actions."""
_RECENT_MOVES = 3
"""How many of the others' latest moves `<past>` repeats: enough to read intent, short in long board games."""


def _variant(phrasings: Sequence[str], env: TextGameEnv) -> str:
    """One of `phrasings`, chosen by how far the game has gone: varied across turns, but a function of what the
    player sees, so that the policy's only free choices in a response are the ones that matter (move, guesses)."""
    return phrasings[len(env.pyspiel_state.full_history()) % len(phrasings)]


def _seat(agent: str) -> int:
    return int(agent.rsplit("_", 1)[1])


def _guess(env: TextGameEnv, agent: str, seat: int, rng: random.Random) -> tuple[str, str]:
    """The game's templated belief about player `seat`: (why, guess)."""
    guess = env.guess_private_info(agent, seat, rng)
    if guess is None:
        raise ValueError(f"{env.spec.name} has private information but no guess_private_info for the warm start")
    return guess


def _others_name(env: TextGameEnv, seat: int) -> str:
    return "my opponent" if env.spec.num_players == 2 else f"player {seat}"


def _own(env: TextGameEnv, agent: str) -> str:
    """The player's own private information as the opening of a sentence ("" in perfect-information games)."""
    private = env.private_info(agent)
    return f"{OWN_INFO_LEAD} {private}. " if private else ""


def _others_moves(env: TextGameEnv, agent: str) -> list[str]:
    """What the others did or revealed so far, one sentence each, in the player's words."""
    # history_text speaks to the agent ("You bet.", "Your opponent checked."); keep what the others did or revealed.
    lines = [line for line in env.history_text(agent).splitlines() if line and not line.startswith("You ")]
    return [("My" + line[4:]) if line.startswith("Your ") else line for line in lines]


def _situation(env: TextGameEnv, agent: str) -> str:
    """The player's own private information and the others' latest move, as the opening of a sentence: what the move
    depends on, restated right before it ("" in perfect-information games)."""
    own = _own(env, agent)
    if not own:
        return ""
    moves = _others_moves(env, agent)
    return own + (f"{moves[-1]} " if moves else "No one has moved yet. ")


def _past(env: TextGameEnv, agent: str, rng: random.Random, with_belief: bool, name_legal: bool = False,
          belief: tuple[str, str] | None = None) -> str:
    """The others' earlier moves in words and, for private-information games, a belief about each of them (`belief`,
    (why, guess), where it was drawn before the move, in a two-player game; else the game's templated guess); with
    `name_legal`, in perfect-information games, one's legal moves last (read off the board, as the prompt lists
    them), right before the section that chooses the move."""
    lines = _others_moves(env, agent)[-_RECENT_MOVES:]
    text = _variant(_PAST_LEAD, env).format(moves=" ".join(lines)) if lines else _variant(_NO_MOVES, env)
    if env.spec.perfect_information:
        text = f"{text} {_variant(_BOARD_INTENT, env)}" if lines else text
        return f"{text} {LEGAL_LEAD} {', '.join(env.legal_action_names(agent))}." if name_legal else text
    if not with_belief:
        return text
    # Restating one's own private information first puts it next to the belief and the move that depend on it.
    text = _own(env, agent) + text
    me = _seat(agent)
    seats = [seat for seat in range(env.spec.num_players) if seat != me]
    if belief is not None and len(seats) != 1:
        raise ValueError("a belief drawn before the move is for two-player games")
    guesses = [(seat, *(belief or _guess(env, agent, seat, rng))) for seat in seats]
    if len(seats) == 1:
        _, why, guess = guesses[0]
        return f"{text} {why}\n{BELIEF_MARKER} {guess}"
    why = " ".join(f"For {_others_name(env, seat)}: {reason}" for seat, reason, _ in guesses)
    belief = "; ".join(f"player {seat} {guess}" for seat, _, guess in guesses)
    return f"{text} {why}\n{BELIEF_MARKER} {belief}"


def _predict(env: TextGameEnv, agent: str, action: int, rng: random.Random) -> str:
    """A legal action of the next other agent to act after `action`, or "none" when the game ends first."""
    future = env.clone()
    future.step(action)
    # If the agent acts again before anyone else (a new betting round), play on at random to reach the others.
    while not future.pyspiel_state.is_terminal() and future.agent_selection == agent:
        future.step(rng.choice(future.legal_actions()))
    if future.pyspiel_state.is_terminal():
        return "none"
    return rng.choice(future.legal_action_names())


def templated_response(env: TextGameEnv, agent: str, action: int, depth: int, rng: random.Random,
                       name_legal: bool = False, belief: tuple[str, str] | None = None) -> str:
    """A well-formed response of `depth` for `agent` playing `action`, written only from what `agent` can see;
    `name_legal`: in perfect-information games `<past>` (`<think>` at depth 0) ends by listing the legal moves;
    `belief`: (why, guess), the belief the move was drawn from (a reader's), instead of the game's templated one."""
    name = env.action_name(action, agent)
    past = _past(env, agent, rng, with_belief="past" in DEPTH_SECTIONS[depth], name_legal=name_legal, belief=belief)
    plan = _variant(_PLAN, env).format(action=name, reason=_variant(_REASONS, env))
    if depth == 0:
        return render_response(Sections(think=f"{past} {plan}", action=name), depth)
    # The move is first named in <their_view> (depth 2) or <plan> (depth 1); restating one's own private information
    # and the others' latest move right before it keeps what the move depends on next to it: with a belief the move
    # was drawn from, that belief too.
    situation = _situation(env, agent)
    if belief is not None and situation:
        situation += f"{BELIEF_RESTATED.format(guess=belief[1])} "
    their_view = None
    if depth >= 2:
        their_view = situation + _variant(_VIEW, env).format(move=name, reading=env.move_reading(agent, action))
    elif depth == 1:
        plan = situation + plan
    return render_response(
        Sections(past=past, their_view=their_view, plan=plan, predict=_predict(env, agent, action, rng), action=name),
        depth,
    )


BELIEF_RESTATED = "I take them for the {guess}."
"""The belief a reader's move was drawn from, restated right before the move is named."""

FIRST_NAMED_IN = {0: "think", 1: "plan", 2: "their_view"}
"""The section where `templated_response` first names the move at each depth."""


def first_mention(response: str, name: str, depth: int) -> tuple[str, bool]:
    """The templated `response` cut right before the move `name` is first named (where the move is chosen), and
    whether a space precedes it there (then the cut drops it, and the name follows as " name", as tokenizers join a
    space to the next word).

    The move is first named in `<their_view>` at depth 2 (its first occurrence there), `<plan>` at depth 1 and
    `<think>` at depth 0 (their last occurrence: the template restates the situation or the past before the plan
    sentence, and those may name another player's move of the same name); without one, at `<action>`."""
    pattern = re.compile(r"(?<![\w])" + re.escape(name) + r"(?![\w])")
    wanted = FIRST_NAMED_IN[depth]
    for section, start, end in section_occurrences(response)[0]:
        if section != wanted:
            continue
        found = list(pattern.finditer(response, start, end))
        if found:
            position = (found[0] if depth == 2 else found[-1]).start()
            if response[position - 1] == " ":
                return response[: position - 1], True
            return response[:position], False
    return response[: response.index("<action>") + len("<action>")], False


MOVE_TARGETS: tuple[str, ...] = get_args(MoveTarget)
"""`WarmStartSettings.move_target`: a move example learns the drawn move's name (`drawn`), or the uniform distribution
over the legal moves' names (`legal`: the drawn target's expectation, without its sampling noise)."""
MOVE_POINTS: tuple[str, ...] = get_args(MovePoints)
"""`WarmStartSettings.move_points`: a move example is taken at a uniformly drawn decision of its random game (`any`),
or at one where some move is illegal (`some_illegal`: `TextGameEnv.some_move_illegal`)."""
MOVE_GAMES_WITHOUT_A_POINT = 1000
"""`move_examples` gives up after this many random games in a row without a decision where some move is illegal."""


def move_examples(game: str, depth: int, count: int, seed: int, options: GameOptions = (),
                  name_legal: bool = False, target: str = "drawn", points: str = "any") -> list[Example]:
    """`count` examples of naming a legal move where the response chooses its move: at a uniformly drawn decision
    point of each of `count` uniformly random games, the prompt, and a response templated for a uniformly drawn
    legal move cut at its first mention (`first_mention`) as a `PartialReply` whose target is that move's name; with
    `target="legal"` the reply also carries every legal move's name as `drawn_from` (the text before the first mention
    does not depend on the move), so the fit learns their uniform distribution there. With `points="some_illegal"`
    the decision is drawn among those where some move is illegal, and a game without one is skipped (a `ValueError`
    after `MOVE_GAMES_WITHOUT_A_POINT` in a row).

    Which legal move is drawn at random, so the examples teach which moves are legal in a state (read from the
    prompt), never which to choose. The games, the draws and the phrasing come from one stream seeded by `seed`, apart
    from the transcripts' and the board probe's games."""
    rng = random.Random(f"move-examples-{seed}")
    env = games.make(game, **dict(options))
    if points not in MOVE_POINTS:
        raise ValueError(f"move-example points {points!r} is not one of {', '.join(MOVE_POINTS)}")
    examples: list[Example] = []
    missed = 0
    while len(examples) < count:
        env.reset(seed=rng.getrandbits(31))
        decisions = []
        while not env.pyspiel_state.is_terminal():
            if points == "any" or env.some_move_illegal():
                decisions.append(env.clone())
            env.step(rng.choice(env.legal_actions(env.agent_selection)))
        if not decisions:
            missed += 1
            if missed >= MOVE_GAMES_WITHOUT_A_POINT:
                raise ValueError(f"move examples of {game}: no decision with an illegal move in {missed} random games"
                                 " in a row; use points='any'")
            continue
        missed = 0
        state = rng.choice(decisions)
        agent = state.agent_selection
        move = rng.choice(state.legal_actions(agent))
        name = state.action_name(move, agent)
        prefix, space = first_mention(templated_response(state, agent, move, depth, rng, name_legal), name, depth)
        lead = " " if space else ""
        legal = tuple(lead + legal_name for legal_name in state.legal_action_names(agent)) if target == "legal" else ()
        examples.append((build_messages(state, agent, depth), PartialReply(prefix, lead + name, legal)))
    return examples


def _check_player(player: str) -> None:
    if player not in WEAK_PLAYERS:
        raise ValueError(f"warm-start player {player!r} is not allowed (allowed: {', '.join(WEAK_PLAYERS)})")


def transcripts(
    game: str, depth: int, episodes: int, seed: int, player: str = "random", options: GameOptions = (),
    name_legal: bool = False,
) -> list[Example]:
    """(prompt messages, templated response) at every decision of `episodes` games of weak scripted self-play of
    `game` with its `options` (e.g. (("players", 3),)).

    Deterministic for a seed: deals, the players' choices and the template phrasing each have their own seeded stream.
    """
    _check_player(player)
    env = games.make(game, **dict(options))
    phrasing = random.Random(seed)
    reader = READER_TURNS.get(game) if player == "reader" else None
    examples: list[Example] = []
    for episode in range(episodes):
        env.reset(seed=seed * 1_000_003 + episode)
        players = {
            agent: make_opponent(player, game, seed=(seed * 1_000_003 + episode) * 16 + seat, **dict(options))
            for seat, agent in enumerate(env.possible_agents)
        }
        # A reader draws its belief first and its move from it: one stream per game, for both draws.
        draws = random.Random((seed * 1_000_003 + episode) * 16 + 15)
        while not env.pyspiel_state.is_terminal():
            agent = env.agent_selection
            belief = None
            if reader is None:
                action = players[agent].act(env, agent)
            else:
                why, guess, probs = reader(env, agent, draws)
                action = draws.choices(list(probs), weights=list(probs.values()))[0]
                belief = (why, guess)
            response = templated_response(env, agent, action, depth, phrasing, name_legal, belief)
            examples.append((build_messages(env, agent, depth), response))
            env.step(action)
    return examples


# --- supervised training -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmStartSettings:
    """The warm start's data and optimisation; every field is part of the cache key."""

    episodes: int = 800
    """Games of scripted play whose decisions become the training examples (Kuhn poker: ~2.2 decisions a game)."""
    epochs: int = 3
    """Passes over the examples."""
    lr: float = 1e-2
    """Peak AdamW learning rate (linear warm-up, then cosine decay to a tenth of it)."""
    batch_size: int = 4
    """Examples per optimizer step: small, since on CPU the number of steps, not their size, is what teaches."""
    max_seconds: float = 300.0
    """Stop training after this long even if epochs remain: a guard for very slow machines, not the normal end."""
    seed: int = 0
    """Seeds the transcripts and the example order."""
    depth: int = 2
    """Reasoning depth of the prompts and responses."""
    player: str = "random"
    """The scripted player in every seat: one of WEAK_PLAYERS."""
    game_options: GameOptions = ()
    """The game's options as sorted (key, value) pairs, e.g. (("players", 3),); the transcripts are of that game."""
    rules_examples: int = 0
    """Rules-corpus questions and answers (`strat.train.pretrain`, every kind the game asks) mixed into the
    transcripts, so that the format is learnt without overwriting what rules pretraining taught; 0: none."""
    name_legal_moves: bool = False
    """In perfect-information games the templated `<past>` ends by listing one's legal moves (`templated_response`'s
    `name_legal`)."""
    move_examples: int = 0
    """Examples of naming a uniformly drawn legal move where the response chooses its move (`move_examples`) mixed
    into the transcripts; with any, every example weighs the same in the loss (`FitSettings.example_mean`). 0: none."""
    context_loss: float = 0.0
    """Add this weight times each example's mean next-token loss over its prompt (`supervised.response_loss`): the
    model also learns to predict the game's text, a dense signal for reading it (and the system prompt is no longer
    cached across a batch: slower). 0: the response alone."""
    move_target: str = "drawn"
    """What a move example learns (`MOVE_TARGETS`): the drawn legal move's name, or the uniform distribution over
    every legal move's name (`legal`)."""
    move_points: str = "any"
    """Where a move example is taken (`MOVE_POINTS`): any decision of its random game, or one where some move is
    illegal (`some_illegal`)."""

    def __post_init__(self) -> None:
        _check_player(self.player)
        # A rate or a time limit written as an int (3600) is the config's float (3600.0): one cache key, one build.
        for name in ("lr", "max_seconds", "context_loss"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.rules_examples < 0 or self.move_examples < 0:
            raise ValueError(f"warm-start rules_examples and move_examples must be >= 0, got {self.rules_examples}"
                             f" and {self.move_examples}")
        if self.depth not in DEPTH_SECTIONS:
            raise ValueError(f"warm-start depth {self.depth!r} is not supported (allowed: {sorted(DEPTH_SECTIONS)})")
        for name in ("episodes", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"warm-start {name} must be >= 1, got {getattr(self, name)}")
        if self.move_target not in MOVE_TARGETS:
            raise ValueError(f"warm-start move_target {self.move_target!r} is not one of {', '.join(MOVE_TARGETS)}")
        if self.move_points not in MOVE_POINTS:
            raise ValueError(f"warm-start move_points {self.move_points!r} is not one of {', '.join(MOVE_POINTS)}")
        if not self.context_loss >= 0:
            raise ValueError(f"warm-start context_loss must be >= 0, got {self.context_loss}")
        if not self.lr > 0 or not self.max_seconds > 0:
            raise ValueError(f"warm-start lr and max_seconds must be > 0, got {self.lr} and {self.max_seconds}")


def _fit_settings(settings: WarmStartSettings) -> FitSettings:
    return FitSettings(epochs=settings.epochs, lr=settings.lr, batch_size=settings.batch_size,
                       max_seconds=settings.max_seconds, seed=settings.seed, example_mean=settings.move_examples > 0,
                       context_loss=settings.context_loss)


def _train(
    model_dir: Path, out_dir: Path, game: str, settings: WarmStartSettings, examples: list[Example]
) -> dict[str, float]:
    """Fine-tune on `examples` and save to `out_dir`; the figures that warm_start returns."""
    return fit(model_dir, out_dir, examples, _fit_settings(settings), f"warm start of {game}", "warm_start",
               WARM_INFO, {"game": game, "settings": asdict(settings)})


def warm_start(model_dir: Path, out_dir: Path, game: str, settings: WarmStartSettings) -> dict[str, float]:
    """Fine-tune the model in `model_dir` on templated transcripts of `game` (loss on response tokens only) and save it
    to `out_dir` atomically; returns examples, steps, first/final loss, stopped_early (0/1) and seconds."""
    return _train(Path(model_dir), Path(out_dir), game, settings, warm_start_examples(game, settings))


def warm_start_examples(game: str, settings: WarmStartSettings) -> list[Example]:
    """The transcripts, then `rules_examples` rules-corpus examples (a corpus of its own seed) and `move_examples`
    examples of naming a legal move (the fit shuffles)."""
    examples = transcripts(game, settings.depth, settings.episodes, settings.seed, settings.player,
                           settings.game_options, settings.name_legal_moves)
    if settings.rules_examples:
        corpus = PretrainSettings(examples=settings.rules_examples, seed=settings.seed + 1,
                                  game_options=settings.game_options)
        examples += pretrain_examples(game, corpus)
    if settings.move_examples:
        examples += move_examples(game, settings.depth, settings.move_examples, settings.seed,
                                  settings.game_options, settings.name_legal_moves, settings.move_target,
                                  settings.move_points)
    return examples


def _cache_key(model_dir: Path, game: str, settings: WarmStartSettings, examples: list[Example]) -> str:
    fields = asdict(settings)
    if not settings.game_options:  # keys of runs without options stay what they were before options existed
        del fields["game_options"]
    if not settings.rules_examples:  # and those without rules examples what they were before those existed
        del fields["rules_examples"]
    if not settings.name_legal_moves:  # and those whose template lists no legal moves
        del fields["name_legal_moves"]
    if not settings.move_examples:  # and those without move examples
        del fields["move_examples"]
    if not settings.context_loss:  # and those without the context's loss
        del fields["context_loss"]
    if settings.move_target == "drawn":  # and those whose move examples learn the drawn move
        del fields["move_target"]
    if settings.move_points == "any":  # and those whose move examples may be at any decision
        del fields["move_points"]
    return supervised.cache_key(model_dir, {"version": WARM_VERSION, "game": game, "settings": fields,
                                            "transcripts": supervised.examples_hash(examples)})


def ensure_warm(model_dir: Path, game: str, settings: WarmStartSettings) -> Path:
    """The cached warm-started copy of `model_dir`, trained on first use; safe when several processes race. One cut
    short by `max_seconds` serves this run and is not cached (`supervised.ensure_built`)."""
    model_dir = Path(model_dir)
    examples = warm_start_examples(game, settings)
    target = cache_dir() / "warm" / f"{game}-{_cache_key(model_dir, game, settings, examples)}"
    return supervised.ensure_built(target, lambda out: _train(model_dir, out, game, settings, examples), WARM_INFO)


def stopped_early(model_dir: Path) -> bool:
    """Whether the warm start in `model_dir` was cut short by its `max_seconds` guard."""
    return supervised.stopped_early(model_dir, WARM_INFO)


# --- checking the result -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatCheck:
    """How a policy's sampled responses fared: the fraction well-formed with a legal action, and the actions played."""

    validity: float
    decisions: int
    action_counts: dict[str, int]
    """Legal actions named by the valid responses, by name."""


def format_check(
    model_dir: Path,
    game: str,
    depth: int,
    episodes: int,
    seed: int,
    temperature: float = 1.0,
    max_tokens: int = 256,
) -> FormatCheck:
    """Sample the policy (hf engine) at every one of its decisions in `episodes` games against a random opponent,
    alternating its seat; games run in lockstep so that each round of decisions is one batch."""
    envs = [games.make(game) for _ in range(episodes)]
    seats = [env.possible_agents[i % len(env.possible_agents)] for i, env in enumerate(envs)]
    opponents = [make_opponent("random", game, seed=seed * 1_000_003 + i) for i in range(episodes)]
    for i, env in enumerate(envs):
        env.reset(seed=seed * 1_000_003 + i)
    fallback = random.Random(seed)
    valid, decisions, actions = 0, 0, Counter()
    engine = build_engine("hf", model_dir)
    try:
        for round_index in itertools.count():
            pending = []
            for i, env in enumerate(envs):
                while not env.pyspiel_state.is_terminal() and env.agent_selection != seats[i]:
                    env.step(opponents[i].act(env, env.agent_selection))
                if not env.pyspiel_state.is_terminal():
                    pending.append(i)
            if not pending:
                break
            params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed * 1_000_003 + round_index)
            outputs = engine.generate_chat([build_messages(envs[i], seats[i], depth) for i in pending], params)
            for i, output in zip(pending, outputs):
                env, agent = envs[i], seats[i]
                parsed = parse_response(output.text, depth)
                decision = decide(parsed, env, agent, fallback, format_penalty=env.spec.return_range[0] - 1)
                decisions += 1
                if parsed.format_valid and decision.valid:
                    valid += 1
                    actions[decision.action_name] += 1
                env.step(decision.action)
    finally:
        engine.close()
    return FormatCheck(valid / decisions if decisions else 0.0, decisions, dict(actions))


def format_validity(model_dir: Path, game: str, depth: int, episodes: int, seed: int) -> float:
    """Fraction of the policy's responses at temperature 1.0 that are well-formed with a legal action (format_check)."""
    return format_check(model_dir, game, depth, episodes, seed).validity
