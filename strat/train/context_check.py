"""The context check: the longest prompt a game can produce, found by walking its text interface, against
`engine.max_model_len`, before anything is started."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import games
from strat.algorithm.reasoning import ChatTokenizer, build_messages
from strat.engines.base import chat_prompt_ids
from strat.errors import ConfigError

if TYPE_CHECKING:
    from games import TextGameEnv
    from strat.config import ExperimentConfig
    from strat.train.fixed_policies import FixedPolicy

CountTokens = Callable[[list[dict[str, str]]], int]
"""Chat messages -> the number of prompt tokens the agents send for them."""


@dataclass(frozen=True)
class LongestPrompt:
    """The longest prompt the walk found, where it arises, and how thorough the walk was."""

    tokens: int
    agent: str
    """The agent the prompt is for."""
    moves: tuple[str, ...]
    """The moves (by name) that lead to it from the deal."""
    deal_seed: int
    """The `reset(seed=...)` of the deal it arises in."""
    decisions: int
    """Decision states the walk visited, over all deals."""
    deals: int
    """Deals walked (of seeds 0 .. deals-1, the longest first prompt first)."""
    exhaustive: bool
    """Every decision of every deal walked was visited (no ply was cut to the beam)."""


_CHILDREN_PER_BEAM_STATE = 16
"""A cut ply measures at most this many children per kept state (games with hundreds of moves, e.g. offers)."""


def longest_prompt(
    game: str,
    options: dict[str, int | float | str | bool],
    depth: int,
    count: CountTokens,
    deals: int = 64,
    max_decisions: int = 10_000,
    full_walk: int = 2_000,
    beam: int = 32,
    candidates: int = 32,
) -> LongestPrompt:
    """The longest prompt (in `count` tokens) the agents render for `game` at reasoning `depth`.

    Each deal (`reset(seed=s)`, s = 0, 1, ...) is walked ply by ply from its start over every legal move, until
    `full_walk` of its decisions have been visited; from then on each ply keeps only the `beam` states with the
    longest prompts (and measures at most 16 children of each), so a huge tree is followed along its longest
    prompts to its deepest plies. Deals stop
    after `deals` of them or once `max_decisions` decisions have been visited (the first deal is always walked
    to its end); they are walked in the order of their first prompt's length, longest first. The `candidates` distinct prompts with the most characters are then counted in tokens.

    What is guaranteed: when the result says `exhaustive`, no ply was cut, so every decision of the deals
    walked was visited (for a game without chance: every decision of the game), and the result is the longest
    of them in tokens unless `candidates` other prompts have at least as many characters. Otherwise the result
    is a lower bound.
    """
    longest: dict[str, tuple[int, list[dict[str, str]], str, tuple[str, ...], int]] = {}
    visited, walked, exhaustive = 0, 0, True
    for seed, start in _deals_by_opening(game, options, depth, deals):
        if walked and visited >= max_decisions:
            break
        frontier: list[tuple[TextGameEnv, tuple[str, ...]]] = [(start, ())]
        in_deal, cutting = 0, False
        while frontier:
            sized = []
            for env, moves in frontier:
                agent = env.agent_selection
                messages = build_messages(env, agent, depth)
                chars = sum(len(message["content"]) for message in messages)
                key = "\0".join(message["content"] for message in messages)
                if key not in longest:
                    longest[key] = (chars, messages, agent, moves, seed)
                sized.append((chars, env, moves))
            visited += len(frontier)
            in_deal += len(frontier)
            if len(longest) > 4 * candidates:
                longest = dict(sorted(longest.items(), key=lambda item: item[1][0], reverse=True)[:candidates])
            children = sum(len(env.legal_actions(env.agent_selection)) for _, env, _ in sized)
            cutting = cutting or in_deal + children > full_walk
            if cutting:
                sized = sorted(sized, key=lambda item: item[0], reverse=True)
                exhaustive = exhaustive and len(sized) <= beam and children <= _CHILDREN_PER_BEAM_STATE * beam
                sized = sized[:beam]
            frontier = [child for _, env, moves in sized for child in _children(env, moves)]
            if cutting:
                frontier = frontier[: _CHILDREN_PER_BEAM_STATE * beam]  # the longest parents' children first
        walked += 1
    if not longest:
        raise ValueError(f"{game}: no decision to walk (every deal of seeds 0..{deals - 1} ends before a move)")
    top = sorted(longest.values(), key=lambda item: item[0], reverse=True)[:candidates]
    tokens, (_, _, agent, moves, seed) = max(((count(item[1]), item) for item in top), key=lambda pair: pair[0])
    return LongestPrompt(tokens, agent, moves, seed, visited, walked, exhaustive)


def _deals_by_opening(
    game: str, options: dict[str, int | float | str | bool], depth: int, deals: int
) -> list[tuple[int, TextGameEnv]]:
    """The deals of seeds 0 .. deals-1 at their first decision, the longest first prompt first (a deal with
    more to say at its start tends to have more to say later)."""
    started = []
    for seed in range(deals):
        env = games.make(game, **options)
        env.reset(seed=seed)
        env.skip_finished()
        if not env.finished():
            chars = sum(len(m["content"]) for m in build_messages(env, env.agent_selection, depth))
            started.append((-chars, seed, env))
    started.sort(key=lambda item: item[:2])
    return [(seed, env) for _, seed, env in started]


def _children(env: TextGameEnv, moves: tuple[str, ...]) -> list[tuple[TextGameEnv, tuple[str, ...]]]:
    """The decision states one move after `env`, with the moves that lead there."""
    agent = env.agent_selection
    out = []
    for action in env.legal_actions(agent):
        child = env.clone()
        child.step(action)
        child.skip_finished()
        if not child.finished():
            out.append((child, (*moves, env.action_name(action, agent))))
    return out


def token_counter(tokenizer: ChatTokenizer) -> CountTokens:
    """Counts a prompt as the agents encode it: the chat template with the assistant's turn opened."""

    def count(messages: list[dict[str, str]]) -> int:
        return len(chat_prompt_ids(tokenizer, messages))

    return count


def check_fits(found: LongestPrompt, game: str, depth: int, max_new_tokens: int, max_model_len: int) -> None:
    """Raise ConfigError when the longest prompt plus `max_new_tokens` exceeds `max_model_len`."""
    need = found.tokens + max_new_tokens
    if need <= max_model_len:
        return
    lower = max_model_len - found.tokens
    alternative = f", or lower reasoning.max_new_tokens to {lower}" if lower >= 1 else ""
    raise ConfigError(
        f"engine.max_model_len={max_model_len}: the longest {game} prompt at reasoning.depth={depth} has "
        f"{found.tokens} tokens, plus reasoning.max_new_tokens={max_new_tokens} needs {need}, {need - max_model_len} "
        f"more; raise engine.max_model_len to {need}{alternative}"
    )


def check_context(config: ExperimentConfig, fixed: Sequence[FixedPolicy] | None = None) -> LongestPrompt:
    """Measure the config's game with its model's tokenizer, and each fixed policy's with its own (`fixed`, resolved;
    None resolves them), and refuse it when the context is too short."""
    # Deferred: transformers costs seconds to import, and a tiny model is built on first use.
    from transformers import AutoTokenizer

    from strat.train.settings import base_model_path

    tokenizer = AutoTokenizer.from_pretrained(
        base_model_path(config), trust_remote_code=config.model.trust_remote_code
    )
    game, depth = config.game.name, config.reasoning.depth
    found = longest_prompt(game, dict(config.game.options), depth, token_counter(tokenizer))
    check_fits(found, game, depth, config.reasoning.max_new_tokens, config.engine.max_model_len)
    if config.warm_start.enabled:
        check_warm_start_fits(config, tokenizer)
    if fixed is None:
        from strat.train.fixed_policies import resolve_fixed_policies

        fixed = resolve_fixed_policies(config)
    check_fixed_policies_fit(config, fixed)
    check_cotrained_policies_fit(config, found)
    return found


def check_cotrained_policies_fit(config: ExperimentConfig, first: LongestPrompt) -> None:
    """Each co-trained policy's longest prompt, in its own model's tokenizer (a `tiny:<game>` model's is the game's,
    built on first use) and the run's reasoning format, plus the run's token limit must fit `engine.max_model_len`;
    ConfigError naming the policy otherwise. Its warm start, where enabled, is checked on that tokenizer too."""
    from transformers import AutoTokenizer

    from strat.config import cotrained_policy_names, policy_config
    from strat.train.settings import base_model_path

    depth, limit = config.reasoning.depth, config.reasoning.max_new_tokens
    for name in cotrained_policy_names(config):
        own = policy_config(config, name)
        tokenizer = AutoTokenizer.from_pretrained(base_model_path(own), trust_remote_code=own.model.trust_remote_code)
        _check_policy_fits(config, f"co-trained policy {name}", tokenizer, depth, limit,
                           f" (the first policy's needs {first.tokens + limit})")
        if own.warm_start.enabled:
            check_warm_start_fits(own, tokenizer)


def check_fixed_policies_fit(config: ExperimentConfig, fixed: Sequence[FixedPolicy]) -> None:
    """Each fixed policy's longest prompt, in its own tokenizer and reasoning format, plus its own token limit must
    fit `engine.max_model_len` (its engine shares the setting); ConfigError naming the policy otherwise."""
    from transformers import AutoTokenizer

    for policy in fixed:
        tokenizer = AutoTokenizer.from_pretrained(policy.model_dir)
        _check_policy_fits(config, f"fixed policy {policy.name}", tokenizer, policy.settings.depth,
                           policy.settings.max_tokens)


def _check_policy_fits(config: ExperimentConfig, who: str, tokenizer: ChatTokenizer, depth: int, limit: int,
                       more: str = "") -> None:
    """`who`'s longest prompt of the game in `tokenizer` at `depth`, plus `limit` new tokens, must fit
    `engine.max_model_len`; ConfigError naming `who` otherwise."""
    found = longest_prompt(config.game.name, dict(config.game.options), depth, token_counter(tokenizer))
    need, room = found.tokens + limit, config.engine.max_model_len
    if need > room:
        raise ConfigError(
            f"engine.max_model_len={room}: {who}'s longest {config.game.name} prompt (its tokenizer, reasoning depth"
            f" {depth}) has {found.tokens} tokens, plus its {limit} new tokens needs {need}; raise"
            f" engine.max_model_len to {need}{more}"
        )


def check_warm_start_fits(config: ExperimentConfig, tokenizer: ChatTokenizer) -> None:
    """Raise ConfigError when the warm start teaches responses longer than `reasoning.max_new_tokens`: every
    warm-started response would be cut off before its action, and every move would be the fallback."""
    from strat.train.settings import warm_start_settings
    from strat.train.warmstart import transcripts  # deferred: it imports torch

    warm = warm_start_settings(config)
    examples = transcripts(config.game.name, warm.depth, warm.episodes, warm.seed, warm.player, warm.game_options)
    longest = max((len(tokenizer(response)["input_ids"]) + 1 for _, response in examples), default=0)  # + end token
    limit = config.reasoning.max_new_tokens
    if longest > limit:
        raise ConfigError(
            f"reasoning.max_new_tokens={limit}: the warm start teaches responses of up to {longest} tokens (with the"
            f" end token; warm_start.player={warm.player}), so warm-started responses would be cut off before their"
            f" action; raise reasoning.max_new_tokens to at least {longest}"
        )


def context_summary(found: LongestPrompt, config: ExperimentConfig) -> str:
    """One line for `strat check`: the longest prompt, how it was found, and the room left."""
    how = "every decision" if found.exhaustive else f"a beam search (a lower bound) over {found.decisions} decisions"
    need = found.tokens + config.reasoning.max_new_tokens
    return (
        f"context: longest {config.game.name} prompt {found.tokens} tokens ({how} of {found.deals} deals) + "
        f"reasoning.max_new_tokens={config.reasoning.max_new_tokens} = {need} <= "
        f"engine.max_model_len={config.engine.max_model_len}"
    )
