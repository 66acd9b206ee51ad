"""experiments/can_the_model_read_its_game/perception_probes.py: each probe's figure on values computed apart from it
(fake scorers and responses with known answers, a random-weights model near its uniform baseline)."""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import games
from games import heuristics
from games.opponents import uniform_policy
from games.posterior import posterior
from strat.algorithm.reasoning import DEPTH_SECTIONS, parse_response
from strat.engines import build_engine
from strat.model import tiny
from strat.train.warmstart import FIRST_NAMED_IN, templated_response

from .conftest import experiment_module


@pytest.fixture(scope="module")
def probes():
    yield from experiment_module("perception_probes")


def _messages_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(message["content"] for message in messages)


def _uniform(messages, prefix: str, names: Sequence[str], space: bool) -> dict[str, float]:
    return dict.fromkeys(names, 1 / len(names))


# --- shared pieces ----------------------------------------------------------------------------------------------------


def test_t_interval_against_the_t_quantile(probes) -> None:
    interval = probes.t_interval([1.0, 2.0, 3.0])
    # mean 2, sd 1, n 3: half-width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051
    assert (interval.mean, interval.n) == (2.0, 3)
    assert interval.high - 2.0 == pytest.approx(4.302653 / 3**0.5, abs=1e-5)
    assert probes.t_interval([0.5, 0.5]).low == probes.t_interval([0.5, 0.5]).high == 0.5


def test_verdict_needs_the_whole_interval_on_the_bars_side(probes) -> None:
    interval = probes.Interval(0.04, 0.0, 0.08, 10)
    assert probes.verdict(interval, 0.05, at_least=False).startswith("undecided")
    assert probes.verdict(interval, 0.10, at_least=False) == "met"
    assert probes.verdict(interval, 0.02, at_least=True).startswith("undecided")
    assert probes.verdict(interval, 0.0, at_least=True) == "met"
    assert probes.verdict(interval, 0.09, at_least=True) == "not met"


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_first_mention_is_where_the_template_chooses_its_move(probes, depth: int) -> None:
    env = games.make("connect_four")
    env.reset(seed=0)
    env.step(2)  # the opponent's "column 3": named in <past>, before the policy's own column 3
    env.step(3)
    agent = env.agent_selection
    response = templated_response(env, agent, 2, depth, random.Random(0))
    prefix, space = probes.first_mention(response, "column 3", depth)
    assert space and response.startswith(prefix + " column 3")
    section = FIRST_NAMED_IN[depth]
    assert f"<{section}>" in prefix and f"</{section}>" not in prefix
    assert "<action>" not in prefix
    if depth == 2:
        assert prefix.endswith("My")  # "My column 3 tells them something"
    else:
        assert re.search(r"(I will play|My move is|I choose)$", prefix)


# --- board games ------------------------------------------------------------------------------------------------------


def test_board_decisions_have_an_illegal_move(probes) -> None:
    for game in ("tic_tac_toe", "connect_four"):
        envs = list(probes.board_decisions(game, 3, seed=0))
        assert len(envs) == 3
        for env in envs:
            assert not env.pyspiel_state.is_terminal()
            assert len(env.legal_actions(env.agent_selection)) < len(env.all_action_names())


def test_legal_mass_of_fake_scorers(probes) -> None:
    def legal_only(messages, prefix, names, space):
        # The board in the prompt: an empty cell is "." in the row of its number.
        board = {line[0]: line.split()[1:] for line in _messages_text(messages).splitlines()
                 if re.fullmatch(r"[123] [.XO] [.XO] [.XO]", line)}
        legal = [name for name in names if board[name[1]]["abc".index(name[0])] == "."]
        return {name: (1 / len(legal) if name in legal else 0.0) for name in names}

    result = probes.legal_mass(legal_only, "tic_tac_toe", states=4, seed=0, depth=2)
    assert result.share.mean == pytest.approx(1.0)
    uniform = probes.legal_mass(_uniform, "tic_tac_toe", states=4, seed=0, depth=2)
    assert uniform.share.mean == pytest.approx(uniform.legal_fraction)
    assert 0.0 < uniform.legal_fraction < 1.0


def test_a_random_model_puts_about_the_legal_fraction_on_legal_cells(probes, tmp_path: Path) -> None:
    model_dir = tiny.build("tic_tac_toe", tmp_path / "ttt", seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).eval()
    scorer = probes.model_scorer(model, AutoTokenizer.from_pretrained(model_dir))
    result = probes.legal_mass(scorer, "tic_tac_toe", states=6, seed=0, depth=1)
    assert result.share.n == 6
    assert result.share.low <= result.share.mean <= result.share.high
    # Random weights: logits near zero, every cell about equally likely.
    assert result.share.mean == pytest.approx(result.legal_fraction, abs=0.1)


TTT_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def _completes(board: str, cell: int, mark: str) -> bool:
    """Whether `mark` at the empty `cell` of a tic-tac-toe `board` (nine of "x", "o", ".") makes three in a line."""
    return board[cell] == "." and any(cell in line and all(board[c] == mark for c in line if c != cell)
                                      for line in TTT_LINES)


def _board(env) -> str:
    return str(env.pyspiel_state).replace("\n", "")


def _mover_marks(env) -> tuple[str, str]:
    return ("x", "o") if env.pyspiel_state.current_player() == 0 else ("o", "x")


@pytest.mark.parametrize("kind", ["win", "block"])
def test_tactics_of_fake_players(probes, kind: str) -> None:
    """At each drawn decision of the kind (checked against the eight lines by hand), a fake policy that writes the
    heuristic player's move hits every time; one that writes the first empty cell hits where that cell wins (or
    blocks), which the test counts itself; one that names an occupied cell plays no legal move and misses."""
    decisions = list(probes.board_decisions("tic_tac_toe", 12, 3, where=lambda env: probes.tactic_kind(env) == kind))
    first_empty_hits = []
    for env in decisions:
        board, (mine, theirs) = _board(env), _mover_marks(env)
        wins = [c for c in range(9) if _completes(board, c, mine)]
        blocks = [c for c in range(9) if _completes(board, c, theirs)]
        assert (wins if kind == "win" else blocks) and (kind == "win" or not wins)
        first_empty_hits.append(float(board.index(".") in (wins if kind == "win" else blocks)))

    def writing(choose):
        envs = iter(decisions)

        def generate(batch):
            return [f"<past>x</past><their_view>x</their_view><plan>x</plan><predict>a1</predict>"
                    f"<action>{choose(next(envs))}</action>" for _ in batch]
        return generate

    def heuristic_move(env) -> str:
        probs = heuristics.tic_tac_toe(env, env.agent_selection)
        return env.action_name(max(probs, key=probs.get))

    def first_empty(env) -> str:
        return env.action_name(_board(env).index("."))

    def occupied(env) -> str:
        return env.action_name(next(c for c, mark in enumerate(_board(env)) if mark != "."))

    for choose, hit, valid in ((heuristic_move, 1.0, 1.0), (first_empty, statistics.fmean(first_empty_hits), 1.0),
                               (occupied, 0.0, 0.0)):
        result = probes.tactics(writing(choose), "tic_tac_toe", kind, 12, seed=3, depth=2, batch=5)
        assert (result.kind, result.hit.n) == (kind, 12)
        assert result.hit.mean == pytest.approx(hit) and result.valid == valid
    assert 0.0 < result.chance < 1.0
    with pytest.raises(ValueError, match="tactic kind"):
        probes.tactics(writing(occupied), "tic_tac_toe", "fork", 1)


def test_the_tactics_command_prints_both_kinds(probes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--tactics` on a random-weights tiny model: one line per kind with its decisions, its share and the chance
    of a random legal move; a game without lines is refused in one line."""
    model_dir = tiny.build("tic_tac_toe", tmp_path / "ttt", seed=0)
    config = Path(__file__).resolve().parents[2] / "configs" / "tic_tac_toe_tiny.yaml"
    monkeypatch.setattr("sys.argv", ["perception_probes.py", "--config", str(config), "--model", str(model_dir),
                                     "--states", "2", "--tactics", "reasoning.max_new_tokens=16"])
    probes.main()
    out = capsys.readouterr().out
    assert re.search(r"^win: 2 decisions, takes a win: [\d.]+ .*a random legal move: 0\.\d{3}", out, re.M)
    assert re.search(r"^block: 2 decisions, blocks the opponent's line: [\d.]+ ", out, re.M)
    kuhn = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"
    monkeypatch.setattr("sys.argv", ["perception_probes.py", "--config", str(kuhn), "--tactics"])
    with pytest.raises(SystemExit):
        probes.main()
    assert "--tactics is for the board games" in capsys.readouterr().err


# --- liar's dice ------------------------------------------------------------------------------------------------------


def test_opening_bias_of_fake_scorers(probes) -> None:
    def own_face(messages, prefix, names, space):
        face = int(re.search(r"Your die shows (\d)", _messages_text(messages)).group(1))
        mine = [name for name in names if name.startswith("bid 1 ") and name != "liar"][face - 1]
        return {name: float(name == mine) for name in names}

    result = probes.opening_bias(own_face, states=8, seed=0, depth=2)
    assert (result.margin.mean, result.own, result.other) == (1.0, 1.0, 0.0)
    assert result.margin.n == 8 and all(margin == 1.0 for margin in result.by_face.values())
    uniform = probes.opening_bias(_uniform, states=8, seed=0, depth=1)
    assert uniform.margin.mean == pytest.approx(0.0, abs=1e-12)
    assert uniform.own == pytest.approx(2 / 12)  # bids of one face: "bid 1 f" and "bid 2 fs" of the 12 bids


def test_raise_by_card_of_fake_scorers(probes) -> None:
    def raise_a_king(messages, prefix, names, space):
        king = "You hold a King" in _messages_text(messages)
        return {name: float((name == "raise") == king) for name in names}

    result = probes.raise_by_card(raise_a_king, states=6, seed=0, depth=2)
    assert result.margin.n == 6 and result.margin.mean == 1.0
    assert result.by_card == {"Jack": 0.0, "Queen": 0.0, "King": 1.0}
    uniform = probes.raise_by_card(_uniform, states=4, seed=0, depth=1)
    assert uniform.margin.mean == 0.0 and uniform.by_card == {"Jack": 0.5, "Queen": 0.5, "King": 0.5}
    for card in range(3):
        env = probes.first_decision(card)
        agent = env.agent_selection
        assert env.card(agent) == card and env.legal_action_names(agent) == ["call", "raise"]


def test_face_probabilities_and_margin(probes) -> None:
    env = games.make("liars_dice")
    env.reset(seed=0)
    faces = probes.face_probabilities(env, {"bid 1 three": 0.25, "bid 2 threes": 0.25, "bid 1 five": 0.5})
    assert faces == {1: 0.0, 2: 0.0, 3: 0.5, 4: 0.0, 5: 0.5, 6: 0.0}
    margin, own, other = probes.own_face_margin(faces, [3])
    assert (own, other) == (0.5, pytest.approx(0.1)) and margin == pytest.approx(0.4)


# --- Kuhn and Leduc poker ---------------------------------------------------------------------------------------------


def _kuhn_opening(card: int):
    """Kuhn poker at player 0's first decision holding `card` (0 Jack, 1 Queen, 2 King), player 1 holding the next."""
    env = games.make("kuhn_poker")
    env.reset(seed=0)
    state = env.pyspiel_state.get_game().new_initial_state()
    state.apply_action(card)
    state.apply_action((card + 1) % 3)
    env.load_state(state)
    return env


def test_belief_regret_on_hand_made_responses(probes) -> None:
    env = _kuhn_opening(0)  # Jack; against a uniform opponent: Queen and King each 0.5
    found = posterior(env, "player_0", "player_1", uniform_policy)
    assert dict(found.probabilities) == pytest.approx({"queen": 0.5, "king": 0.5})
    extract = games.belief_values("kuhn_poker")
    assert probes.belief_regret("Nothing yet.\nbelief: Queen", found, extract) == pytest.approx(0.0)
    assert probes.belief_regret("Nothing yet.\nbelief: Jack", found, extract) == pytest.approx(0.5)
    assert probes.belief_regret("Nothing yet.\nbelief: Queen or King", found, extract) == pytest.approx(0.0)
    assert probes.belief_regret("Nothing yet.", found, extract) == pytest.approx(0.5)
    assert probes.belief_regret(None, found, extract) == pytest.approx(0.5)
    assert not probes.readable("Nothing yet.", extract) and probes.readable("belief: King", extract)


def _naming(choose):
    """A fake policy whose <past> names the card `choose(own card)` and which always passes."""
    ranks = ("Jack", "Queen", "King")

    def generate(batch):
        out = []
        for messages in batch:
            own = re.search(r"Your private information: (\w+)", messages[1]["content"]).group(1)
            out.append(f"<past>belief: {choose(own, ranks)}</past>\n<plan>p</plan>\n<predict>bet</predict>\n"
                       "<action>pass</action>")
        return out

    return generate


def test_read_beliefs_against_a_random_opponent(probes) -> None:
    # A uniform opponent's moves say nothing: the posterior is 0.5/0.5 on the two other cards at every decision.
    other = probes.read_beliefs(_naming(lambda own, ranks: next(r for r in ranks if r != own)),
                                "kuhn_poker", depth=1, episodes=6)
    assert other.regret.mean == pytest.approx(0.0) and other.unreadable == 0.0
    assert other.best == pytest.approx(0.5) and other.regret.n >= 6 and other.opponent == "random"
    own = probes.read_beliefs(_naming(lambda own, ranks: own), "kuhn_poker", depth=1, episodes=6)
    assert own.regret.mean == pytest.approx(0.5) and own.unreadable == 0.0
    with pytest.raises(ValueError, match="no <past>"):
        probes.read_beliefs(_naming(lambda own, ranks: own), "kuhn_poker", depth=0, episodes=1)


def test_an_unreadable_belief_in_leduc_costs_the_most_likely_value(probes) -> None:
    def vague(batch):
        return ["<past>belief: no idea</past>\n<their_view>v</their_view>\n<plan>p</plan>\n<predict>call</predict>\n"
                "<action>call</action>" for _ in batch]

    result = probes.read_beliefs(vague, "leduc_poker", depth=2, episodes=4, opponent="heuristic")
    assert 0.0 < result.regret.mean <= result.best <= 1.0
    assert result.unreadable == 1.0 and result.regret.mean == pytest.approx(result.best)


def test_read_beliefs_with_the_hf_engine(probes, tiny_model_dir: Path) -> None:
    engine = build_engine("hf", tiny_model_dir)
    try:
        generate = probes.engine_generate(engine, max_tokens=24, seed=0)
        result = probes.read_beliefs(generate, "kuhn_poker", depth=1, episodes=2)
    finally:
        engine.close()
    assert result.regret.n >= 2 and 0.0 <= result.regret.mean <= result.best
    # Random weights write no belief line in 24 tokens.
    assert result.unreadable == 1.0 and "past" in DEPTH_SECTIONS[1]
    assert parse_response("", 1).sections.past is None


def test_the_templated_beliefs_reach_the_posterior(probes) -> None:
    # Kuhn against random: the posterior is 1/2 on each card one does not hold, and the template never names one's
    # own card, so its regret is 0 at every decision.
    kuhn = probes.belief_games(probes.template_respond("timid", "kuhn_poker", depth=1), "kuhn_poker", depth=1,
                               episodes=20)
    assert kuhn.regret.mean == pytest.approx(0.0) and kuhn.regret.n >= 20 and kuhn.unreadable == 0.0
    # Leduc against the heuristic player, whose moves are certain given its card: under the template's model (half
    # that rule, half uniform) every card consistent with the moves has the same likelihood, and an inconsistent one
    # at most u / (1 + u) <= 1/3 of it (u: a uniform move's probability); no rank has more than two cards left, so the
    # likeliest card is a consistent one of the most copies left: the heuristic posterior's mode, regret 0.
    leduc = probes.belief_games(probes.template_respond("contrarian", "leduc_poker", depth=2), "leduc_poker", depth=2,
                                episodes=20, opponent="heuristic")
    assert leduc.regret.mean == pytest.approx(0.0, abs=1e-9) and leduc.best > 0.5
