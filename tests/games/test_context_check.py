"""The context check on a game Strat does not ship (misère Nim, whose prompt grows with every move, so its longest
prompt comes at the last decision of the longest game): the walk finds the longest prompt an independent walk over
the OpenSpiel tree finds, and `strat check` and `strat train` refuse a context one token too short and accept one
that fits exactly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nim_game  # this folder is on sys.path (no __init__.py: `games` is the package under test)
import pytest
from transformers import AutoTokenizer

import games
from strat import cli
from strat.algorithm.reasoning import build_messages
from strat.errors import ConfigError
from strat.train.context_check import longest_prompt, token_counter

PILES = "1;2;3"
"""Six sticks: the longest game has six moves, so the last decision comes after five."""
DEPTH, MAX_NEW_TOKENS = 2, 48


@pytest.fixture
def nim() -> Iterator[None]:
    """Nim registered as a user's module registers it, for one test (the other tests expect the shipped games)."""
    games.register(nim_game.NimEnv)
    yield
    del games.registry._GAMES["nim"]


@pytest.fixture(scope="module")
def count(tiny_model_dir: Path):
    return token_counter(AutoTokenizer.from_pretrained(tiny_model_dir))


def _every_prompt(count) -> list[tuple[int, int]]:
    """(tokens, moves played) at every decision of the game, by a depth-first walk over OpenSpiel's own tree."""
    env = nim_game.NimEnv(pile_sizes=PILES)
    stack = [env.pyspiel_state.get_game().new_initial_state()]
    found = []
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        env.load_state(state)
        found.append((count(build_messages(env, env.agent_selection, DEPTH)), len(state.history())))
        stack.extend(state.child(action) for action in state.legal_actions())
    return found


def _config(tmp_path: Path, model_dir: Path, max_model_len: int) -> Path:
    path = tmp_path / "nim.yaml"
    path.write_text(
        f"run: {{name: nim_ctx, output_dir: {tmp_path / 'runs'}}}\n"
        f"model: {{path: {model_dir}}}\n"
        f"engine: {{backend: hf, max_model_len: {max_model_len}}}\n"
        f'game: {{name: nim, options: {{pile_sizes: "{PILES}"}}, opponents: [{{kind: self}}]}}\n'
        f"reasoning: {{depth: {DEPTH}, max_new_tokens: {MAX_NEW_TOKENS}}}\n"
    )
    return path


def test_the_walk_finds_the_longest_prompt_late_in_the_game(nim: None, count) -> None:
    every = _every_prompt(count)
    longest = max(tokens for tokens, _ in every)
    first = next(tokens for tokens, moves in every if moves == 0)
    assert longest > first + 20, "the prompt grows as the game goes on"
    found = longest_prompt("nim", {"pile_sizes": PILES}, DEPTH, count)
    assert found.tokens == longest and found.exhaustive
    assert len(found.moves) == 5 and all(move == "take 1 from pile " + move[-1] for move in found.moves)
    assert found.decisions >= len(every), "every decision of the first deal was visited"


def test_a_narrow_beam_gives_a_lower_bound_and_says_so(nim: None, count) -> None:
    longest = max(tokens for tokens, _ in _every_prompt(count))
    found = longest_prompt("nim", {"pile_sizes": PILES}, DEPTH, count, deals=1, full_walk=0, beam=2)
    assert not found.exhaustive and found.tokens <= longest
    assert len(found.moves) == 5, "the beam follows the longest prompts down to the last decision"


def test_check_and_train_refuse_one_token_short_and_accept_an_exact_fit(
    nim: None, count, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fits = max(tokens for tokens, _ in _every_prompt(count)) + MAX_NEW_TOKENS
    assert cli.main(["check", str(_config(tmp_path, tiny_model_dir, fits))]) == 0
    out = capsys.readouterr()
    assert f"max_model_len: {fits}" in out.out
    assert f"= {fits} <= engine.max_model_len={fits}" in out.err

    short = _config(tmp_path, tiny_model_dir, fits - 1)
    for verb in ("check", "train"):
        assert cli.main([verb, str(short)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        assert err.startswith(f"strat: error: engine.max_model_len={fits - 1}: ")
        assert f"needs {fits}, 1 more; raise engine.max_model_len to {fits}" in err
        assert f"or lower reasoning.max_new_tokens to {MAX_NEW_TOKENS - 1}" in err
    assert not (tmp_path / "runs").exists(), "train stopped before making a run directory"


def test_a_response_budget_shorter_than_the_warm_starts_responses_is_refused() -> None:
    """Three-player Kuhn's warm-start responses run to 215 tokens with the tiny tokenizer (two opponents to read):
    at 160 every warm-started response was cut off before its action (a real run trained on fallbacks only)."""
    from strat.config_loading import load_config
    from strat.train.context_check import check_context

    config = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_3p_tiny.yaml"
    with pytest.raises(ConfigError, match=r"reasoning.max_new_tokens=160: the warm start teaches responses of up to 21\d"):
        check_context(load_config(config, ["reasoning.max_new_tokens=160"]))
    check_context(load_config(config, []))  # 256: fits
