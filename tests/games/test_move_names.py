"""Text options that rename the moves, the game unchanged: Kuhn's `move_names: situational` names pass/bet
"check"/"bet" before anyone has bet and "fold"/"call" once someone has; tic-tac-toe's `move_names: digits` numbers
the cells 1-9 and shows each empty cell on the board by its number."""

from __future__ import annotations

import pytest

import games
from games.equilibrium import available
from games.kuhn_poker import BET, PASS
from strat.eval.exploitability import exact_estimate, exploitable


def test_situational_names_follow_the_betting() -> None:
    env = games.make("kuhn_poker", move_names="situational")
    env.reset(seed=0)
    assert env.legal_action_names() == ["check", "bet"]
    env.step(PASS)  # player 0 checks
    assert env.legal_action_names() == ["check", "bet"]
    assert env.parse_action("I will bet.") == BET and env.parse_action("call") is None
    env.step(BET)  # player 1 bets
    assert env.legal_action_names() == ["fold", "call"]
    assert env.parse_action("<action>call</action>") == BET and env.parse_action("fold") == PASS
    assert env.parse_action("bet") is None and env.parse_action("pass") is None  # not this situation's words
    assert env.history_text("player_0").splitlines() == ["You checked.", "Your opponent bet."]
    assert env.all_action_names() == ["check", "bet", "fold", "call"]


def test_three_players_name_every_answer_to_a_bet() -> None:
    env = games.make("kuhn_poker", players=3, move_names="situational")
    env.reset(seed=1)
    env.step(BET)  # player 0 bets: both others answer it
    assert env.legal_action_names() == ["fold", "call"]
    env.step(PASS)
    assert env.legal_action_names() == ["fold", "call"]


def test_the_default_keeps_openspiel_names_and_rules_text() -> None:
    env = games.make("kuhn_poker")
    env.reset(seed=0)
    env.step(BET)
    assert env.legal_action_names() == ["pass", "bet"] and env.all_action_names() == ["pass", "bet"]
    assert 'choosing "pass" or "bet". Before anyone has bet, "pass" checks' in env.rules()
    situational = games.make("kuhn_poker", move_names="situational").rules()
    assert '"check" (put nothing in) or "bet"' in situational and '"call" (put 1 chip in) or "fold"' in situational


def test_names_are_text_only_the_game_and_its_values_are_the_same() -> None:
    """pyspiel never sees the option: the same game, the same exploitability for the same policy."""
    def always_bet(env: games.TextGameEnv, agent: str) -> dict[int, float]:
        return {BET: 1.0}

    assert exploitable("kuhn_poker", {"move_names": "situational"})
    assert available("kuhn_poker", move_names="situational")
    plain = exact_estimate("kuhn_poker", always_bet)
    named = exact_estimate("kuhn_poker", always_bet, {"move_names": "situational"})
    assert named.value == pytest.approx(plain.value) == pytest.approx(1 / 3)
    moves = dict(named.infoset_moves)
    assert moves["0"] == (("check", 0.0), ("bet", 1.0))  # the Jack, first to act
    assert moves["0pb"] == (("fold", 0.0), ("call", 1.0))  # the Jack after check, bet


def test_tic_tac_toe_digits_show_the_free_cells_on_the_board() -> None:
    env = games.make("tic_tac_toe", move_names="digits")
    env.reset(seed=0)
    env.step(4)  # X in the centre
    env.step(0)  # O in the top left
    board = env.observation_text("player_0").splitlines()[1:4]
    assert board == ["O 2 3", "4 X 6", "7 8 9"]
    assert env.legal_action_names() == ["2", "3", "4", "6", "7", "8", "9"]
    assert env.history_text("player_0").splitlines() == ["You played 5.", "Your opponent played 1."]
    assert env.parse_action("<action>9</action>") == 8 and env.parse_action("1") is None  # taken
    assert '"1" is the top left corner, "9" the bottom right, "5" the centre' in env.rules()
    cells = games.make("tic_tac_toe")
    cells.reset(seed=0)
    assert cells.legal_action_names()[:2] == ["a1", "b1"] and "The board (. is empty)" in cells.observation_text(
        "player_0")


def test_connect_four_open_column_numbers_show_the_legal_moves() -> None:
    """Column 3 filled (six pieces): the row above the board numbers the six open columns and shows 3 as "-"; the
    board itself and the move names are those of the default text."""
    env = games.make("connect_four", column_numbers="open")
    default = games.make("connect_four")
    for game in (env, default):
        game.reset(seed=0)
        for _ in range(6):
            game.step(2)
        game.step(3)  # X's seventh piece in column 4: O to move
    lines = env.observation_text("player_1").splitlines()
    assert lines[1] == "1 2 - 4 5 6 7"
    assert lines[2:] == default.observation_text("player_1").splitlines()[2:]
    assert default.observation_text("player_1").splitlines()[1] == "1 2 3 4 5 6 7"
    assert env.legal_action_names() == ["column 1", "column 2", "column 4", "column 5", "column 6", "column 7"]
    assert [name.split()[1] for name in env.legal_action_names()] == [n for n in lines[1].split() if n != "-"]
    assert "a full column shows -" in env.rules() and "a full column shows -" not in default.rules()
    with pytest.raises(ValueError, match="column_numbers='none'"):
        games.make("connect_four", column_numbers="none")


def test_named_lines_list_the_cells_that_complete_a_line() -> None:
    """Tic-tac-toe, X a1 b1 and O a2 b2 (then X a3): X's text names its win at c1 and O's at c2, as seen from each
    side; the text is the default's plus that line. Connect Four, X three up column 1 and O three along the bottom
    (columns 2-4): column 1 completes X's line and column 5 O's. No line to complete: "none"; the game over: no line."""
    env = games.make("tic_tac_toe", lines="named")
    default = games.make("tic_tac_toe")
    for game in (env, default):
        game.reset(seed=0)
        for cell in (0, 3, 1, 4):
            game.step(cell)
    named = env.observation_text("player_0").splitlines()
    assert named[5] == "Cells that complete a line: yours c1; theirs c2."
    assert named[:5] + named[6:] == default.observation_text("player_0").splitlines()
    assert "Cells that complete a line: yours c2; theirs c1." in env.observation_text("player_1")
    assert "Cells that complete a line" in env.rules() and "Cells that complete a line" not in default.rules()
    env.step(6)
    assert "Cells that complete a line: yours c2; theirs c1." in env.observation_text("player_1")
    env.step(5)
    assert env.pyspiel_state.is_terminal() and "complete a line:" not in env.observation_text("player_0")
    digits = games.make("tic_tac_toe", lines="named", move_names="digits")
    digits.reset(seed=0)
    assert "Cells that complete a line: yours none; theirs none." in digits.observation_text("player_0")
    digits.step(0)
    digits.step(4)
    digits.step(1)
    assert "Cells that complete a line: yours none; theirs 3." in digits.observation_text("player_1")
    four = games.make("connect_four", lines="named")
    four.reset(seed=0)
    for column in (0, 1, 0, 2, 0, 3):
        four.step(column)
    assert "Columns that complete a line: yours column 1; theirs column 5." in four.observation_text("player_0")
    assert "Columns that complete a line: yours column 5; theirs column 1." in four.observation_text("player_1")
    with pytest.raises(ValueError, match="lines='all'"):
        games.make("tic_tac_toe", lines="all")


def test_an_unknown_naming_is_refused() -> None:
    assert games.text_options("kuhn_poker") == ("move_names",) and games.text_options("leduc_poker") == ()
    assert games.text_options("tic_tac_toe") == ("move_names", "lines")
    assert games.text_options("connect_four") == ("column_numbers", "lines")
    with pytest.raises(ValueError, match="move_names='numbers'"):
        games.make("tic_tac_toe", move_names="numbers")
    with pytest.raises(ValueError, match="move_names='poker'.*allowed: \\['pass-bet', 'situational'\\]"):
        games.make("kuhn_poker", move_names="poker")
    with pytest.raises(ValueError, match="unknown option"):
        games.make("leduc_poker", move_names="situational")  # Leduc names fold/call/raise already
