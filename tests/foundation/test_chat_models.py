"""Chat models as they come: a template with its own role syntax and no system role, and an end-of-turn token
that only the model's `generation_config.json` names. Prompts render, the engine stops at that token, the reply
parses, and one training step runs on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.reasoning import parse_response
from strat.config_loading import load_config
from strat.engines import SamplingParams, build_engine
from strat.engines.base import chat_prompt_ids, renders_system, stop_token_ids
from strat.play.rollout import RolloutRunner, plan_groups
from strat.play.settings import rollout_settings
from strat.train.learner import PolicyLearner
from strat.train.settings import advantage_config, learner_settings

# Gemma's turn syntax: `model` for the assistant, and a system message raises.
TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{%- endif %}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
    " + message['content'] + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
CONVERSATION = [{"role": "system", "content": "Play Kuhn poker."}, {"role": "user", "content": "Legal actions: pass, bet"}]
REPLY = "<think>I hold the King.</think>\n<action>bet</action>"


@pytest.fixture(scope="module")
def chat_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a Gemma-style template, `<eos>` as the tokenizer's eos and `<end_of_turn>` only in
    generation_config.json; fine-tuned until it answers the Kuhn prompt with REPLY and then `<end_of_turn>`."""
    out = tmp_path_factory.mktemp("models") / "turns"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_special_tokens({"eos_token": "<eos>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    tokenizer.chat_template = TEMPLATE
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    # Seeded before the new tokens' embeddings are drawn: they would otherwise depend on what the tests before this
    # one drew from torch's global generator, and the fine-tune's greedy reply with them.
    torch.manual_seed(0)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    prompt = chat_prompt_ids(tokenizer, CONVERSATION)
    target = tokenizer(REPLY, add_special_tokens=False)["input_ids"] + [end_of_turn]
    ids = torch.tensor([prompt + target])
    labels = torch.tensor([[-100] * len(prompt) + target])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(40):  # the loss falls to about 0.03: the reply is greedy
        optimizer.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
    model.eval()
    model.config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_turn]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out



def test_a_template_without_system_role_gets_the_system_text_in_the_first_user_turn(chat_model_dir: Path,
                                                                                  tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    with pytest.raises(Exception, match="System role not supported"):
        tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert not renders_system(tokenizer)
    text = tokenizer.decode(chat_prompt_ids(tokenizer, CONVERSATION))
    assert text == ("<start_of_turn>user\nPlay Kuhn poker.\n\nLegal actions: pass, bet<end_of_turn>\n"
                    "<start_of_turn>model\n")
    chatml = AutoTokenizer.from_pretrained(tiny_model_dir)  # a template with a system role renders it as it is
    assert renders_system(chatml)
    assert chat_prompt_ids(chatml, CONVERSATION) == list(
        chatml.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=True)["input_ids"])


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_the_end_of_turn_token_of_generation_config_stops_generation(chat_model_dir: Path, backend: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert end_of_turn not in stop_token_ids(tokenizer)  # not the tokenizer's eos: only generation_config.json has it
    assert json.loads((chat_model_dir / "generation_config.json").read_text())["eos_token_id"][1] == end_of_turn
    assert end_of_turn in stop_token_ids(tokenizer, chat_model_dir)
    with build_engine(backend, chat_model_dir, max_model_len=512) as engine:
        [generation] = engine.generate_chat([CONVERSATION], SamplingParams(max_tokens=64, temperature=0))
    assert generation.finish_reason == "stop" and generation.token_ids[-1] == end_of_turn
    assert end_of_turn not in generation.token_ids[:-1]
    assert generation.text == REPLY
    parsed = parse_response(generation.text, depth=0)
    assert parsed.format_valid and parsed.sections.action == "bet"


@pytest.mark.slow
def test_one_training_step_on_it(chat_model_dir: Path, tmp_path: Path) -> None:
    config = load_config(None, [f"model.path={chat_model_dir}", f"run.output_dir={tmp_path}", "engine.backend=hf",
                                "reasoning.depth=0", "reasoning.max_new_tokens=32", "algorithm.group_size=2",
                                "algorithm.groups_per_step=2", "game.opponents=[{kind: self}]"])
    settings = rollout_settings(config)
    with build_engine("hf", chat_model_dir) as engine:
        runner = RolloutRunner(settings, engine.encode_chat, engine.generate, snapshot=engine.generate)
        episodes = runner.run(plan_groups(settings, config.run.seed, 1, 0, config.algorithm.groups_per_step), 3)
        prompts = [engine.tokenizer.decode(turn.prompt_token_ids) for episode in episodes for turn in episode.turns]
    assert prompts and all(prompt.startswith("<start_of_turn>user\nYou are playing kuhn poker") for prompt in prompts)
    scored = score_episodes(episodes, ComparisonWeights())
    samples, _ = compute_advantages(scored, advantage_config(config))
    figures = PolicyLearner(chat_model_dir, learner_settings(config)).update(samples)
    assert figures["learn/samples"] == len(samples) > 0
    assert figures["learn/tokens"] > 0 and math.isfinite(figures["loss/policy"])
