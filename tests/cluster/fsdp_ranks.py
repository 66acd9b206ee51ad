"""Two FSDP2 learner ranks under gloo in spawned processes (no Ray), for tests/cluster/test_fsdp_load.py: each rank
builds a `PolicyLearner`, notes what it read and held while building, and runs the checks of `fsdp_ranks.run`; rank 0
also runs an unsharded learner beside it. The figures go to `<out>/rank<r>.pt`."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def spawn_two_ranks(model_dir: Path, settings: Any, out: Path, timeout_s: float = 600) -> list[dict[str, Any]]:
    """Run `rank_main` in two spawned processes and return each rank's figures."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    store = out / "store"
    processes = [context.Process(target=rank_main, args=(rank, 2, str(store), model_dir, settings, out))
                 for rank in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout_s)
    for process in processes:
        if process.is_alive():
            process.kill()
    codes = [process.exitcode for process in processes]
    errors = [(out / f"rank{rank}.error").read_text() for rank in range(2) if (out / f"rank{rank}.error").exists()]
    assert codes == [0, 0] and not errors, (codes, errors)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def rank_main(rank: int, world_size: int, store: str, model_dir: Path, settings: Any, out: Path) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, world_size), rank=rank, world_size=world_size)
        figures = run(rank, model_dir, settings)
        torch.save(figures, out / f"rank{rank}.pt")
    except BaseException:
        import traceback

        (out / f"rank{rank}.error").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(rank: int, model_dir: Path, settings: Any) -> dict[str, Any]:
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    from strat.algorithm.records import TrainBatch
    from strat.model import weight_io
    from strat.train.learner import PolicyLearner

    from .sync_helpers import perturbing_samples

    reads: list[str] = []
    pretrained = AutoModelForCausalLM.from_pretrained.__func__

    def counting(cls, *args, **kwargs):  # every read of the weights goes through from_pretrained
        reads.append(str(args[0]))
        return pretrained(cls, *args, **kwargs)

    AutoModelForCausalLM.from_pretrained = classmethod(counting)
    tracker = MemTracker()
    with tracker:
        learner = PolicyLearner(model_dir, settings)
    figures: dict[str, Any] = {
        "reads": reads,
        "build_peak_bytes": tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"],
        "model_bytes": sum(p.to_local().nbytes for p in learner.model.parameters()),
        "reference_bytes": sum(p.to_local().nbytes for p in learner.reference.parameters()),
        "dtensors": all(isinstance(p, DTensor) for p in [*learner.model.parameters(), *learner.reference.parameters()]),
        "buffers": {name: b.clone() for name, b in learner.model.named_buffers()},
        "tied": learner._base_model().lm_head.weight is learner._base_model().get_input_embeddings().weight,
        "full": weight_io.full_state(learner.model, True),
        "reference_full": weight_io.full_state(learner.reference, True),
    }
    samples = perturbing_samples(learner.tokenizer)
    batch = TrainBatch.collate(samples, learner.pad_id)
    figures["reference_logprobs"] = learner._reference_logprobs(batch)
    figures["updates"] = [learner.update(samples)]
    figures["snapshot"] = learner.take_snapshot()
    figures["snapshot_reference_full"] = weight_io.full_state(learner.reference, True)
    figures["updates"] += [learner.update(samples), learner.update(samples)]
    figures["full_after"] = learner.merged_state_dict()
    if rank == 0:
        single = PolicyLearner(model_dir, replace(settings, fsdp=False))
        figures["single_full"] = weight_io.full_state(single.model, False)
        figures["single_tied"] = single._base_model().lm_head.weight is single._base_model().get_input_embeddings().weight
        figures["single_buffers"] = {name: b.clone() for name, b in single.model.named_buffers()}
        figures["single_reference_logprobs"] = single._reference_logprobs(batch)
        figures["single_updates"] = [single.update(samples)]
        single.take_snapshot()
        figures["single_updates"] += [single.update(samples), single.update(samples)]
        figures["single_full_after"] = single.merged_state_dict()
        figures["single_bytes"] = sum(p.nbytes for p in single.model.parameters())
        figures["single_reference_bytes"] = sum(p.nbytes for p in single.reference.parameters())
    return figures
