"""Heuristic players: the sensible rules a person would write for each game.

Each policy maps (env, agent) to probabilities over the agent's legal actions; ties between
equally good moves are broken uniformly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from math import comb

import pyspiel

from games.bargaining import BargainingEnv
from games.base import TextGameEnv
from games.cards import rank_names
from games.connect_four import ConnectFourEnv
from games.kuhn_poker import BET, PASS, KuhnPokerEnv
from games.leduc_poker import CALL, FOLD, RAISE, LeducPokerEnv, heuristic_policy
from games.liars_dice import LiarsDiceEnv
from games.lines import board_rows, completes_line, completing_moves, drop_cells, empty_cells
from games.tic_tac_toe import TicTacToeEnv


def kuhn_poker(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """Bet, or call a bet, with one of the two highest cards; otherwise check, or fold."""
    return _pick(BET if _kuhn_strong(env, agent) else PASS)


def _kuhn_strong(env: KuhnPokerEnv, agent: str) -> bool:
    """One of the two highest cards."""
    return env.card(agent) >= env.spec.num_players - 1


def leduc_poker(env: LeducPokerEnv, agent: str) -> dict[int, float]:
    """Raise with a Queen, a King or a pair; otherwise check or call, but fold a Jack to a raise
    (`games.leduc_poker.heuristic_policy`)."""
    return heuristic_policy(env, agent)


def tic_tac_toe(env: TicTacToeEnv, agent: str) -> dict[int, float]:
    """Win if possible, else block, else take the centre, then a corner, then a side."""
    legal = env.legal_actions(agent)
    moves = line_moves(env, agent)
    for completing in (moves.wins, moves.blocks):
        if completing:
            return _uniform(list(completing))
    for preferred in ([4], [0, 2, 6, 8], [1, 3, 5, 7]):
        options = [a for a in preferred if a in legal]
        if options:
            return _uniform(options)
    raise ValueError(f"{agent} has no legal move")


def connect_four(env: ConnectFourEnv, agent: str) -> dict[int, float]:
    """Win, else block, else avoid playing under the opponent's winning cell; centre first."""
    grid, landing, in_row = _drops(env)
    legal = list(landing)
    mine, theirs = _marks(env.pyspiel_state)
    for mark in (mine, theirs):
        completing = completing_moves(grid, landing, mark, in_row)
        if completing:
            return _uniform(completing)
    safe = [a for a in legal if not _sets_up(grid, landing[a], mine, theirs, in_row)]
    options = safe or legal
    centre = (len(grid[0]) - 1) / 2
    nearest = min(abs(a - centre) for a in options)
    return _uniform([a for a in options if abs(a - centre) == nearest])


def liars_dice(env: LiarsDiceEnv, agent: str) -> dict[int, float]:
    """Call "liar" when the last bid is less likely true than our best bid; else make that bid."""
    dice = env.dice(agent)
    unseen = env.dice_per_player * (env.spec.num_players - 1)
    current = env.current_bid()
    bids = [a for a in env.legal_actions(agent) if a != env.liar_action]

    def chance_true(action: int) -> float:
        count, face = env.bid(action)
        have = sum(1 for d in dice if d == face or d == env.sides)
        p = 1 / env.sides if face == env.sides else 2 / env.sides
        return _at_least(count - have, unseen, p)

    if not bids:
        return _pick(env.liar_action)
    best = max(chance_true(a) for a in bids)
    if current is not None and 1 - chance_true(current) > best:
        return _pick(env.liar_action)
    return _pick(min(a for a in bids if chance_true(a) == best))


def bargaining(env: BargainingEnv, agent: str) -> dict[int, float]:
    """Accept a fair share (anything on the last turn); otherwise ask for a 7-point share."""
    values, pool = env.values(agent), env.pool()
    legal = env.legal_actions(agent)
    latest = env.last_offer()

    def worth(taken: tuple[int, ...]) -> int:
        return sum(q * v for q, v in zip(taken, values))

    if env.agree_action in legal and latest is not None:
        offered = worth(tuple(q - t for q, t in zip(pool, env.offer(latest[1]))))
        last_turn = env.turn() == env.max_turns - 1
        if offered >= 6 or (last_turn and offered > 0):
            return _pick(env.agree_action)
    offers = [a for a in legal if a != env.agree_action]
    target = min(7, worth(pool))
    enough = [a for a in offers if worth(env.offer(a)) >= target]
    fewest = min(sum(env.offer(a)) for a in enough)
    return _uniform([a for a in enough if sum(env.offer(a)) == fewest])


POLICIES: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker,
    "leduc_poker": leduc_poker,
    "tic_tac_toe": tic_tac_toe,
    "connect_four": connect_four,
    "liars_dice": liars_dice,
    "bargaining": bargaining,
}


def kuhn_poker_contrarian(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """The Kuhn heuristic upside down, three times in four: lean to bet, or call a bet, with the lower cards and to
    check, or fold, the highest ones."""
    return _lean(PASS if _kuhn_strong(env, agent) else BET, env.legal_actions(agent))


def leduc_poker_contrarian(env: LeducPokerEnv, agent: str) -> dict[int, float]:
    """The Leduc heuristic upside down, two times in three: lean to raise with a weak hand and to fold a strong one
    to a raise, else to check or call."""
    legal = env.legal_actions(agent)
    strong = env.strong_hand(agent)
    if not strong and RAISE in legal:
        return _lean(RAISE, legal)
    if not strong or FOLD not in legal:
        return _lean(CALL, legal)
    return _lean(FOLD, legal)


def liars_dice_contrarian(env: LiarsDiceEnv, agent: str) -> dict[int, float]:
    """Liar's dice read the wrong way round, half the time: doubt ("liar") a bid its own die backs (a bid on its
    face, or any bid when its die is wild), and otherwise bid a face its die does not back, at the lowest count
    left; else uniform. With a wild die nothing is unbacked, so its opening bid is uniform."""
    legal, dice = env.legal_actions(agent), env.dice(agent)

    def backed(face: int) -> bool:
        return any(d == face or d == env.sides for d in dice)

    current = env.current_bid()
    if current is not None and backed(env.bid(current)[1]):
        return _lean(env.liar_action, legal)
    bluffs = [a for a in legal if a != env.liar_action and not backed(env.bid(a)[1])]
    if bluffs:
        lowest = min(env.bid(a)[0] for a in bluffs)
        return _lean_set([a for a in bluffs if env.bid(a)[0] == lowest], legal)
    return _lean(env.liar_action, legal) if env.liar_action in legal else _uniform(legal)


def _lean(action: int, legal: list[int], weight: float = 0.5) -> dict[int, float]:
    """`action` with probability `weight`, else uniform over `legal` (so every legal move keeps some chance)."""
    return _lean_set([action], legal, weight)


def _lean_set(actions: list[int], legal: list[int], weight: float = 0.5) -> dict[int, float]:
    """One of `actions` (uniformly) with probability `weight`, else uniform over `legal`."""
    probs = dict.fromkeys(legal, (1.0 - weight) / len(legal))
    for action in actions:
        probs[action] += weight / len(actions)
    return probs


def kuhn_poker_timid(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """A timid player who reads its card the right way round but rarely puts chips in: it bets, or calls a bet,
    half the time with the highest card, one time in four with a middle card and one time in ten with the lowest;
    otherwise it checks, or folds."""
    legal, card = env.legal_actions(agent), env.card(agent)
    if card == env.spec.num_players:
        return _uniform(legal)
    return _lean(PASS, legal, 0.8 if card == 0 else 0.5)


def kuhn_poker_bully(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """A bully who bets into a pot nobody has bet and backs down once someone bets: before any bet it bets nine
    times in ten with the highest card and half the time with any other; facing a bet it calls as the timid player
    does (half the time with the highest card, one time in four with a middle card, one time in ten with the
    lowest), otherwise it folds. Its move depends on the betting as well as on its card."""
    if env.facing_bet():
        return kuhn_poker_timid(env, agent)
    legal, card = env.legal_actions(agent), env.card(agent)
    return _lean(BET, legal, 0.8) if card == env.spec.num_players else _uniform(legal)


def kuhn_poker_station(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """A calling station: it bets as the timid player does (half the time with the highest card, one time in four
    with a middle card, one time in ten with the lowest) but calls a bet half the time whatever its card. Its move
    depends on the betting as well as on its card."""
    if env.facing_bet():
        return _uniform(env.legal_actions(agent))
    return kuhn_poker_timid(env, agent)


def _other_cards(env: KuhnPokerEnv, agent: str) -> list[int]:
    """The cards `agent` does not hold, lowest first."""
    return [card for card in range(env.spec.num_players + 1) if card != env.card(agent)]


READER_NOISE = 0.1
"""How often the reader plays a uniformly random legal move instead of acting on its belief."""


def kuhn_poker_reader_move(env: KuhnPokerEnv, agent: str, believed: int) -> dict[int, float]:
    """The reader's move once it believes its opponent holds card `believed`: it bets, or calls a bet, half the time
    when its own card beats that card and never otherwise; one time in ten (`READER_NOISE`) it plays a uniformly
    random legal move instead. Two-player Kuhn poker."""
    bet = (1 - READER_NOISE) * 0.5 * (env.card(agent) > believed) + READER_NOISE / 2
    return {PASS: 1 - bet, BET: bet}


def kuhn_poker_reader(env: KuhnPokerEnv, agent: str) -> dict[int, float]:
    """A weak player whose move is written from its belief: it believes, with equal chance, either card it does not
    hold (what the cards alone say; it reads nothing into the betting) and plays `kuhn_poker_reader_move` on that
    belief. So it bets or calls with the King half the time, with the Queen a little more than one time in four
    (0.275), and with the Jack one time in twenty (0.368 exploitable, against always betting's 1/3). The warm start
    draws the belief first and writes it into the response, so that the move it imitates depends on the belief
    written before it."""
    moves = [kuhn_poker_reader_move(env, agent, card) for card in _other_cards(env, agent)]
    return {action: sum(move[action] for move in moves) / len(moves) for action in (PASS, BET)}


READER: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker_reader,
}
"""Weak players whose moves follow a belief about the opponent's private information (two-player games)."""


def kuhn_poker_reader_turn(env: KuhnPokerEnv, agent: str, rng: random.Random) -> tuple[str, str, dict[int, float]]:
    """One of the reader's turns with its belief drawn first: (why, the believed card's name, the move's
    probabilities given that belief). Marginalised over the draw, the move is `kuhn_poker_reader`'s."""
    believed = rng.choice(_other_cards(env, agent))
    why = "The cards alone leave either of the other two, so I take one."
    return why, rank_names(env.spec.num_players + 1)[believed], kuhn_poker_reader_move(env, agent, believed)


READER_TURNS: dict[str, Callable[[TextGameEnv, str, random.Random], tuple[str, str, dict[int, float]]]] = {
    "kuhn_poker": kuhn_poker_reader_turn,
}
"""The readers' turns with the belief drawn first, for the warm start to write that belief before the move."""


CONTRARIAN: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker_contrarian,
    "leduc_poker": leduc_poker_contrarian,
    "liars_dice": liars_dice_contrarian,
}
"""Deliberately weak players that read their cards (or die) the wrong way round: a warm start that imitates them
learns to act on its private information (the pathway RL needs) without any of the strategy."""

def liars_dice_timid(env: LiarsDiceEnv, agent: str) -> dict[int, float]:
    """A timid opener: half the time it opens with the lowest bid on a face it holds (a wild six bids sixes), and
    otherwise, and in every later turn, it plays as the random player does (uniform over the legal bids and "liar").
    Its opening reads its die the right way round (P(own face) 0.5 + 0.5 x 2/12 against 0.5 x 2/12 for another face
    in the one-die game: a margin of 0.5); nothing else it does reads anything."""
    legal, dice = env.legal_actions(agent), env.dice(agent)
    if env.current_bid() is not None:
        return _uniform(legal)
    own = [a for a in legal if a != env.liar_action and env.bid(a)[1] in dice]
    lowest = min(env.bid(a)[0] for a in own)
    return _lean_set([a for a in own if env.bid(a)[0] == lowest], legal)


def leduc_poker_timid(env: LeducPokerEnv, agent: str) -> dict[int, float]:
    """A timid player who reads its hand the right way round but rarely puts chips in. It leans to the passive move
    (a check where nothing is owed, a fold facing a raise) 8 times in 10 with a weak hand (a Jack without a pair) and
    half the time with a middle one (a Queen without a pair), and plays uniformly with a strong one (a King or a
    pair). So with nothing owed it raises one time in ten with the weak hand, one time in four with the middle hand
    and half the time with the strong one; facing a raise it folds the weak hand 13 times in 15, the middle hand
    2 times in 3 and the strong hand 1 time in 3 (more facing a second raise, which cannot be raised again)."""
    legal, card = env.legal_actions(agent), env.card(agent)
    if card == env.public_card() or card == env.spec.num_players:
        return _uniform(legal)
    return _lean(FOLD if FOLD in legal else CALL, legal, 0.8 if card == 0 else 0.5)


TIMID: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker_timid,
    "leduc_poker": leduc_poker_timid,
    "liars_dice": liars_dice_timid,
}
"""Weak players that read their private information the right way round and press nothing. Kuhn's ranks its cards
correctly but bets and calls far too rarely (hardly ever bluffs, folds the middle card to most bets, slow-plays the
best one): a warm start that imitates it acts on its card the right way round and leaves RL the strategy (how often to
bet, bluff and call). Leduc's does the same with its hand (a Jack, a Queen, a King or a pair). Liar's dice's opens on
its own face half the time and plays at random after: a warm start that imitates it has a move that depends on its
die."""

BULLY: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker_bully,
}
"""A weak player whose moves depend on the betting as well as the card (it bets freely into an unbet pot and calls as
rarely as the timid player; 0.408 exploitable against always betting's 1/3), where the timid player's depend on the
card alone."""

STATION: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "kuhn_poker": kuhn_poker_station,
}
"""A weak player whose moves depend on the betting as well as the card (it bets as rarely as the timid player and
calls half the time whatever its card; 0.442 exploitable), so that a warm start that imitates it reads both."""


def liars_dice_truthful(env: LiarsDiceEnv, agent: str) -> dict[int, float]:
    """A truthful bidder: it bids only what its own dice show (at most as many of a face as it holds of that face
    or wild), the lowest such bid above the last one, and calls "liar" only when no such bid is left. It never
    bluffs and never doubts a bid it can still top truthfully; it reads no probabilities (the heuristic player does)."""
    dice = env.dice(agent)

    def backed(action: int) -> bool:
        count, face = env.bid(action)
        return count <= sum(1 for d in dice if d == face or d == env.sides)

    bids = [a for a in env.legal_actions(agent) if a != env.liar_action and backed(a)]
    # Before any bid, one of its own faces is always a backed bid, so "liar" only ever answers a bid.
    return _pick(min(bids)) if bids else _pick(env.liar_action)


TRUTHFUL: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "liars_dice": liars_dice_truthful,
}
"""Players that never bluff and never doubt while they can bid truthfully: a training opponent whose bids are true,
so calling "liar" on them loses (self-play and random bidders make false bids, which teaches the opposite). Not a
held-out player: the evaluation's heuristic player weighs probabilities instead."""


def tic_tac_toe_striker(env: TicTacToeEnv, agent: str) -> dict[int, float]:
    """Complete a line of its own when it can, else a uniformly random empty cell: it never blocks."""
    return _uniform(list(line_moves(env, agent).wins) or env.legal_actions(agent))


def connect_four_striker(env: ConnectFourEnv, agent: str) -> dict[int, float]:
    """Complete a line of its own when it can, else a uniformly random open column: it never blocks."""
    return _uniform(list(line_moves(env, agent).wins) or env.legal_actions(agent))


STRIKER: dict[str, Callable[[TextGameEnv, str], dict[int, float]]] = {
    "tic_tac_toe": tic_tac_toe_striker,
    "connect_four": connect_four_striker,
}
"""Players that take every win they are offered and otherwise play at random: a training opponent that punishes a
line left open (random players seldom do), so that the outcome teaches blocking. Not a held-out player: the
evaluation's heuristic player also blocks and takes the centre, and minimax plays perfectly."""


@dataclass(frozen=True)
class LineMoves:
    """The moves that finish a line, at one decision of tic-tac-toe or Connect Four."""

    wins: tuple[int, ...]
    """The mover's legal moves that complete a line of its own."""
    blocks: tuple[int, ...]
    """The mover's legal moves that take the cell where the opponent would complete a line."""


def line_moves(env: TextGameEnv, agent: str) -> LineMoves:
    """The winning and the blocking moves of `agent` (to move) in tic-tac-toe or Connect Four, in legal order."""
    if isinstance(env, TicTacToeEnv):
        grid = board_rows(env.pyspiel_state)
        landing, in_row = empty_cells(grid), 3
    elif isinstance(env, ConnectFourEnv):
        grid, landing, in_row = _drops(env)
    else:
        raise ValueError(f"line moves are for tic-tac-toe and Connect Four, not {type(env).__name__}")
    mine, theirs = _marks(env.pyspiel_state)
    return LineMoves(tuple(completing_moves(grid, landing, mine, in_row)),
                     tuple(completing_moves(grid, landing, theirs, in_row)))


def _pick(action: int) -> dict[int, float]:
    return {action: 1.0}


def _uniform(actions: list[int]) -> dict[int, float]:
    return dict.fromkeys(actions, 1.0 / len(actions))


def _at_least(needed: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= needed)."""
    if needed <= 0:
        return 1.0
    return sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(needed, n + 1))


def _marks(state: pyspiel.State) -> tuple[str, str]:
    """(mark of the player to move, mark of the other player)."""
    return ("x", "o") if state.current_player() == 0 else ("o", "x")


def _drops(env: ConnectFourEnv) -> tuple[list[list[str]], dict[int, tuple[int, int]], int]:
    """Connect Four's board as rows, where a piece dropped in each open column (the legal moves, in order) lands
    ((row, column), the lowest empty cell), and the line length that wins."""
    grid = board_rows(env.pyspiel_state)
    return grid, drop_cells(grid), env.pyspiel_state.get_game().get_parameters()["x_in_row"]


def _sets_up(
    grid: list[list[str]], cell: tuple[int, int], mine: str, theirs: str, length: int
) -> bool:
    """Whether playing `cell` lets the opponent complete a line in the cell just above it."""
    row, col = cell
    if row == 0:
        return False
    grid[row][col] = mine
    try:
        return completes_line(grid, row - 1, col, theirs, length)
    finally:
        grid[row][col] = "."
