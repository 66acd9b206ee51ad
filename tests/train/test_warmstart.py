"""The warm start: templated transcripts that are well-formed, faithful to the move and blind to hidden truth; a short
SFT whose loss covers only response tokens and that teaches the format (not the strategy); the cached copy."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

import games
import games.opponents
from games.cards import card_values
from strat.algorithm.comparison import belief_text
from strat.algorithm.reasoning import BELIEF_MARKER, parse_response
from strat.model.tiny import cache_dir
from strat.train import supervised, warmstart
from strat.train.supervised import IGNORE_INDEX, collate, encode_example
from strat.train.warmstart import (
    WarmStartSettings,
    ensure_warm,
    format_check,
    format_validity,
    templated_response,
    transcripts,
    warm_start,
)

GAME, DEPTH = "kuhn_poker", 2
# 400 games and two epochs, not the default 800 and three: a cheap schedule that passes the format test with margin
# (validity 0.958 at the test's seed, 0.959 at another; 73 s on 2 idle cores, 800 games took ~125 s for the same
# 0.96), and the same settings as the shared `warm_model_dir` fixture and the loop tests' warm start, so the suite
# builds one warm model.
SETTINGS = WarmStartSettings(depth=DEPTH, epochs=2, episodes=400, max_seconds=3600)


@dataclass(frozen=True)
class Move:
    """What a scripted player saw and did at one decision."""

    legal: tuple[str, ...]
    action: str
    hidden: dict[str, str]
    """The other agents' true private information at that moment."""


def _recorded_transcripts(monkeypatch: pytest.MonkeyPatch, game: str, depth: int, episodes: int):
    """transcripts() with every scripted player's decisions recorded, in the order they were made."""
    moves: list[Move] = []
    make = games.opponents.make_opponent

    class Recording:
        def __init__(self, inner) -> None:
            self.inner = inner

        def act(self, env, agent):
            action = self.inner.act(env, agent)
            hidden = {other: env.private_info(other) for other in env.possible_agents if other != agent}
            moves.append(Move(tuple(env.legal_action_names(agent)), env.action_name(action, agent), hidden))
            return action

    monkeypatch.setattr(warmstart, "make_opponent", lambda *a, **k: Recording(make(*a, **k)))
    examples = transcripts(game, depth, episodes, seed=7)
    assert len(examples) == len(moves)
    return examples, moves


# --- transcripts ---------------------------------------------------------------------------------------------------


def test_transcripts_are_deterministic_for_a_seed() -> None:
    first = transcripts(GAME, DEPTH, 20, seed=3)
    assert transcripts(GAME, DEPTH, 20, seed=3) == first
    assert transcripts(GAME, DEPTH, 20, seed=4) != first
    # Phrasing varies with the turn and the guesses with the seed, so responses are not one string per move.
    assert len({response for _, response in first}) > len(first) // 3


@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("game", games.names())
def test_every_response_parses_and_names_the_move_played(
    monkeypatch: pytest.MonkeyPatch, game: str, depth: int
) -> None:
    examples, moves = _recorded_transcripts(monkeypatch, game, depth, episodes=3)
    env = games.make(game)
    for (messages, response), move in zip(examples, moves):
        assert [m["role"] for m in messages] == ["system", "user"]
        parsed = parse_response(response, depth)
        assert parsed.format_valid, response
        assert parsed.sections.action == move.action and move.action in move.legal
        if depth >= 1:
            assert parsed.sections.predict == "none" or parsed.sections.predict in env.all_action_names()
            assert (BELIEF_MARKER in parsed.sections.past) == (not env.spec.perfect_information)


def test_the_belief_does_not_know_the_hidden_card_better_than_chance(monkeypatch: pytest.MonkeyPatch) -> None:
    examples, moves = _recorded_transcripts(monkeypatch, GAME, DEPTH, episodes=300)
    hits = []
    for (_, response), move in zip(examples, moves):
        past = parse_response(response, DEPTH).sections.past
        (opponent_card,) = move.hidden.values()
        assert len(card_values(belief_text(past))) == 1
        hits.append(opponent_card.lower() in past.lower())
    # The opponent holds one of the two cards we do not: a guess blind to it is right half the time.
    assert 0.4 <= sum(hits) / len(hits) <= 0.6


def test_a_readers_move_follows_the_belief_written_before_it() -> None:
    # The reader believes either card it does not hold at even chance and bets (or calls) half the time when its own
    # card beats the belief, one time in twenty otherwise: with the Queen, its bets depend on the belief it wrote.
    examples = transcripts(GAME, 1, 600, seed=0, player="reader")
    bets: dict[str, list[bool]] = {"jack": [], "king": []}
    for messages, response in examples:
        sections = parse_response(response, 1).sections
        (believed,) = card_values(belief_text(sections.past))
        own = re.search(r"You hold the (\w+)", messages[-1]["content"]).group(1).lower()
        assert believed != own
        # The belief is restated right before the move is named, as one's own card is.
        assert f"I take them for the {believed.capitalize()}. " in sections.plan
        if own == "queen":
            bets[believed].append(sections.action == "bet")
    assert min(len(v) for v in bets.values()) > 150
    assert sum(bets["jack"]) / len(bets["jack"]) == pytest.approx(0.5, abs=0.1)
    assert sum(bets["king"]) / len(bets["king"]) == pytest.approx(0.05, abs=0.04)
    with pytest.raises(ValueError, match="not available"):
        warmstart.warm_start_examples(GAME, WarmStartSettings(player="reader", episodes=1,
                                                              game_options=(("players", 3),)))


def _env_at(game: str, chance_and_moves: list[int]) -> games.TextGameEnv:
    env = games.make(game)
    state = env.pyspiel_state.get_game().new_initial_state()
    for action in chance_and_moves:
        state.apply_action(action)
    env.load_state(state)
    return env


# (game, deal A, deal B, moves): the deals differ only in player_0's private information; player_1 is to act.
HIDDEN_CASES = [
    ("kuhn_poker", [0, 1], [2, 1], [1]),  # player_0 holds the Jack or the King and bets
    ("kuhn_poker", [0, 1], [2, 1], [0]),
    ("leduc_poker", [0, 2], [4, 2], [2]),  # Jack or King against our Queen; player_0 raises
    ("liars_dice", [0, 2], [5, 2], [3]),  # a one or a six against our three; player_0 bids "1 four"
    ("bargaining", [1], [3], [5]),  # two instances with the same pool and player_1 values
]


@pytest.mark.parametrize(("game", "deal_a", "deal_b", "moves"), HIDDEN_CASES)
@pytest.mark.parametrize("depth", [0, 1, 2])
def test_responses_are_the_same_whatever_the_opponent_holds(
    game: str, deal_a: list[int], deal_b: list[int], moves: list[int], depth: int
) -> None:
    env_a, env_b = _env_at(game, deal_a + moves), _env_at(game, deal_b + moves)
    assert env_a.agent_selection == env_b.agent_selection == "player_1"
    assert env_a.private_info("player_0") != env_b.private_info("player_0")
    assert env_a.private_info("player_1") == env_b.private_info("player_1")
    for action in env_a.legal_actions():
        for seed in range(5):
            a = templated_response(env_a, "player_1", action, depth, random.Random(seed))
            assert templated_response(env_b, "player_1", action, depth, random.Random(seed)) == a


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker", "liars_dice", "bargaining"])
def test_own_private_information_is_restated_right_before_the_move(game: str, depth: int) -> None:
    """The section that first names the move opens with the player's own private information and the others'
    latest move, so that the move can depend on both at a short distance; and the phrasing is a function of what
    the player sees (only the guesses about others are drawn), so a response has no free choices beyond the move
    and the guesses."""
    rng = random.Random(0)
    env = games.make(game)
    checked = 0
    for episode in range(5):
        env.reset(seed=episode)
        while not env.pyspiel_state.is_terminal():
            agent = env.agent_selection
            action = rng.choice(env.legal_actions(agent))
            sections = parse_response(templated_response(env, agent, action, depth, random.Random(1)), depth).sections
            first = sections.their_view if depth == 2 else sections.plan
            own = f"My private information: {env.private_info(agent)}. "
            seen = [line for line in env.history_text(agent).splitlines() if line and not line.startswith("You ")]
            latest = ("My" + seen[-1][4:] if seen[-1].startswith("Your ") else seen[-1]) if seen else "No one has moved yet."
            assert first.startswith(own + latest + " "), first
            assert env.action_name(action, agent) in first
            other_seed = parse_response(templated_response(env, agent, action, depth, random.Random(2)), depth).sections
            assert other_seed.plan == sections.plan and other_seed.their_view == sections.their_view
            env.step(action)
            checked += 1
    assert checked >= 5


def test_only_weak_players_are_imitated() -> None:
    with pytest.raises(ValueError, match="equilibrium"):
        transcripts(GAME, DEPTH, 1, seed=0, player="equilibrium")
    with pytest.raises(ValueError, match="minimax"):
        WarmStartSettings(player="minimax")


# --- the supervised loss -------------------------------------------------------------------------------------------


def test_labels_cover_exactly_the_response_and_end_of_turn(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    (messages, response), *_ = transcripts(GAME, DEPTH, 1, seed=0)
    ids, labels = encode_example(tokenizer, messages, response)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    assert ids[: len(prompt)] == list(prompt)
    assert labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert labels[len(prompt) :] == ids[len(prompt) :]
    assert IGNORE_INDEX not in labels[len(prompt) :]
    assert labels[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    assert tokenizer.decode(labels[len(prompt) : -1]) == response


def test_loss_is_cross_entropy_on_response_tokens_only(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    encoded = [encode_example(tokenizer, m, r) for m, r in transcripts(GAME, DEPTH, 3, seed=1)[:4]]
    batch = collate(encoded, tokenizer.pad_token_id)
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    # Reference: a plain forward pass per example, scored at the response positions found from the prompt length.
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in encoded:
            start = labels.count(IGNORE_INDEX)
            logits = model(torch.tensor([ids])).logits[0]
            target = torch.tensor(ids[start:])
            total += F.cross_entropy(logits[start - 1 : -1], target, reduction="sum").item()
            count += len(target)
        loss = supervised.response_loss(model, batch)
    assert supervised.shared_prefix(batch) > 100  # the system prompt is encoded once for the batch
    assert loss.item() == pytest.approx(total / count, rel=1e-4)


def test_the_context_loss_adds_each_examples_mean_loss_over_its_prompt(tiny_model_dir: Path) -> None:
    """`warm_start.context_loss`: the response's loss plus the weight times the mean over examples of each one's mean
    next-token loss over its whole prompt, checked against a plain forward pass per example; none of the prompt is
    then cached, so a batch of one has a context loss too."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    encoded = [encode_example(tokenizer, m, r) for m, r in transcripts(GAME, DEPTH, 3, seed=1)[:3]]
    batch = collate(encoded, tokenizer.pad_token_id)
    assert (batch["context_labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    response_total, response_count, context_means = 0.0, 0, []
    with torch.no_grad():
        for ids, labels in encoded:
            start = labels.count(IGNORE_INDEX)
            logits = model(torch.tensor([ids])).logits[0]
            response_total += F.cross_entropy(logits[start - 1 : -1], torch.tensor(ids[start:]), reduction="sum").item()
            response_count += len(ids) - start
            context_means.append(F.cross_entropy(logits[: start - 1], torch.tensor(ids[1:start])).item())
        plain = supervised.response_loss(model, batch)
        dense = supervised.response_loss(model, batch, context_loss=0.5)
        alone = supervised.response_loss(model, collate(encoded[:1], tokenizer.pad_token_id), context_loss=0.5)
    expected = response_total / response_count + 0.5 * sum(context_means) / len(context_means)
    assert dense.item() == pytest.approx(expected, rel=1e-4)
    assert plain.item() == pytest.approx(response_total / response_count, rel=1e-4)
    first = encoded[0][1].count(IGNORE_INDEX)
    first_response = len(encoded[0][0]) - first
    with torch.no_grad():
        logits = model(torch.tensor([encoded[0][0]])).logits[0]
        one = F.cross_entropy(logits[first - 1 : -1], torch.tensor(encoded[0][0][first:])).item()
    assert first_response > 0 and alone.item() == pytest.approx(one + 0.5 * context_means[0], rel=1e-4)
    with pytest.raises(ValueError, match="context_loss"):
        WarmStartSettings(context_loss=-1.0)


def test_warm_start_writes_a_loadable_model_atomically(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "warm"
    figures = warm_start(tiny_model_dir, out, GAME, WarmStartSettings(episodes=6, epochs=1, batch_size=4, lr=1e-2))
    assert figures["examples"] >= 6 and figures["steps"] == -(-figures["examples"] // 4)
    assert figures["final_loss"] < figures["first_loss"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "strat_warm.json"} <= {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["warm"]  # no staging folder left behind
    trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.equal(trained[name], base[name]) for name in base)


def test_warm_start_threads_are_given_back() -> None:
    # A fresh process, as `strat train` and `strat sft` are: an in-process vLLM engine elsewhere in the suite pins
    # the OpenMP threads of this one.
    code = ("from strat.process_env import apply_defaults; apply_defaults()\n"
            "import torch; from strat.train import supervised\n"
            "with supervised.training_threads(): print(torch.get_num_threads())\n"
            "print(torch.get_num_threads())")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(min(len(os.sched_getaffinity(0)), 2)), "1"]


# --- the warm start works, and is cached -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warm_model(tiny_model_dir: Path) -> Path:
    """The tiny Kuhn poker model warm-started with SETTINGS (about a minute on 2 idle cores)."""
    return ensure_warm(tiny_model_dir, GAME, SETTINGS)


def test_random_weights_do_not_follow_the_format(tiny_model_dir: Path) -> None:
    assert format_validity(tiny_model_dir, GAME, DEPTH, episodes=4, seed=0) <= 0.1


def test_warm_start_teaches_the_format_not_a_strategy(warm_model: Path) -> None:
    check = format_check(warm_model, GAME, DEPTH, episodes=64, seed=0)
    assert check.decisions >= 64
    assert check.validity >= 0.9
    # Random play in the transcripts: the policy bets about as often as it passes.
    assert 0.3 <= check.action_counts["bet"] / sum(check.action_counts.values()) <= 0.7


def test_ensure_warm_reuses_the_cached_copy(
    warm_model: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mtime = (warm_model / "model.safetensors").stat().st_mtime_ns

    def no_training(*args: object) -> dict[str, float]:
        raise AssertionError("a cache hit must not train")

    monkeypatch.setattr(warmstart, "_train", no_training)
    assert ensure_warm(tiny_model_dir, GAME, SETTINGS) == warm_model
    assert (warm_model / "model.safetensors").stat().st_mtime_ns == mtime


def test_ensure_warm_keys_by_weights_settings_and_transcripts(tiny_model_dir: Path, other_model_dir: Path) -> None:
    settings = WarmStartSettings(episodes=3, depth=1)
    examples = transcripts(GAME, 1, 3, seed=0)
    key = warmstart._cache_key(tiny_model_dir, GAME, settings, examples)
    assert key == warmstart._cache_key(tiny_model_dir, GAME, settings, transcripts(GAME, 1, 3, seed=0))
    assert key != warmstart._cache_key(other_model_dir, GAME, settings, examples)
    assert key != warmstart._cache_key(tiny_model_dir, GAME, WarmStartSettings(episodes=3, depth=1, lr=1e-3), examples)
    assert key != warmstart._cache_key(tiny_model_dir, GAME, settings, examples[:-1])
    # A time limit or a rate written as an int is the same warm start as the config's float: one build, not two.
    assert key == warmstart._cache_key(tiny_model_dir, GAME, replace(settings, max_seconds=300), examples)
    assert key != warmstart._cache_key(tiny_model_dir, GAME, replace(settings, max_seconds=301), examples)
    assert warmstart._cache_key(tiny_model_dir, GAME, replace(settings, lr=1), examples) == warmstart._cache_key(
        tiny_model_dir, GAME, replace(settings, lr=1.0), examples)


def test_ensure_warm_keys_by_architecture_when_the_weights_are_identical(tiny_model_dir: Path, tmp_path: Path) -> None:
    # 2 heads of 64 and 4 heads of 32 have the same tensors: only config.json tells the two models apart.
    settings = WarmStartSettings(episodes=3, depth=1)
    examples = transcripts(GAME, 1, 3, seed=0)
    other = tmp_path / "four_heads"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["num_attention_heads"] *= 2
    config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    (other / "config.json").write_text(json.dumps(config))
    assert warmstart._cache_key(tiny_model_dir, GAME, settings, examples) != warmstart._cache_key(
        other, GAME, settings, examples
    )


def test_ensure_warm_uses_the_copy_of_a_process_that_finished_first(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRAT_CACHE_DIR", str(tmp_path))  # its stand-in copy must not reach a shared cache
    settings = WarmStartSettings(episodes=3, depth=1)
    key = warmstart._cache_key(tiny_model_dir, GAME, settings, transcripts(GAME, 1, 3, seed=0))
    target = cache_dir() / "warm" / f"{GAME}-{key}"
    staged: list[Path] = []

    def racing_train(model_dir: Path, out_dir: Path, *args: object) -> dict[str, float]:
        # Another process publishes its copy while this one trains, so this one's rename fails.
        for folder in (target, out_dir):
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{}")
        staged.append(out_dir)
        return {}

    monkeypatch.setattr(warmstart, "_train", racing_train)
    assert ensure_warm(tiny_model_dir, GAME, settings) == target
    assert len(staged) == 1 and not staged[0].exists()
    # No staging folder left behind (the build lock, `.<name>.lock`, is a file and stays).
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_a_warm_start_cut_short_is_not_cached(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """A warm start stopped by its max_seconds guard serves the run that trained it, but the next run with the same
    settings trains again rather than reusing a half-trained model."""
    monkeypatch.setenv("STRAT_CACHE_DIR", str(tmp_path / "cache"))
    settings = WarmStartSettings(episodes=6, epochs=50, batch_size=1, max_seconds=0.5)
    with pytest.warns(UserWarning, match="stopped after"):
        first = ensure_warm(tiny_model_dir, GAME, settings)
    assert warmstart.stopped_early(first) and "stopped-early" in first.name
    assert list(first.glob("*.safetensors"))
    assert not list((tmp_path / "cache" / "warm").glob(f"{GAME}-????????????????"))  # nothing left in the cache
    with pytest.warns(UserWarning, match="stopped after"):
        second = ensure_warm(tiny_model_dir, GAME, settings)
    assert second != first and first.is_dir()


def test_a_warm_start_logs_its_size_and_progress(tiny_model_dir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A user waiting on a long warm start sees how many steps it has and where it is, with the time left."""
    monkeypatch.setattr(supervised, "PROGRESS_EVERY_S", 0.0)  # a line after every step
    with caplog.at_level(logging.INFO, logger="strat.supervised"):
        figures = warm_start(tiny_model_dir, tmp_path / "warm", GAME,
                             WarmStartSettings(episodes=6, epochs=2, batch_size=4, lr=1e-2))
    lines = [record.getMessage() for record in caplog.records if record.name == "strat.supervised"]
    steps = int(figures["steps"])
    assert lines[0] == (f"warm start of {GAME}: {int(figures['examples'])} examples x 2 epoch(s) = {steps} steps "
                        "(stopped after warm_start.max_seconds=300 s)")
    progress = [line for line in lines[1:] if ", loss " in line]
    assert [line.split(", loss")[0] for line in progress] == [
        f"warm start of {GAME}: step {k} of {steps}" for k in range(1, steps + 1)]
    assert progress[-1].endswith("~0 min left")


def test_rules_examples_are_mixed_into_the_warm_start_and_keep_old_keys(tiny_model_dir: Path) -> None:
    """`rules_examples` adds that many rules-corpus examples (a corpus of its own seed) after the transcripts; at 0
    the examples and the cache key are what they were before the setting existed."""
    from dataclasses import asdict

    from strat.train import supervised
    from strat.train.pretrain import PretrainSettings, pretrain_examples
    from strat.train.warmstart import WARM_VERSION, WarmStartSettings, _cache_key, transcripts, warm_start_examples

    plain = WarmStartSettings(episodes=5, depth=1)
    base = transcripts("tic_tac_toe", 1, 5, 0)
    assert warm_start_examples("tic_tac_toe", plain) == base
    mixed = warm_start_examples("tic_tac_toe", WarmStartSettings(episodes=5, depth=1, rules_examples=12))
    assert mixed[: len(base)] == base
    assert mixed[len(base):] == pretrain_examples("tic_tac_toe", PretrainSettings(examples=12, seed=1))
    fields = {k: v for k, v in asdict(plain).items()
              if k not in ("game_options", "rules_examples", "name_legal_moves", "move_examples", "context_loss",
                            "move_target", "move_points")}
    before = supervised.cache_key(tiny_model_dir, {"version": WARM_VERSION, "game": "tic_tac_toe", "settings": fields,
                                                   "transcripts": supervised.examples_hash(base)})
    assert _cache_key(tiny_model_dir, "tic_tac_toe", plain, base) == before
    dense = WarmStartSettings(episodes=5, depth=1, context_loss=1.0)  # the context's loss trains another model
    assert _cache_key(tiny_model_dir, "tic_tac_toe", dense, base) != before


@pytest.mark.parametrize("game", ["tic_tac_toe", "connect_four"])
def test_name_legal_moves_lists_the_legal_moves_right_before_the_move_is_chosen(game: str) -> None:
    """`warm_start.name_legal_moves`: each templated `<past>` ends with the moves the prompt lists as legal, in its
    order; the rest of the response, and the move it plays, are the template's as before."""
    from strat.train.warmstart import LEGAL_LEAD, warm_start_examples

    listed = transcripts(game, 1, 3, 0, name_legal=True)
    plain = transcripts(game, 1, 3, 0)
    assert len(listed) == len(plain) > 5
    for (messages, response), (same_messages, before) in zip(listed, plain, strict=True):
        assert messages == same_messages
        past = parse_response(response, 1).sections.past
        lead, _, names = past.rpartition(f" {LEGAL_LEAD} ")
        legal_line = messages[-1]["content"].split("Legal actions: ")[1].splitlines()[0]
        assert names == legal_line + "."
        assert lead == parse_response(before, 1).sections.past
        action = parse_response(response, 1).sections.action
        assert action == parse_response(before, 1).sections.action and action in legal_line.split(", ")
    assert warm_start_examples(game, WarmStartSettings(episodes=3, depth=1, name_legal_moves=True)) == listed
    # Private information: nothing is listed (the config refuses the setting there).
    env = games.make("kuhn_poker")
    env.reset(seed=0)
    agent = env.agent_selection
    action = env.legal_actions(agent)[0]
    assert LEGAL_LEAD not in templated_response(env, agent, action, 1, random.Random(0), name_legal=True)


def test_name_legal_moves_changes_the_cache_key_and_is_refused_with_private_information(tiny_model_dir: Path) -> None:
    from strat.config_loading import load_config
    from strat.errors import ConfigError
    from strat.train.warmstart import _cache_key

    base = transcripts("tic_tac_toe", 1, 2, 0)
    plain = WarmStartSettings(episodes=2, depth=1)
    listed = WarmStartSettings(episodes=2, depth=1, name_legal_moves=True)
    assert _cache_key(tiny_model_dir, "tic_tac_toe", plain, base) != _cache_key(tiny_model_dir, "tic_tac_toe",
                                                                                listed, base)
    root = Path(__file__).resolve().parents[2] / "configs"
    assert load_config(root / "tic_tac_toe_tiny.yaml", ["warm_start.name_legal_moves=true"]).warm_start.name_legal_moves
    with pytest.raises(ConfigError, match="warm_start.name_legal_moves: kuhn_poker has private information"):
        load_config(root / "kuhn_poker_tiny.yaml", ["warm_start.name_legal_moves=true"])


def test_a_partial_reply_learns_its_target_alone(tiny_model_dir: Path) -> None:
    """A `PartialReply`: the prompt and the reply's opening get no loss, the target's tokens do, and no end-of-turn
    token follows it (the reply goes on)."""
    from strat.train.supervised import PartialReply

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    (messages, response), *_ = transcripts("tic_tac_toe", 2, 1, seed=0)
    reply = PartialReply("<past>So far nothing.</past>\n<their_view>When they see", " b2")
    ids, labels = encode_example(tokenizer, messages, reply)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    opening = tokenizer(reply.prefix, add_special_tokens=False)["input_ids"]
    target = tokenizer(" b2", add_special_tokens=False)["input_ids"]
    assert ids == list(prompt) + opening + target
    assert labels == [IGNORE_INDEX] * (len(prompt) + len(opening)) + target
    assert tokenizer.eos_token_id not in labels
    assert tokenizer.decode(target) == " b2"
    # A whole reply still ends with the end-of-turn token.
    assert encode_example(tokenizer, messages, response)[1][-1] == tokenizer.eos_token_id


def test_example_mean_weighs_each_example_the_same(tiny_model_dir: Path) -> None:
    """`example_mean`: the loss is the mean over the examples of each one's mean over its tokens (a two-token move
    weighs as much as a whole reply), against the token mean by default; both checked against plain forward passes."""
    from strat.train.supervised import PartialReply

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    (messages, response), (other, _), *_ = transcripts("tic_tac_toe", 2, 1, seed=0)
    encoded = [encode_example(tokenizer, messages, response),
               encode_example(tokenizer, other, PartialReply("<past>Nothing yet.</past>\n<their_view>", "a1"))]
    sums, counts = [], []
    with torch.no_grad():
        for ids, labels in encoded:
            start = next(i for i, label in enumerate(labels) if label != IGNORE_INDEX)
            logits = model(torch.tensor([ids])).logits[0]
            sums.append(F.cross_entropy(logits[start - 1 : -1], torch.tensor(ids[start:]), reduction="sum").item())
            counts.append(len(ids) - start)
        batch = collate(encoded, tokenizer.pad_token_id)
        by_example = supervised.response_loss(model, batch, example_mean=True).item()
        by_token = supervised.response_loss(model, batch).item()
    assert counts[1] <= 2 < 50 < counts[0]
    assert by_example == pytest.approx((sums[0] / counts[0] + sums[1] / counts[1]) / 2, rel=1e-4)
    assert by_token == pytest.approx(sum(sums) / sum(counts), rel=1e-4)


@pytest.mark.parametrize(("game", "depth"), [("tic_tac_toe", 2), ("connect_four", 1), ("kuhn_poker", 1),
                                             ("liars_dice", 0)])
def test_move_examples_name_a_uniformly_drawn_legal_move_where_the_response_chooses(game: str, depth: int) -> None:
    """Each move example is the prompt, a templated response cut right before it first names its move (inside the
    section that chooses it), and a legal move of the prompt's list as the target; which legal move is uniform, so
    over many examples the targets spread over the legal moves instead of following a player."""
    from strat.train.supervised import PartialReply
    from strat.train.warmstart import FIRST_NAMED_IN, move_examples

    examples = move_examples(game, depth, 60, seed=3)
    assert len(examples) == 60
    assert examples == move_examples(game, depth, 60, seed=3) != move_examples(game, depth, 60, seed=4)
    share_of_legal = []
    for messages, reply in examples:
        assert isinstance(reply, PartialReply)
        legal = messages[-1]["content"].split("Legal actions: ")[1].splitlines()[0].split(", ")
        assert reply.target.lstrip(" ") in legal
        assert reply.target.startswith(" ") == (not reply.prefix.endswith(("<action>", "\n")))
        section = FIRST_NAMED_IN[depth]
        assert f"<{section}>" in reply.prefix and f"</{section}>" not in reply.prefix
        share_of_legal.append(1 / len(legal))
    # Uniform among the legal moves: the target is the first listed legal move about as often as 1/len(legal) says.
    firsts = sum(reply.target.lstrip(" ") == m[-1]["content"].split("Legal actions: ")[1].split(", ")[0]
                 for m, reply in examples)
    expected = sum(share_of_legal)
    assert abs(firsts - expected) < 4 * (expected ** 0.5) + 1


def test_move_examples_join_the_warm_start_and_change_its_key_and_loss(tiny_model_dir: Path) -> None:
    from strat.config_loading import load_config
    from strat.train.settings import warm_start_settings
    from strat.train.warmstart import _cache_key, _fit_settings, move_examples, warm_start_examples

    plain = WarmStartSettings(episodes=3, depth=2)
    mixed = WarmStartSettings(episodes=3, depth=2, move_examples=7)
    base = warm_start_examples("tic_tac_toe", plain)
    examples = warm_start_examples("tic_tac_toe", mixed)
    assert examples == base + move_examples("tic_tac_toe", 2, 7, 0)
    assert _cache_key(tiny_model_dir, "tic_tac_toe", mixed, examples) != _cache_key(tiny_model_dir, "tic_tac_toe",
                                                                                   plain, base)
    assert supervised.examples_hash(examples) != supervised.examples_hash(base)
    assert _fit_settings(mixed).example_mean and not _fit_settings(plain).example_mean
    root = Path(__file__).resolve().parents[2] / "configs"
    config = load_config(root / "tic_tac_toe_tiny.yaml", ["warm_start.move_examples=500"])
    assert warm_start_settings(config).move_examples == 500
    with pytest.raises(ValueError, match="move_examples must be >= 0"):
        WarmStartSettings(move_examples=-1)


def test_a_soft_label_is_the_candidates_share_where_their_tokens_part(tiny_model_dir: Path) -> None:
    """`drawn_from`: at the first token where the candidates' tokenizations part, the target is the share of
    candidates that continue with each token (worked by hand on this tokenizer: " b2" and " b3" open with the
    space token, " a1" with " a"); the position is that token's in the encoded example, whose hard label the
    batch then ignores."""
    from strat.train.supervised import PartialReply, soft_label

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    (messages, _), *_ = transcripts("kuhn_poker", 1, 1, seed=0)
    names = (" b2", " b3", " a1", " 5", " 3")
    ids_of = {name: tokenizer(name, add_special_tokens=False)["input_ids"] for name in names}
    space, b, a = ids_of[" b2"][0], ids_of[" b2"][1], ids_of[" a1"][0]
    assert ids_of[" b3"][:2] == [space, b] and ids_of[" a1"][0] != space  # the hand-worked case holds here

    reply = PartialReply("<plan>I play", " b2", (" b2", " b3", " a1"))
    ids, labels = encode_example(tokenizer, messages, reply)
    label = soft_label(tokenizer, reply, len(ids))
    start = len(ids) - len(ids_of[" b2"])
    assert label is not None and label.position == start
    assert dict(zip(label.tokens, label.weights, strict=True)) == pytest.approx({space: 2 / 3, a: 1 / 3})
    # Digits share the space and part at the digit.
    five = PartialReply("<plan>I play", " 5", (" 5", " 3"))
    digits = soft_label(tokenizer, five, len(encode_example(tokenizer, messages, five)[0]))
    assert digits is not None and digits.position == start + 1
    assert dict(zip(digits.tokens, digits.weights, strict=True)) == {ids_of[" 5"][1]: 0.5, ids_of[" 3"][1]: 0.5}
    batch = collate([encode_example(tokenizer, messages, reply)], tokenizer.pad_token_id, [label])
    assert batch["labels"][0, start] == IGNORE_INDEX and batch["labels"][0, start + 1] == labels[start + 1]
    # No candidates, or one: the target alone.
    assert soft_label(tokenizer, PartialReply("<plan>I play", " b2"), len(ids)) is None
    assert soft_label(tokenizer, PartialReply("<plan>I play", " b2", (" b2",)), len(ids)) is None
    with pytest.raises(ValueError, match="not among drawn_from"):
        PartialReply("<plan>I play", " c3", (" b2", " b3"))
    with pytest.raises(ValueError, match="a prefix of another"):
        soft_label(tokenizer, PartialReply("<plan>I play", " b", (" b", " b2")), len(ids))


@pytest.mark.parametrize("example_mean", [True, False])
def test_a_soft_target_is_the_drawn_targets_expected_loss(tiny_model_dir: Path, example_mean: bool) -> None:
    """The loss of an example whose target is soft over candidates equals the mean, over the candidates, of the loss
    of the same example with that candidate drawn (the expectation the soft target stands for), whether the batch
    averages by example or by token, beside a whole reply. The candidates are digits after a space: two tokens each,
    the space shared, so every draw counts the same tokens and the identity is exact."""
    from strat.train.supervised import PartialReply, soft_label

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    (messages, response), (other, _), *_ = transcripts("kuhn_poker", 1, 1, seed=0)
    names = (" 5", " 3", " 1")
    assert {len(tokenizer(name, add_special_tokens=False)["input_ids"]) for name in names} == {2}
    whole = encode_example(tokenizer, messages, response)
    with torch.no_grad():
        drawn = [supervised.response_loss(model, collate([whole, encode_example(
            tokenizer, other, PartialReply("<plan>I play", name))], tokenizer.pad_token_id), example_mean).item()
            for name in names]
        soft = PartialReply("<plan>I play", " 3", names)
        encoded = encode_example(tokenizer, other, soft)
        label = soft_label(tokenizer, soft, len(encoded[0]))
        batch = collate([whole, encoded], tokenizer.pad_token_id, [None, label])
        loss = supervised.response_loss(model, batch, example_mean).item()
    assert len(set(drawn)) == 3  # the draws' losses differ: the identity is not trivial
    assert loss == pytest.approx(sum(drawn) / 3, rel=1e-5)


def test_move_target_legal_gives_every_legal_move_as_a_candidate(tiny_model_dir: Path) -> None:
    """`move_target="legal"`: the same examples as `drawn` (prompt, cut and drawn move), each carrying every legal
    move's name, with the drawn target's leading space, as its candidates; the config key reaches the settings,
    changes the cache key (and `drawn` keeps the old one: its examples hash as before candidates existed), and is
    refused without move examples."""
    from strat.config import ConfigError
    from strat.config_loading import load_config
    from strat.train.settings import warm_start_settings
    from strat.train.supervised import PartialReply
    from strat.train.warmstart import _cache_key, move_examples, warm_start_examples

    drawn = move_examples("tic_tac_toe", 2, 20, seed=3)
    legal = move_examples("tic_tac_toe", 2, 20, seed=3, target="legal")
    assert [(m, r.prefix, r.target) for m, r in legal] == [(m, r.prefix, r.target) for m, r in drawn]
    for messages, reply in legal:
        names = messages[-1]["content"].split("Legal actions: ")[1].splitlines()[0].split(", ")
        lead = " " if reply.target.startswith(" ") else ""
        assert reply.drawn_from == tuple(lead + name for name in names)
    assert all(not reply.drawn_from for _, reply in drawn)
    assert supervised._hashed(PartialReply("a", "b")) == {"prefix": "a", "target": "b"}

    plain = WarmStartSettings(episodes=3, depth=2, move_examples=7)
    soft = WarmStartSettings(episodes=3, depth=2, move_examples=7, move_target="legal")
    assert _cache_key(tiny_model_dir, "tic_tac_toe", plain, warm_start_examples("tic_tac_toe", plain)) != _cache_key(
        tiny_model_dir, "tic_tac_toe", soft, warm_start_examples("tic_tac_toe", soft))
    with pytest.raises(ValueError, match="move_target 'best' is not one of drawn, legal"):
        WarmStartSettings(move_target="best")
    root = Path(__file__).resolve().parents[2] / "configs"
    config = load_config(root / "tic_tac_toe_tiny.yaml",
                         ["warm_start.move_examples=50", "warm_start.move_target=legal"])
    assert warm_start_settings(config).move_target == "legal"
    with pytest.raises(ConfigError, match="warm_start.move_target=legal: it applies to move examples"):
        load_config(root / "tic_tac_toe_tiny.yaml", ["warm_start.move_target=legal"])


def test_move_points_some_illegal_draws_only_decisions_where_a_move_is_illegal(tiny_model_dir: Path) -> None:
    """`move_points="some_illegal"`: every Connect Four move example is at a decision with a full column (fewer than
    its seven moves legal, read from the example's own candidates), where `any` draws mostly decisions without one; a
    game whose moves are always legal (Kuhn poker) is refused by the function and by the config, as the key is without
    move examples; `any` keeps the examples and the cache key, `some_illegal` changes the key."""
    from strat.config import ConfigError
    from strat.config_loading import load_config
    from strat.train.settings import warm_start_settings
    from strat.train.warmstart import _cache_key, move_examples, warm_start_examples

    anywhere = move_examples("connect_four", 2, 40, seed=3, target="legal")
    assert move_examples("connect_four", 2, 40, seed=3, target="legal", points="any") == anywhere
    assert sum(len(reply.drawn_from) == 7 for _, reply in anywhere) > 20  # most random decisions: every column open
    constrained = move_examples("connect_four", 2, 40, seed=3, target="legal", points="some_illegal")
    assert len(constrained) == 40
    for messages, reply in constrained:
        legal = messages[-1]["content"].split("Legal actions: ")[1].splitlines()[0].split(", ")
        assert 1 <= len(legal) < 7 and len(reply.drawn_from) == len(legal)
    with pytest.raises(ValueError, match="no decision with an illegal move in 1000 random games"):
        move_examples("kuhn_poker", 1, 2, seed=0, points="some_illegal")
    with pytest.raises(ValueError, match="move_points 'late' is not one of any, some_illegal"):
        WarmStartSettings(move_points="late")

    plain = WarmStartSettings(episodes=2, depth=2, move_examples=5)
    some = WarmStartSettings(episodes=2, depth=2, move_examples=5, move_points="some_illegal")
    assert _cache_key(tiny_model_dir, "tic_tac_toe", plain, warm_start_examples("tic_tac_toe", plain)) != _cache_key(
        tiny_model_dir, "tic_tac_toe", some, warm_start_examples("tic_tac_toe", some))
    root = Path(__file__).resolve().parents[2] / "configs"
    config = load_config(root / "connect_four_tiny.yaml", ["warm_start.move_examples=50",
                         "warm_start.move_points=some_illegal", "game.options.column_numbers=open"])
    assert warm_start_settings(config).move_points == "some_illegal"
    with pytest.raises(ConfigError, match="warm_start.move_points=some_illegal: it applies to move examples"):
        load_config(root / "connect_four_tiny.yaml", ["warm_start.move_points=some_illegal"])
    with pytest.raises(ConfigError, match="every move of kuhn_poker is legal at every decision"):
        load_config(root / "kuhn_poker_tiny.yaml",
                    ["warm_start.move_examples=50", "warm_start.move_points=some_illegal"])


def test_a_warm_start_with_soft_move_targets_trains(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The fit runs with soft labels in its batches (some rows soft, some not) and lowers the loss."""
    settings = WarmStartSettings(depth=1, episodes=2, epochs=2, move_examples=8, move_target="legal", batch_size=4)
    figures = warm_start(tiny_model_dir, tmp_path / "warm", "kuhn_poker", settings)
    assert figures["examples"] > 8 and figures["final_loss"] < figures["first_loss"]
