"""`strat init-model`: deterministic, loadable, sized as promised, cached by content."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.cli import main
from strat.model import tiny as tiny_model


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_init_model_is_byte_identical_for_a_seed(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        assert main(["init-model", "--game", "kuhn_poker", "--out", str(tmp_path / name), "--seed", str(seed)]) == 0
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_init_model_takes_the_games_text_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--game-option` builds the model a config with that text option gets (the same tokenizer), and refuses,
    in one line, an option that is not a text option or a value the game does not know."""
    out = tmp_path / "named"
    assert main(["init-model", "--game", "kuhn_poker", "--game-option", "move_names=situational",
                 "--out", str(out)]) == 0
    cached = tiny_model.ensure("kuhn_poker", text_options=(("move_names", "situational"),))
    assert (out / "tokenizer.json").read_bytes() == (cached / "tokenizer.json").read_bytes()
    assert json.loads((out / "strat_tiny.json").read_text())["text_options"] == {"move_names": "situational"}
    for option, message in (("players=3", "not a text option of kuhn_poker"), ("move_names=bogus", "bogus")):
        capsys.readouterr()
        assert main(["init-model", "--game", "kuhn_poker", "--game-option", option,
                     "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err and not (tmp_path / "x").exists()


def test_tiny_model_loads_and_is_tiny(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    params = sum(p.numel() for p in model.parameters())
    assert 300_000 <= params <= 2_000_000, params
    assert model.config.vocab_size == len(tokenizer)
    text = "<|im_start|>user\nYou hold the King.<|im_end|>\n"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    # Any bytes stay encodable (byte-level BPE): garbage from a model never breaks tokenizing.
    assert tokenizer.decode(tokenizer("\x00\x7f ünïcode ✓")["input_ids"]) == "\x00\x7f ünïcode ✓"
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with torch.no_grad():
        assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))


def test_game_text_is_covered_by_merges(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    # The tokenizer is trained on the game's text, so its words are few tokens, not bytes.
    assert len(tokenizer("You hold the King.")["input_ids"]) <= 6


def test_cache_is_reused_and_keyed_by_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = tiny_model.TinyModelSettings(corpus_games=20)
    first = tiny_model.ensure("kuhn_poker", settings=settings)
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert tiny_model.ensure("kuhn_poker", settings=settings) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime

    original = tiny_model.corpus
    monkeypatch.setattr(tiny_model, "corpus",
                        lambda game, s=settings, text=(): original(game, s, text) + ["A changed rule."])
    changed = tiny_model.ensure("kuhn_poker", settings=settings)
    assert changed != first and (changed / "config.json").is_file()


def test_resolve_model_path_builds_tiny_models() -> None:
    path = tiny_model.resolve_model_path("tiny:kuhn_poker")
    assert (path / "model.safetensors").is_file()
    assert tiny_model.resolve_model_path(str(path)) == path


def test_config_sizes_build_their_own_model_and_the_defaults_the_usual_one() -> None:
    from strat.config_loading import load_config
    from strat.train.settings import base_model_path

    default = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"
    assert base_model_path(load_config(default, [])) == tiny_model.resolve_model_path("tiny:kuhn_poker")
    sized = base_model_path(load_config(default, ["model.tiny.hidden_size=64", "model.tiny.num_layers=1",
                                                               "model.tiny.intermediate_size=96", "model.tiny.head_dim=32"]))
    config = json.loads((sized / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"], config["head_dim"]) == (
        64, 1, 96, 32)


def test_a_text_option_trains_the_tokenizer_on_its_own_words() -> None:
    """Kuhn's situational move names ("check", "fold", "call") are single tokens of the model a config with that
    option builds, as "pass" and "bet" are of the default's; the default config's model is the usual one."""
    from strat.config_loading import load_config
    from strat.train.settings import base_model_path

    default = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"
    plain = AutoTokenizer.from_pretrained(base_model_path(load_config(default, [])))
    named_dir = base_model_path(load_config(default, ["game.options.move_names=situational"]))
    named = AutoTokenizer.from_pretrained(named_dir)
    assert named_dir != tiny_model.resolve_model_path("tiny:kuhn_poker")
    assert [len(plain.tokenize(word)) for word in ("pass", "bet")] == [1, 1]
    assert [len(named.tokenize(word)) for word in ("check", "bet", "fold", "call")] == [1, 1, 1, 1]
    assert len(plain.tokenize("call")) > 1  # the default's text never says it alone: the option's model differs


_RACER = """
import sys, time
from pathlib import Path
from strat.model.tiny import build_once

target, log = Path(sys.argv[1]), Path(sys.argv[2])

def build(out):
    with log.open("a") as f:
        f.write("built\\n")
    time.sleep(1.0)  # long enough that the other process asks while this one builds
    out.mkdir()
    (out / "config.json").write_text("{}")

print(build_once(target, build))
"""


def test_processes_wanting_one_model_at_once_build_it_once(tmp_path: Path) -> None:
    """Two processes ask for the same cached directory together: one builds it, the other waits on the lock and
    gets that copy (parallel test workers and runs started together must not train the same warm start twice)."""
    target, log = tmp_path / "cache" / "model-abc", tmp_path / "builds.log"
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(target), str(log)], stdout=subprocess.PIPE,
                               text=True) for _ in range(2)]
    printed = [racer.communicate(timeout=120)[0].strip() for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0]
    assert printed == [str(target)] * 2
    assert log.read_text() == "built\n"
    assert (target / "config.json").is_file()
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".model-abc-")], "a staging folder was left"
