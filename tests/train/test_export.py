"""`strat export`: a short training run's checkpoint as a Hugging Face model directory that transformers and vLLM load
with the checkpoint's greedy output, a card whose figures are metrics.jsonl's, LoRA merged, refusals, and the run's
format carried along, so that `strat eval` of the export equals `strat eval` of the checkpoint."""

import ast
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import games
from strat import cli, metrics
from strat.algorithm.reasoning import build_messages
from strat.config import save_resolved
from strat.config_loading import load_config
from strat.engines import SamplingParams, build_engine
from strat.engines.base import stop_token_ids
from strat.errors import ConfigError
from strat.eval.policies import PolicyInfo, ReasoningOverrides, load_policy
from strat.export.export import export_run
from strat.model import checkpoint
from strat.model.build import LoraSettings
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.resume import OverrideChange, ResumeOverrides
from strat.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
SHORT = [
    "engine.backend=hf", "schedule.max_staleness=0", "schedule.steps=2", "schedule.eval_every=2",
    "schedule.checkpoint_every=2", "eval.games=6", "eval.samples_per_infoset=2", "eval.bootstrap=5",
    "logging.samples_every=1", "logging.tensorboard=false", "warm_start.enabled=false", "algorithm.groups_per_step=2",
    "algorithm.group_size=3", "reasoning.max_new_tokens=24", "algorithm.lr=0.01",
    # Off the defaults, so that an evaluation of the export with the defaults would differ from the run's.
    "reasoning.temperature=0.9", "reasoning.top_p=0.95", "algorithm.format_penalty=-4.0",
]
TRAINING_STATE = {"optimizer.pt", "rng.json", "loop_state.json", checkpoint.COMPLETE, "snapshot", "adapter"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Path]:
    """The run directory of a 2-step hf run on the tiny model (evaluated before and after, transcripts every step)."""
    output = tmp_path_factory.mktemp("runs")
    config = load_config(DEFAULT, [f"model.path={tiny_model_dir}", f"run.output_dir={output}", *SHORT])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        Trainer(config, config.run_dir).run()
    finally:
        ray.shutdown()
    yield config.run_dir


@pytest.fixture(scope="module")
def exported(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "kuhn_policy"
    assert cli.main(["export", str(trained), "--out", str(out)]) == 0
    return out


def _prompts(tokenizer) -> list[list[int]]:
    """Both seats' first prompts of a few Kuhn deals, in the tokenizer's chat template."""
    prompts = []
    for seed in range(3):
        env = games.make("kuhn_poker")
        env.reset(seed=seed)
        ids = tokenizer.apply_chat_template(build_messages(env, env.agent_selection, 2), add_generation_prompt=True,
                                            tokenize=True)
        prompts.append(list(ids["input_ids"]))
    return prompts


def _greedy(model, prompt: list[int], **kwargs) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **kwargs)
    return out[0, len(prompt):].tolist()


def test_export_is_a_clean_model_directory_with_the_checkpoints_greedy_output(trained: Path, exported: Path) -> None:
    ckpt = checkpoint.latest(trained)
    names = {p.name for p in exported.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
            "README.md"} <= names
    assert not names & TRAINING_STATE
    assert not list(exported.parent.glob(".*partial*")), "no staging directory left behind"
    trained_weights, weights = load_file(ckpt.path / "model.safetensors"), load_file(exported / "model.safetensors")
    assert weights.keys() == trained_weights.keys()
    assert all(torch.equal(weights[k], trained_weights[k]) for k in weights)

    source_tokenizer, tokenizer = AutoTokenizer.from_pretrained(ckpt.path), AutoTokenizer.from_pretrained(exported)
    prompts = _prompts(tokenizer)
    assert prompts == _prompts(source_tokenizer), "the same chat template"
    reference = AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32).eval()
    model = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    stops = stop_token_ids(source_tokenizer)
    for prompt in prompts:
        expected = _greedy(reference, prompt, max_new_tokens=24, eos_token_id=stops, pad_token_id=stops[-1])
        # The export stops and limits itself by its generation_config.json alone.
        assert _greedy(model, prompt) == expected


@pytest.mark.slow
def test_export_loads_in_vllm_with_the_checkpoints_greedy_output(trained: Path, exported: Path) -> None:
    params = SamplingParams(max_tokens=24, temperature=0)
    with build_engine("hf", checkpoint.latest(trained).path, max_model_len=512) as engine:
        prompts = _prompts(engine.tokenizer)
        expected = [g.token_ids for g in engine.generate(prompts, params)]
    with build_engine("vllm", exported, max_model_len=512) as engine:
        assert [g.token_ids for g in engine.generate(prompts, params)] == expected


def _table(card: str) -> dict[str, list[str]]:
    rows = {}
    for line in card.split("## Evaluation", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def test_card_figures_are_those_of_metrics_jsonl(trained: Path, exported: Path, tiny_model_dir: Path) -> None:
    card = (exported / "README.md").read_text()
    logged = {r["step"]: r for r in metrics.read(trained) if "eval/return_vs_random" in r}
    assert sorted(logged) == [0, 2]
    rows = _table(card)
    assert rows["measure"] == ["before training (step 0)", "step 2"]
    for column, step in enumerate((0, 2)):
        record = logged[step]
        mean, half = (float(x) for x in re.fullmatch(r"(\S+) ± (\S+)", rows["return vs random"][column]).groups())
        assert (mean, half) == (round(record["eval/return_vs_random"], 4), round(record["eval/return_vs_random_ci"], 4))
        assert float(rows["win rate vs random"][column]) == round(record["eval/win_rate_vs_random"], 4)
        value, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]",
                                                             rows["exploitability"][column]).groups())
        assert [value, low, high] == [round(x, 4) for x in (record["eval/exploitability"],
                                                           *record["eval/exploitability_ci"])]
    for fact in (f"base model: `{tiny_model_dir}`", "game: `kuhn_poker` with options: the defaults",
                 "| reasoning depth | 1 ", "| advantage mode | outcome |",
                 "| lam (process weight) | unused (outcome advantage) |",
                 "| group shape | 3 episodes per group x 2 groups per step |", "| learning rate | 0.01 ",
                 "clipped surrogate", "Trained for 2 steps", "fine-tuning: all weights"):
        assert fact in card


def test_card_example_is_a_sampled_turn_with_its_own_prompt(trained: Path, exported: Path) -> None:
    card = (exported / "README.md").read_text()
    episode = re.search(r"sampled in training at step 2 \(samples/step_2\.md, episode (\S+)\)", card).group(1)
    transcript = (trained / "samples" / "step_2.md").read_text()
    block = transcript.split(f"## {episode} ", 1)[1].split("\n## ", 1)[0]
    agent = re.search(r"### turn 0: (\S+) plays", block).group(1)
    held = re.search(rf"{agent}: (\w+)", block.split("\n")[1]).group(1)  # "Private information: player_0: Queen; ..."
    fences = re.findall(r"````text\n(.*?)\n````", card, re.DOTALL)
    prompt, response = fences
    assert f"You are player {agent[-1]}. You hold the {held}." in prompt
    raw = ast.literal_eval(re.search(r"- raw response: (.*)", block).group(1))
    assert response == re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", raw)


def test_card_lists_the_changes_made_on_resume_before_the_exported_step(trained: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "resumed"
    shutil.copytree(trained, run_dir)
    changes = [ResumeOverrides(1, (OverrideChange("algorithm.lr", 0.02, 0.01),)),
               ResumeOverrides(2, (OverrideChange("schedule.steps", 2, 4),))]  # after step 2: not in these weights
    (run_dir / "overrides.jsonl").write_text("".join(json.dumps(asdict(c)) + "\n" for c in changes))
    card = (export_run(run_dir, tmp_path / "out").out / "README.md").read_text()
    assert "- resumed after step 1 with `algorithm.lr` 0.02 -> 0.01\n" in card
    assert "schedule.steps` 2 -> 4" not in card


def _refused(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_refusals(capsys, trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert "no run directory at" in _refused(capsys, ["export", str(tmp_path / "nowhere"), "--out", str(out)])
    assert "--step 7: no checkpoint of that step" in _refused(capsys, ["export", str(trained), "--out", str(out),
                                                                      "--step", "7"])
    # A copy of the run whose step-4 checkpoint was interrupted (no COMPLETE marker) and whose step 2 is gone.
    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    step_2 = broken / "checkpoints" / "step_2"
    step_2.rename(broken / "checkpoints" / "step_4")
    (broken / "checkpoints" / "step_4" / checkpoint.COMPLETE).unlink()
    err = _refused(capsys, ["export", str(broken), "--out", str(out), "--step", "4"])
    assert "checkpoint step_4" in err and "is incomplete" in err and "complete checkpoints: none" in err
    assert "no complete checkpoint" in _refused(capsys, ["export", str(broken), "--out", str(out)])
    assert not out.exists(), "a refused export writes nothing"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "not an empty directory" in _refused(capsys, ["export", str(trained), "--out", str(out)])
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lora_run_exports_merged_weights_with_base_plus_adapter_logits(
    tmp_path: Path, tiny_model_dir: Path, dtype: str
) -> None:
    # In bfloat16 the learner keeps the frozen base in bf16 and the merged layers come out in float32: the export
    # writes every weight in float32.
    from peft import PeftModel

    config = load_config(DEFAULT, [f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", *SHORT,
                                   "learner.lora.enabled=true", "learner.lora.r=4", "learner.lora.alpha=8",
                                   f"learner.dtype={dtype}"])
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2, lora=LoraSettings(r=4, alpha=8), dtype=dtype))
    with torch.no_grad():  # B starts at zero: give the adapters something to merge
        for name, parameter in learner.model.named_parameters():
            if ".lora_B." in name:
                parameter.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    save_resolved(config, config.run_dir)
    ckpt = learner.save(config.run_dir, 2, {"baseline": {}}, keep=1)
    exported = export_run(config.run_dir, tmp_path / "lora_export")
    assert exported.lora_merged and not (exported.out / "adapter").exists()
    assert "LoRA (r=4, alpha=8" in (exported.out / "README.md").read_text()

    written = load_file(exported.out / "model.safetensors")
    assert {t.dtype for t in written.values()} == {torch.float32}
    assert json.loads((exported.out / "config.json").read_text())["dtype"] == "float32"

    # The reference: the base as the learner held it (rounded to bf16 in bfloat16), with the adapter on top.
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=getattr(torch, dtype)).float().eval()
    ids = torch.tensor(_prompts(AutoTokenizer.from_pretrained(exported.out))[:1])
    with torch.no_grad():
        base_logits = base(ids).logits
        adapted = PeftModel.from_pretrained(base, ckpt.path / "adapter").eval()
        expected = adapted(ids).logits
        got = AutoModelForCausalLM.from_pretrained(exported.out, dtype=torch.float32).eval()(ids).logits
    assert (expected - base_logits).abs().max() > 1e-3, "the adapter moved the model"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# --- `strat eval` of the export plays as the run's own evaluation ---------------------------------------------------

_RUN_FORMAT = {"depth": 1, "max_new_tokens": 24, "temperature": 0.9, "top_p": 0.95, "format_penalty": -4.0}
"""The reasoning format and sampling of the fixture's run (SHORT and the default config), by hand."""


def _format(info: PolicyInfo) -> dict[str, object]:
    return {key: getattr(info, key) for key in _RUN_FORMAT}


def test_export_carries_the_runs_format_in_generation_config_and_strat_json(exported: Path) -> None:
    generation = json.loads((exported / "generation_config.json").read_text())
    assert (generation["max_new_tokens"], generation["temperature"], generation["top_p"]) == (24, 0.9, 0.95)
    assert generation["do_sample"] is True
    assert json.loads((exported / "strat.json").read_text()) == {
        "game": "kuhn_poker", "game_options": {}, "depth": 1, "format_penalty": -4.0, "samples_per_infoset": 2,
        "dtype": "float32", "max_model_len": 1024, "step": 2,
    }
    card = (exported / "README.md").read_text()
    assert ("`strat.json` gives the game (`kuhn_poker`, default options), the reasoning depth (1), the format penalty"
            " (-4) and the samples per information set (2); `generation_config.json` the sampling (`max_new_tokens` 24,"
            " `temperature` 0.9, `top_p` 0.95)") in card


def test_an_exported_directory_is_loaded_in_its_runs_format(exported: Path) -> None:
    policy = load_policy(str(exported), None, backend="hf")  # the game too comes from strat.json
    try:
        assert (policy.game, policy.game_options, policy.samples_per_infoset) == ("kuhn_poker", {}, 2)
        assert _format(policy.info) == _RUN_FORMAT
        assert (policy.info.step, policy.info.run_dir) == (2, None)
    finally:
        policy.close()
    overridden = load_policy(str(exported), "kuhn_poker", backend="hf",
                             overrides=ReasoningOverrides(depth=2, max_new_tokens=30, temperature=0.5))
    try:
        assert _format(overridden.info) == {**_RUN_FORMAT, "depth": 2, "max_new_tokens": 30, "temperature": 0.5}
    finally:
        overridden.close()
    with pytest.raises(ConfigError, match="trained on kuhn_poker"):
        load_policy(str(exported), "leduc_poker", backend="hf")


def test_a_plain_model_directory_keeps_the_config_defaults(tiny_model_dir: Path, tmp_path: Path) -> None:
    # A chat model's own generation config (here temperature 0.7, as Qwen's has) does not change how it is
    # evaluated without Strat's sidecar.
    plain = tmp_path / "plain"
    shutil.copytree(tiny_model_dir, plain)
    generation = json.loads((plain / "generation_config.json").read_text())
    (plain / "generation_config.json").write_text(json.dumps({**generation, "temperature": 0.7, "top_p": 0.8,
                                                              "max_new_tokens": 40, "do_sample": True}))
    policy = load_policy(str(plain), "kuhn_poker", backend="hf")
    try:
        assert _format(policy.info) == {"depth": 2, "max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0,
                                        "format_penalty": -3.0}
        assert (policy.samples_per_infoset, policy.info.step) == (16, None)
    finally:
        policy.close()


def _eval(policy: Path, out: Path) -> dict:
    argv = ["eval", "--policy", str(policy), "--game", "kuhn_poker", "--depth", "1", "--games", "4", "--opponents",
            "random", "--bootstrap", "5", "--transcripts", "2", "--backend", "hf", "--seed", "7", "--out", str(out)]
    assert cli.main(argv) == 0
    return json.loads((out / "eval.json").read_text())


@pytest.mark.slow
def test_eval_of_the_export_equals_eval_of_the_final_checkpoint(trained: Path, exported: Path,
                                                                 tmp_path: Path) -> None:
    # No --samples-per-infoset: the run's eval.samples_per_infoset (2) is the default of both.
    of_run, of_export = _eval(trained, tmp_path / "run"), _eval(exported, tmp_path / "export")
    for key in ("game", "game_options", "seed", "matches", "exploitability", "validity", "cot", "notes"):
        assert of_export[key] == of_run[key], key
    assert of_run["exploitability"]["samples_per_infoset"] == 2
    (run_info,), (export_info,) = of_run["policies"], of_export["policies"]
    paths = ("name", "checkpoint", "run_dir")
    assert {k: v for k, v in export_info.items() if k not in paths} == {k: v for k, v in run_info.items()
                                                                        if k not in paths}
    assert _format(PolicyInfo(**run_info)) == _RUN_FORMAT
    # The sampled responses themselves (the tiny model's are not moves, so the results above hold whatever it says).
    run_html = (tmp_path / "run" / "transcripts.html").read_text().replace(run_info["name"], "POLICY")
    export_html = (tmp_path / "export" / "transcripts.html").read_text().replace(export_info["name"], "POLICY")
    assert export_html == run_html
