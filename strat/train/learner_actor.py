"""Learner actor: the policy update, weight export and checkpoints; and the group of learner ranks
(data-parallel FSDP2) that the driver holds as one handle."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist
from ray.exceptions import GetTimeoutError

from strat.algorithm.records import TrainSample
from strat.errors import PlacementError
from strat.model.build import resolve_device
from strat.model.checkpoint import Checkpoint
from strat.sync.process_group import GROUP_TIMEOUT_S, Membership, Rendezvous, TensorMeta, describe, member_store
from strat.sync.weights import POLICY, SNAPSHOT, prune_versions
from strat.train.learner import LearnerSettings, PolicyLearner


@ray.remote
class Learner:
    """Wraps PolicyLearner for Ray. Alone (`world_size=1`) it builds the model at once; as one rank of a
    LearnerGroup it builds it in `join`, after joining the group's process group (the model is then
    sharded with FSDP2, and every call is a collective that all ranks must make)."""

    def __init__(self, model_path: str, settings: LearnerSettings, rank: int = 0, world_size: int = 1) -> None:
        self.model_path = model_path
        self.settings = settings
        self.rank = rank
        self.world_size = world_size
        self.learner: PolicyLearner | None = None
        self._join_error: str | None = None
        self._staged: dict[str, torch.Tensor] = {}
        """The policy weights of the last `stage_weights`, kept for the agents' weight group (rank 0)."""
        self._weight_groups = {POLICY: Membership(), SNAPSHOT: Membership()}
        """Rank 0's place in the weight group of the policy's agents and in the snapshot agent's."""
        self._rendezvous: dict[str, Rendezvous] = {}
        """The meeting points rank 0 handed out, by address, each held until its group meets."""
        if world_size == 1:
            self.learner = PolicyLearner(model_path, settings)

    def rendezvous_address(self) -> str:
        """`tcp://<this node's IP>:<a port the OS assigned, held until the group meets>`: where the group's ranks, or a
        weight group, meet (asked of rank 0)."""
        rendezvous = Rendezvous(ray.util.get_node_ip_address())
        self._rendezvous[rendezvous.address] = rendezvous
        return rendezvous.address

    def _meeting_point(self, address: str) -> str | Rendezvous:
        """Rank 0 serves the rendezvous it handed `address` out of; the others connect to it."""
        if self.rank != 0:
            return address
        if address not in self._rendezvous:
            raise RuntimeError(f"learner rank 0 did not hand out {address}: ask rendezvous_address() for one")
        return self._rendezvous.pop(address)

    def join(self, address: str) -> None:
        """Join the group's process group (NCCL on a GPU, gloo on the CPU) at `address` and build this rank's
        share of the FSDP2-sharded model. Every rank must call it at the same time."""
        try:
            backend = "nccl" if resolve_device(self.settings.device).type == "cuda" else "gloo"
            timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)
            store = member_store(self._meeting_point(address), self.rank, self.world_size, timeout)
            dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size)
            self.learner = PolicyLearner(self.model_path, self.settings)
        except Exception as err:
            self._join_error = f"{type(err).__name__}: {err}"
            raise

    def ready(self) -> bool:
        self._policy()
        return True

    def _policy(self) -> PolicyLearner:
        if self.learner is None:
            why = (f"joining its process group failed ({self._join_error})" if self._join_error
                   else "join() was not called")
            raise RuntimeError(f"learner rank {self.rank} of {self.world_size} has no model: {why}")
        return self.learner

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        return self._policy().update(samples)

    def set_rehearsal(self, samples: list[TrainSample], score: bool) -> list[TrainSample]:
        """DPH-RL's rehearsal samples (`PolicyLearner.set_rehearsal`); with `score`, scored at the current weights."""
        return self._policy().set_rehearsal(samples, score)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The merged weights (empty on ranks other than 0, which only take part in gathering them)."""
        return self._policy().state_dict()

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        return self._policy().take_snapshot()

    def refresh_anchor(self) -> None:
        """Move the KL anchor (`kl_reference: snapshot`) to the current weights, for a run with no snapshot
        opponent: the learner keeps them as its snapshot (checkpointed and restored with it), nothing is returned."""
        self._policy().take_snapshot()

    def export_weights_dir(self, path: str, prune_older: bool = False) -> str:
        """Write the current (merged) weights as safetensors into `path`, atomically; returns the absolute path.

        `prune_older` first removes the other `step_<n>` directories next to `path` (older syncs, which every
        engine has already loaded), so that the sync directory holds one copy of the model."""
        if prune_older and self.rank == 0:
            prune_versions(Path(path).absolute())
        return self._policy().export_weights_dir(path)

    def take_snapshot_dir(self, path: str, prune_older: bool = False) -> str:
        """Freeze the current weights as the snapshot opponent's and write them into `path` (as export_weights_dir)."""
        if prune_older and self.rank == 0:
            prune_versions(Path(path).absolute())
        return self._policy().take_snapshot_dir(path)

    def stage_weights(self) -> list[TensorMeta]:
        """Gather the current weights (as `state_dict`) for `broadcast_weights(POLICY)` and keep them until the next
        call, so that an agent restarted meanwhile gets the version the others hold; their metadata (rank 0's)."""
        self._staged = self._policy().state_dict()
        return describe(self._staged)

    def stage_snapshot(self, take: bool = True) -> list[TensorMeta]:
        """Freeze the current weights as the snapshot opponent's (`take=False`: the snapshot a checkpoint restored)
        for `broadcast_weights(SNAPSHOT)`; their metadata (rank 0's)."""
        policy = self._policy()
        snapshot = policy.take_snapshot() if take else policy.snapshot
        if snapshot is None:
            raise RuntimeError("the learner holds no snapshot to broadcast (none was taken or restored)")
        return describe(snapshot)

    def join_weight_group(self, weights: str, address: str, world_size: int, backend: str) -> None:
        """Join (as rank 0, serving the rendezvous at `address`) the weight group that carries `weights` (POLICY or
        SNAPSHOT) to the agents; blocks until they have all joined. Only the learner's rank 0 takes part."""
        self._rank0("join a weight group")
        self._weight_groups[weights].join(self._meeting_point(address), 0, world_size, backend)

    def broadcast_weights(self, weights: str) -> int:
        """Broadcast the staged weights (POLICY) or the snapshot (SNAPSHOT) in their weight group, whose members must be
        receiving them now; returns the number of tensors."""
        self._rank0("broadcast weights")
        group = self._weight_groups[weights].current(f"the learner's {weights} weights")
        state = self._staged if weights == POLICY else self._policy().snapshot
        if not state:
            raise RuntimeError(f"no {weights} weights are staged: stage_weights/stage_snapshot first")
        metadata = describe(state)
        group.send(state, metadata)
        return len(metadata)

    def _rank0(self, what: str) -> None:
        if self.rank != 0:
            raise RuntimeError(f"learner rank {self.rank} cannot {what}: rank 0 holds the gathered weights")

    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """The training model's own greedy completions (transformers generate): what a synced engine must match."""
        return self._policy().greedy(prompts, max_new_tokens)

    def save(self, run_dir: str, step: int, loop_state: dict[str, Any], keep: int) -> str:
        return str(self._policy().save(Path(run_dir), step, loop_state, keep).path)

    def load(self, path: str, step: int) -> dict[str, Any]:
        return self._policy().load(Checkpoint(Path(path), step))


class LearnerGroup:
    """The learner's ranks behind one handle, the only way the driver (and the tests) call a learner. Each method
    below calls the Learner method of that name on every rank (under FSDP2 each is a collective that needs all of
    them) and returns rank 0's ObjectRef at once; `get(ref)` waits for every rank and returns rank 0's result,
    raising the first rank's failure as soon as it happens. With one rank it is that one actor.

    Rank 0 alone holds the gathered weights; a weight group (`strat.sync.weights.WeightBroadcast`) talks to
    `ranks[0]` directly."""

    def __init__(self, ranks: list[Any]) -> None:
        if not ranks:
            raise ValueError("a learner group needs at least one rank")
        self.ranks = list(ranks)
        self._others: dict[Any, list[Any]] = {}
        """Rank 0's ObjectRef of a call -> the other ranks' refs of that call, until `get` waits for them."""

    @classmethod
    def start(cls, model_path: str, settings: LearnerSettings, world_size: int,
              options: Callable[[int], dict[str, Any]], timeout_s: float = 600.0) -> LearnerGroup:
        """Start `world_size` learner actors, `options(rank)` giving each its Ray options. Several ranks meet at
        a free port on rank 0's node and shard the model with FSDP2. Returns once rank 0 runs; each rank's
        `ready` answers when its model is built (or raises why not)."""
        if world_size < 1:
            raise ValueError(f"world_size={world_size}: at least one learner rank is needed")
        ranks = [Learner.options(**options(rank)).remote(model_path, settings, rank, world_size)
                 for rank in range(world_size)]
        if world_size > 1:
            try:
                address = ray.get(ranks[0].rendezvous_address.remote(), timeout=timeout_s)
            except GetTimeoutError:
                for rank in ranks:
                    ray.kill(rank)
                raise PlacementError(f"learner rank 0 did not start within {timeout_s:.0f} s "
                                     f"(resources.actor_start_timeout_s); the cluster has"
                                     f" {ray.available_resources()} free") from None
            for rank in ranks:
                rank.join.remote(address)
        return cls(ranks)

    # --- the Learner's methods, on every rank; each returns rank 0's ObjectRef (resolve it with `get`) ----------

    def ready(self) -> ray.ObjectRef:
        """-> True once every rank's model is built (raises why a rank has none)."""
        return self.call("ready")

    def update(self, samples: list[TrainSample]) -> ray.ObjectRef:
        """One policy update on `samples` (each rank trains on its share) -> the update's metrics, dict[str, float]."""
        return self.call("update", samples)

    def set_rehearsal(self, samples: list[TrainSample], score: bool) -> ray.ObjectRef:
        """DPH-RL's rehearsal samples; with `score`, scored at the current weights -> list[TrainSample] as kept."""
        return self.call("set_rehearsal", samples, score)

    def state_dict(self) -> ray.ObjectRef:
        """-> the merged weights, dict[str, torch.Tensor] (Hugging Face names)."""
        return self.call("state_dict")

    def take_snapshot(self) -> ray.ObjectRef:
        """Freeze the current weights as the snapshot opponent's -> those weights, dict[str, torch.Tensor]."""
        return self.call("take_snapshot")

    def refresh_anchor(self) -> ray.ObjectRef:
        """Move the KL anchor (`kl_reference: snapshot`) to the current weights, for a run with no snapshot
        opponent -> None."""
        return self.call("refresh_anchor")

    def export_weights_dir(self, path: str, prune_older: bool = False) -> ray.ObjectRef:
        """Write the current weights as safetensors into `path` (with `prune_older`, the other `step_<n>` versions
        next to it removed first) -> the absolute path written, str."""
        return self.call("export_weights_dir", path, prune_older)

    def take_snapshot_dir(self, path: str, prune_older: bool = False) -> ray.ObjectRef:
        """Freeze the current weights as the snapshot opponent's and write them into `path` (as
        `export_weights_dir`) -> the absolute path written, str."""
        return self.call("take_snapshot_dir", path, prune_older)

    def stage_weights(self) -> ray.ObjectRef:
        """Gather the current weights on rank 0 for a collective sync's broadcast -> their metadata,
        list[TensorMeta]."""
        return self.call("stage_weights")

    def stage_snapshot(self, take: bool = True) -> ray.ObjectRef:
        """Freeze the current weights as the snapshot (`take=False`: the one a checkpoint restored) for a collective
        sync's broadcast -> their metadata, list[TensorMeta]."""
        return self.call("stage_snapshot", take)

    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> ray.ObjectRef:
        """The training model's own greedy completions -> list[list[int]] (what a synced engine must match)."""
        return self.call("greedy", prompts, max_new_tokens)

    def save(self, run_dir: str, step: int, loop_state: dict[str, Any], keep: int) -> ray.ObjectRef:
        """A checkpoint of step `step` under `run_dir` with the driver's `loop_state`, keeping the last `keep`
        -> the checkpoint's path, str."""
        return self.call("save", run_dir, step, loop_state, keep)

    def load(self, path: str, step: int) -> ray.ObjectRef:
        """Restore the checkpoint at `path` (of `step`) -> the loop state saved with it, dict[str, Any]."""
        return self.call("load", path, step)

    # --- calling and waiting ----------------------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> ray.ObjectRef:
        """Call `method` on every rank; rank 0's ObjectRef (resolve it with `get`)."""
        if len(self.ranks) > 1:
            args = tuple(ray.put(arg) for arg in args)  # into the object store once, not once per rank
        refs = [getattr(rank, method).remote(*args) for rank in self.ranks]
        if len(refs) > 1:
            self._others[refs[0]] = refs[1:]
        return refs[0]

    def get(self, ref: ray.ObjectRef) -> Any:
        """Rank 0's result of a call once every rank has finished it. A failed rank's error is raised at once:
        the others may be waiting for it inside a collective."""
        pending = [ref, *self._others.pop(ref, [])]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
        return ray.get(ref)
