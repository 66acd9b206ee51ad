"""`reasoning.constrain_action`: once a response opens `<action>` only a legal move's name, `</action>` and the end of
the turn may follow; the hf and vLLM engines sample under that mask, and the learner scores the constrained tokens
under the same mask (its log-probs equal the engine's), so that the move is still learnt, among the legal moves."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import games
from strat.algorithm.advantage import compute_advantages
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.reasoning import build_messages
from strat.algorithm.records import TrainBatch, TrainSample
from strat.config_loading import load_config
from strat.engines import build_engine
from strat.engines.action_constraint import ActionConstraint, TokenTexts, token_texts
from strat.engines.base import SamplingParams
from strat.play.rollout import RolloutRunner, derive_seed, plan_groups
from strat.play.settings import engine_settings, rollout_settings
from strat.train.sequences import sequence_logprobs
from strat.train.settings import advantage_config

CONFIG = Path(__file__).parents[2] / "configs" / "kuhn_poker_tiny.yaml"

# A toy vocabulary: 0 is the end of the turn (no text), the others spell parts of the moves and tags.
TEXTS = ["", "<action>", "bet", "b", "et", "check", "</action>", " ", "<", "action>", "x", "</"]
BET_OR_CHECK = ActionConstraint(TokenTexts.of(TEXTS), stop_ids=(0,), moves=("bet", "check"))


def test_the_reasoning_before_the_action_is_free() -> None:
    assert BET_OR_CHECK.allowed("") is None
    assert BET_OR_CHECK.allowed("<past>they bet</past><plan>check") is None


def test_after_the_tag_only_a_legal_move_then_the_closing_tag_then_the_end() -> None:
    assert BET_OR_CHECK.allowed("<plan>x</plan><action>") == (2, 3, 5)  # "bet", "b", "check"
    assert BET_OR_CHECK.allowed("<action>b") == (4,)  # "et"
    assert BET_OR_CHECK.allowed("<action>bet") == (6, 8, 11)  # "</action>", "<", "</"
    assert BET_OR_CHECK.allowed("<action>bet</") == (9,)  # "action>"
    assert BET_OR_CHECK.allowed("<action>bet</action>") == (0,)


def test_an_action_that_already_left_the_legal_moves_is_left_free() -> None:
    # A tokenizer that merged the tag with a letter can write past every move's spelling: nothing is forced then.
    assert BET_OR_CHECK.allowed("<action>x") is None


def test_the_allowed_sets_along_a_response() -> None:
    # "<plan>" spelt by "<" + "x"-free tokens is not needed: the free tokens get (), the constrained ones their sets.
    response = [10, 1, 3, 4, 6, 0]  # "x", "<action>", "b", "et", "</action>", end
    along = [BET_OR_CHECK.allowed("".join(TEXTS[t] for t in response[:i])) or () for i in range(len(response))]
    assert along == [(), (), (2, 3, 5), (4,), (6, 8, 11), (0,)]


def test_token_texts_read_each_token_as_it_adds_to_a_response(warm_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(warm_model_dir)
    vocabulary = token_texts(tokenizer)
    ids = tokenizer.encode("<past>x</past>\n<action>bet</action>", add_special_tokens=False)
    assert "".join(vocabulary.texts[token] for token in ids) == tokenizer.decode(ids, skip_special_tokens=True)


def constrained_games(backend: str, warm_model_dir: Path, **engine: object):
    """Step 1's games of the warm-started Kuhn model (depth 2) with the move constrained, on `backend`; and the
    samples with their advantages."""
    config = load_config(str(CONFIG), ["reasoning.depth=2", f"engine.backend={backend}", "algorithm.groups_per_step=3",
                                       "algorithm.group_size=4", "reasoning.max_new_tokens=224",
                                       "reasoning.constrain_action=true"])
    settings = rollout_settings(config)
    assert settings.constrain_action and engine_settings(config).constrain_action
    built = build_engine(backend, warm_model_dir, engine_settings(config), **engine)
    try:
        runner = RolloutRunner(settings, built.encode_chat, built.generate, snapshot=built.generate)
        plans = plan_groups(settings, config.run.seed, 1, 0, config.algorithm.groups_per_step)
        episodes = runner.run(plans, derive_seed(config.run.seed, 1, 0, "sampling"))
    finally:
        built.close()
    scored = score_episodes(episodes, ComparisonWeights())
    samples, _ = compute_advantages(scored, advantage_config(config))
    return config, episodes, samples


@pytest.fixture(scope="module")
def constrained_step(warm_model_dir: Path):
    """`constrained_games` on the hf engine."""
    return constrained_games("hf", warm_model_dir, device="cpu")


@pytest.fixture(scope="module")
def vllm_constrained_step(warm_model_dir: Path):
    """`constrained_games` on an in-process vLLM engine (its logits processor masks)."""
    return constrained_games("vllm", warm_model_dir)


@pytest.mark.parametrize("step", ["constrained_step", "vllm_constrained_step"])
def test_every_response_that_opens_its_action_plays_a_legal_move(step: str, request: pytest.FixtureRequest) -> None:
    _, episodes, _ = request.getfixturevalue(step)
    turns = [turn for episode in episodes for turn in episode.turns if turn.response is not None]
    opened = [turn for turn in turns if "<action>" in turn.response_text]
    assert len(opened) >= len(turns) // 2 > 0  # the warm-started model writes the format
    assert all(turn.valid for turn in opened)
    for turn in opened:
        assert len(turn.allowed_token_ids) == len(turn.response_token_ids)
        constrained = [(token, ids) for token, ids in zip(turn.response_token_ids, turn.allowed_token_ids,
                                                          strict=True) if ids]
        assert constrained and all(token in ids for token, ids in constrained)


def by_hand(model: torch.nn.Module, sample: TrainSample, temperature: float) -> list[float]:
    """A sample's response log-probs from one unpadded forward pass: each constrained token's renormalised over its
    allowed ids, a free token's the plain one."""
    ids = torch.tensor([[*sample.prompt_token_ids, *sample.response_token_ids]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample.prompt_token_ids) - 1 : -1] / temperature
    plain = torch.log_softmax(logits.double(), dim=-1)
    return [(plain[i, token] - (torch.logsumexp(plain[i, list(allowed)], dim=0) if allowed else 0.0)).item()
            for i, (token, allowed) in enumerate(zip(sample.response_token_ids, sample.allowed_token_ids, strict=True))]


def learner_logprobs(model: torch.nn.Module, samples: list[TrainSample], temperature: float) -> list[list[float]]:
    batch = TrainBatch.collate(samples, pad_token_id=0)
    assert batch.allowed is not None
    with torch.no_grad():
        values = sequence_logprobs(model, batch, temperature)
    return [values[row, : len(sample.response_token_ids)].tolist() for row, sample in enumerate(samples)]


@pytest.mark.parametrize(("step", "tolerance"), [("constrained_step", 1e-4), ("vllm_constrained_step", 2e-3)])
def test_the_learner_scores_constrained_tokens_as_the_engine_sampled_them(
    step: str, tolerance: float, request: pytest.FixtureRequest, warm_model_dir: Path
) -> None:
    # vLLM's kernels differ from the learner's forward pass in the last digits (tolerance 2e-3 a token); a mask that
    # disagreed would be off by the log of the masked mass, about 1 or more (test below).
    config, _, samples = request.getfixturevalue(step)
    samples = [sample for sample in samples if sample.allowed_token_ids][:8]
    assert samples
    temperature = config.reasoning.temperature
    model = AutoModelForCausalLM.from_pretrained(warm_model_dir, dtype=torch.float32).eval()
    for sample, values in zip(samples, learner_logprobs(model, samples, temperature), strict=True):
        assert values == pytest.approx(list(sample.behaviour_logprobs), abs=tolerance)
        assert values == pytest.approx(by_hand(model, sample, temperature), abs=1e-4)


def test_the_mask_renormalises_where_the_model_spreads_its_mass(constrained_step, tiny_model_dir) -> None:
    # The random-weight model puts most of each constrained position's mass outside its allowed ids: the learner's
    # log-prob there is far above the unmasked one, and still the renormalised one by hand.
    config, _, samples = constrained_step
    temperature = config.reasoning.temperature
    samples = [sample for sample in samples if sample.allowed_token_ids][:8]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    gaps = []
    for sample, values in zip(samples, learner_logprobs(model, samples, temperature), strict=True):
        assert values == pytest.approx(by_hand(model, sample, temperature), abs=1e-4)
        unmasked = by_hand(model, dataclasses.replace(sample, allowed_token_ids=((),) * len(values)), temperature)
        gaps.extend(values[i] - unmasked[i] for i, ids in enumerate(sample.allowed_token_ids) if ids)
    assert gaps and min(gaps) >= 0 and sum(gaps) / len(gaps) > 1.0


def test_a_vllm_engine_built_without_the_processor_refuses_constrained_requests(tiny_model_dir: Path) -> None:
    config = load_config(str(CONFIG), ["reasoning.constrain_action=true", "engine.backend=vllm"])
    assert config.reasoning.constrain_action and engine_settings(config).constrain_action
    with build_engine("vllm", tiny_model_dir, max_model_len=512) as engine:
        prompt = engine.encode_chat([{"role": "user", "content": "hi"}])
        with pytest.raises(ValueError, match="built without constrain_action"):
            engine.generate([prompt], SamplingParams(max_tokens=4, actions=(("bet", "pass"),)))


@pytest.mark.long
def test_a_multiprocess_vllm_engine_loads_the_processor_by_name(warm_model_dir: Path) -> None:
    # The engine core runs in its own process, as on a GPU: the processor is imported there by its name.
    with build_engine("vllm", warm_model_dir, max_model_len=1024, multiprocess=True, constrain_action=True) as engine:
        env = games.make("kuhn_poker")
        env.reset(seed=1)
        agent = env.agent_selection
        moves = tuple(env.action_name(action, agent) for action in env.legal_actions(agent))
        prompt = engine.encode_chat(build_messages(env, agent, 2))
        generations = engine.generate([prompt] * 8, SamplingParams(max_tokens=224, seed=0, actions=(moves,) * 8))
    opened = [g for g in generations if "<action>" in g.text]
    assert opened and all(any(f"<action>{move}</action>" in g.text for move in moves) for g in opened)
    assert all(token in ids for g in opened for token, ids in zip(g.token_ids, g.allowed_token_ids, strict=True) if ids)


def test_free_sampling_params_carry_no_moves() -> None:
    assert SamplingParams().actions == ()
