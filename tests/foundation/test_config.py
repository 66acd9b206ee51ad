"""Configuration: shipped files validate; bad values are refused with the key, the value
and what is accepted; overrides are typed; unbuilt features are refused, not ignored."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from strat.config import ExperimentConfig, parse_override, save_resolved
from strat.config_loading import load_config
from strat.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    assert isinstance(load_config(path), ExperimentConfig)


def test_defaults_and_overrides() -> None:
    config = load_config(DEFAULT, ["algorithm.group_size=4", "reasoning.temperature=0.7", "run.name=exp1"])
    assert config.algorithm.group_size == 4
    assert config.reasoning.temperature == 0.7
    assert config.run_dir == Path("runs/exp1")
    assert config.game.name == "kuhn_poker"
    assert load_config(None).algorithm.advantage_mode == "hybrid"


@pytest.mark.parametrize(("overrides", "ranks", "gpus_each"), [
    ([], 1, 0.0),
    (["resources.learner_ranks=2"], 2, 0.0),
    (["resources.gpus_learner=0.5"], 1, 0.5),
    (["resources.gpus_learner=1"], 1, 1.0),
    (["resources.gpus_learner=4"], 4, 1.0),
])
def test_learner_ranks_are_cpu_ranks_or_one_per_gpu(overrides: list[str], ranks: int, gpus_each: float) -> None:
    resources = load_config(DEFAULT, overrides).resources
    assert (resources.learner_world_size, resources.gpus_per_learner_rank) == (ranks, gpus_each)


def test_overrides_step_into_lists_by_index() -> None:
    """One entry of a list (a policy, an opponent) is changed without restating the list; the rest keep the file's."""
    two = ROOT / "configs" / "kuhn_poker_two_policies_tiny.yaml"
    config = load_config(two, ["policies.0.lr=1.0e-4", "policies.0.algorithm.advantage_mode=outcome"])
    (small,) = config.policies
    assert small.name == "small" and small.lr == 1.0e-4
    assert small.algorithm.advantage_mode == "outcome"
    assert small.tiny.hidden_size == 64  # the file's other keys of the entry kept
    weights = [o.weight for o in load_config(DEFAULT, ["game.opponents.2.weight=0.5"]).game.opponents]
    assert weights == [0.6, 0.2, 0.5]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["game.opponents.3.weight=1"], "game.opponents.3: the list game.opponents has 3 entries (0 to 2)"),
        (["game.opponents.self.weight=1"], "game.opponents is a list: step into it by index ('game.opponents.self'"),
        (["policies.0.lr=1e-4"], "policies is not in the config file: restate the whole list (policies=[...])"),
    ],
)
def test_list_index_overrides_are_refused_in_one_line(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(DEFAULT, overrides)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_override_values_are_yaml_typed() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=0.5") == (["a"], 0.5)
    assert parse_override("a=true") == (["a"], True)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=tiny:kuhn_poker") == (["a"], "tiny:kuhn_poker")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["algorithm.group_size=0"], "algorithm.group_size=0: Input should be greater than or equal to 1"),
        (["algorithm.gruop_size=4"], "algorithm.gruop_size: unknown key (allowed: group_size,"),
        (["nonsense.key=1"], "nonsense: unknown key (allowed: run, model,"),
        (["model.path=/no/such/model"], "model.path='/no/such/model': no model directory"),
        (["game.name=chess"], "game.name='chess': unknown game 'chess' (allowed:"),
        (["algorithm.advantage_mode=both"], "algorithm.advantage_mode='both': unknown advantage estimator 'both' (allowed: hybrid, outcome, process, shuffled)"),
        (["reasoning.depth=3"], "reasoning.depth=3: Input should be 0, 1 or 2"),
        (["algorithm.format_penalty=-1.0"], "algorithm.format_penalty=-1.0:"),
        (["algorithm.format_penalty=-2.0"], "algorithm.format_penalty=-2.0:"),
        (["game.opponents=[{kind: scripted, name: minimax}]"], "game.opponents.0.name='minimax': not available for kuhn_poker"),
        (["game.name=tic_tac_toe", "game.opponents=[{kind: self}]"],
         "warm_start.player='timid': not available for tic_tac_toe (allowed: random, heuristic)"),
        (["game.name=leduc_poker", "warm_start.player=bully"],
         "warm_start.player='bully': not available for leduc_poker (allowed: random, heuristic, contrarian, timid)"),
        (["algorithm.kl_type=none", "algorithm.kl_coef=0.1"], "kl_coef > 0 needs kl_type"),
        (["resources.gpus_learner=2.5"],
         "resources.gpus_learner=2.5: more than one GPU starts one learner rank per GPU"),
        (["resources.learner_ranks=0"], "resources.learner_ranks=0: Input should be greater than or equal to 1"),
        (["resources.gpus_learner=1", "resources.learner_ranks=2"],
         "resources.learner_ranks=2: only for a learner without GPUs (resources.gpus_learner=0, not 1)"),
        (["model.tiny.num_heads=3", "model.tiny.num_kv_heads=2"], "num_heads (3) must be a multiple of num_kv_heads (2)"),
        (["model.tiny.num_layers=0"], "model.tiny.num_layers=0: Input should be greater than or equal to 1"),
        (["algorithm"], "is not of the form key.sub=value"),
        (["algorithm.group_size.x=1"], "algorithm.group_size is a value, not a section"),
    ],
)
def test_bad_values_are_refused_with_key_and_allowed(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(DEFAULT, overrides)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["comparison.agreement=judge"], "comparison.judge_model: agreement=judge on a separate engine needs a judge"),
        (["comparison.agreement=judge", "comparison.judge_model=/no/judge"],
         "comparison.judge_model='/no/judge': no model directory at '/no/judge'"),
        (["comparison.agreement=judge", "comparison.judge_engine=policy", "comparison.judge_model={model}"],
         "comparison.judge_model='{model}': judge_engine=policy judges with the policy's own engine"),
        (["comparison.judge_model={model}"], "comparison.judge_model='{model}': only used with agreement=judge"),
        (["comparison.judge_engine=policy"], "comparison.judge_engine=policy: only used with agreement=judge"),
        (["comparison.agreement=embedding"], "comparison.embedding_model: agreement=embedding needs an embedding model"),
        (["comparison.agreement=embedding", "comparison.embedding_model={empty}"],
         "comparison.embedding_model='{empty}': '{empty}' holds no *.safetensors weights"),
        (["comparison.agreement=judge", "comparison.judge_model={model}", "comparison.embedding_model={model}"],
         "comparison.embedding_model='{model}': only used with agreement=embedding, not agreement=judge"),
    ],
)
def test_agreement_models_are_refused_unless_used_and_present(
    overrides: list[str], expected: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    paths = {"model": str(tiny_model_dir), "empty": str(tmp_path)}
    with pytest.raises(ConfigError) as caught:
        load_config(DEFAULT, [o.format(**paths) for o in overrides])
    message = str(caught.value)
    assert expected.format(**paths) in message
    assert "\n" not in message


def test_agreement_methods_with_their_model_are_accepted(tiny_model_dir: Path) -> None:
    judge = load_config(DEFAULT, ["comparison.agreement=judge", f"comparison.judge_model={tiny_model_dir}"])
    assert (judge.comparison.judge_engine, judge.comparison.judge_model) == ("separate", str(tiny_model_dir))
    policy = load_config(DEFAULT, ["comparison.agreement=judge", "comparison.judge_engine=policy"])
    assert policy.comparison.judge_model is None
    embedding = load_config(DEFAULT, ["comparison.agreement=embedding", f"comparison.embedding_model={tiny_model_dir}"])
    assert embedding.comparison.embedding_model == str(tiny_model_dir)


def test_format_penalty_must_be_worse_than_worst_return() -> None:
    assert load_config(DEFAULT, ["algorithm.format_penalty=-2.01"]).algorithm.format_penalty == -2.01


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("run: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(listing)


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    config = load_config(DEFAULT, ["algorithm.lam=0.25"])
    written = save_resolved(config, tmp_path / "run")
    tree = yaml.safe_load(written.read_text())
    assert tree["algorithm"]["lam"] == 0.25
    assert tree["algorithm"]["clip_eps_high"] == 0.28  # defaults are written out too
    assert load_config(written) == config


def test_earlier_kl_names_load_or_are_refused_in_one_line(tmp_path: Path) -> None:
    # A run saved before the KL penalties were named by their divergence: `k3` still loads, as `forward`.
    config = load_config(DEFAULT, ["algorithm.kl_type=reverse"])
    tree = yaml.safe_load(save_resolved(config, tmp_path / "run").read_text())
    assert tree["algorithm"]["kl_type"] == "reverse"
    tree["algorithm"]["kl_type"] = "k3"
    saved = tmp_path / "old" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text(yaml.safe_dump(tree))
    old = load_config(saved)
    assert old.algorithm.kl_type == "forward"
    assert old.algorithm.model_copy(update={"kl_type": "reverse"}) == config.algorithm
    assert load_config(DEFAULT, ["algorithm.kl_type=k3"]).algorithm.kl_type == "forward"
    # `k1`'s gradient is zero in expectation: refused, in one line naming what to set instead.
    with pytest.raises(ConfigError) as refused:
        load_config(DEFAULT, ["algorithm.kl_type=k1"])
    message = str(refused.value)
    assert "kl_type: reverse" in message and "forward (the earlier k3" in message
    assert "gradient is zero in expectation" in message
    assert "\n" not in message.strip()


def _strat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strat.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_cli_check_prints_resolved_config() -> None:
    done = _strat("check", str(DEFAULT), "algorithm.group_size=4")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["algorithm"]["group_size"] == 4


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["algorithm.group_size=0"], "algorithm.group_size=0"),
        (["wrong.key=1"], "wrong: unknown key"),
        (["model.path=/missing/model"], "model.path='/missing/model'"),
    ],
)
def test_cli_bad_config_is_one_line_without_traceback(args: list[str], expected: str) -> None:
    done = _strat("check", str(DEFAULT), *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("strat: error: ") and expected in lines[0]


def test_cli_help_for_every_verb() -> None:
    top = _strat("--help")
    assert top.returncode == 0
    for verb in ("check", "init-model", "play", "train", "sft", "eval", "plan", "submit", "jobs"):
        assert verb in top.stdout
        done = _strat(verb, "--help")
        assert done.returncode == 0 and "Usage" in done.stdout, done.stderr
