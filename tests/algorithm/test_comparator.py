"""The comparator with model-backed agreement on the tiny model: a separate judge engine, an embedder, the policy judging."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import torch
from transformers import AutoModel, AutoTokenizer

from strat.algorithm.comparison import AgreementPair, ComparisonWeights, judge_messages
from strat.algorithm.records import NO_SCORE
from strat.config_loading import load_config
from strat.engines import EngineSettings
from strat.play.settings import engine_settings
from strat.train.agent_actor import AgentActor
from strat.train.agreement_models import JUDGE_SAMPLING, AgreementSettings
from strat.train.comparator_actor import Comparator, CoTComparator
from strat.train.settings import agreement_settings

from .helpers import kuhn_self_play

ROOT = Path(__file__).resolve().parents[2]
_PAIR = AgreementPair("k0", 0, "kuhn_poker", "a bet shows strength", "player 0 bet shows strength\nbelief: King")


def test_separate_judge_scores_in_one_batched_engine_call(tiny_model_dir: Path) -> None:
    comparator = Comparator(ComparisonWeights(), AgreementSettings("judge", model_dir=str(tiny_model_dir)))
    engine = comparator.engine
    assert engine is not None
    calls = []
    generate = engine.generate

    def counted(prompts, params):
        calls.append((list(prompts), params))
        return generate(prompts, params)

    engine.generate = counted  # type: ignore[method-assign]
    episodes = [kuhn_self_play(episode_id=f"k{i}") for i in range(3)]
    scored = comparator.score(episodes)
    # One call for the three episodes' agreement pairs, greedy, in the judge's chat template.
    assert len(calls) == 1
    prompts, params = calls[0]
    assert prompts == [engine.encode_chat(judge_messages(_PAIR))] * 3
    assert params == JUDGE_SAMPLING
    # Random weights answer nonsense: no score is read, so turn 0 keeps only its prediction (0).
    for item in scored:
        first = item.scores[0]
        assert (first.predict, first.agreement, first.score, first.comparable) == (0.0, None, 0.0, True)
    comparator.score([kuhn_self_play(depth=1)])  # no agreement pair: the judge is not asked
    assert len(calls) == 1


def test_nonsense_judge_alone_leaves_turns_not_comparable(tiny_model_dir: Path) -> None:
    settings = AgreementSettings("judge", model_dir=str(tiny_model_dir))
    comparator = Comparator(ComparisonWeights(predict=0.0, belief=0.0), settings)
    [scored] = comparator.score([kuhn_self_play()])
    assert [(s.agreement, s.comparable, s.score) for s in scored.scores] == [(None, False, NO_SCORE)] * 2


def test_embedding_agreement_is_one_for_identical_texts_and_symmetric(tiny_model_dir: Path) -> None:
    comparator = Comparator(ComparisonWeights(), AgreementSettings("embedding", model_dir=str(tiny_model_dir)))
    a, b = "a bet shows strength", "player 0 holds a weak card"
    same, forth, back = comparator.agreement([
        AgreementPair("e", 0, "kuhn_poker", a, a),
        AgreementPair("e", 1, "kuhn_poker", a, b),
        AgreementPair("e", 2, "kuhn_poker", b, a),
    ])
    assert same == pytest.approx(1.0, abs=1e-5)
    assert forth == pytest.approx(back, abs=1e-6)
    # The independent reference: each text alone through transformers, its last hidden states averaged and
    # normalised, and the cosine of the two clipped to [0, 1].
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        a_vec, b_vec = (
            torch.nn.functional.normalize(model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(0),
                                          dim=0)
            for text in (a, b)
        )
    assert forth == pytest.approx(min(1.0, max(0.0, float(a_vec @ b_vec))), abs=1e-5)


def test_trainer_builds_the_judge_like_the_agents_on_one_device(tiny_model_dir: Path) -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", [
        "comparison.agreement=judge", f"comparison.judge_model={tiny_model_dir}", "engine.backend=hf",
        "engine.tensor_parallel_size=2", "model.trust_remote_code=true",
    ])
    settings = agreement_settings(config)
    assert (settings.method, settings.judge_engine, settings.model_dir, settings.backend) == (
        "judge", "separate", str(tiny_model_dir), "hf"
    )
    assert settings.engine == dataclasses.replace(engine_settings(config), tensor_parallel_size=1, trust_remote_code=False)


def test_model_backed_agreement_needs_its_model_or_agents() -> None:
    with pytest.raises(ValueError, match="comparison.judge_model"):
        Comparator(ComparisonWeights(), AgreementSettings("judge"))
    with pytest.raises(ValueError, match="comparison.embedding_model"):
        Comparator(ComparisonWeights(), AgreementSettings("embedding"))
    with pytest.raises(ValueError, match="judge_engine=policy"):
        Comparator(ComparisonWeights(), AgreementSettings("judge", judge_engine="policy"))


@pytest.fixture
def local_ray() -> Iterator[None]:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_policy_judge_asks_the_agent_actors(local_ray, tiny_model_dir: Path) -> None:
    agents = [AgentActor.options(num_cpus=0.5).remote("hf", str(tiny_model_dir), EngineSettings()) for _ in range(2)]
    comparator = CoTComparator.options(num_cpus=0.5).remote(
        ComparisonWeights(), AgreementSettings("judge", judge_engine="policy"), agents
    )
    scored = ray.get(comparator.score.remote([kuhn_self_play(episode_id=f"k{i}") for i in range(3)]))
    # Three pairs over two agents (2 + 1); the tiny policy's greedy verdict is its nonsense, read as no score.
    verdict = ray.get(agents[1].complete_chat.remote([judge_messages(_PAIR)], JUDGE_SAMPLING))
    assert len(verdict) == 1 and "Score" not in verdict[0]
    assert [item.scores[0].agreement for item in scored] == [None] * 3
    # A restarted agent replaces the dead one.
    ray.kill(agents[0], no_restart=True)
    ray.get(comparator.set_agents.remote(agents[1:]))
    assert len(ray.get(comparator.score.remote([kuhn_self_play()]))) == 1
