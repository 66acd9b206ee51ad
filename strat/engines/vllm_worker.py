"""What every worker of a Strat vLLM engine can do besides vLLM's own methods (its `worker_extension_cls`): join the
weight group and load the weights broadcast in it (`engine.weight_sync=collective`). vLLM imports this class in
each worker process (in-process or not) and the engine calls the methods with `collective_rpc`."""

from __future__ import annotations

from collections.abc import Sequence

from strat.sync.fingerprint import fingerprint
from strat.sync.process_group import Membership, as_metadata


class WeightGroupWorker:
    """Mixed into vLLM's worker class; `self` is the worker (`rank` within the engine, `reload_weights`)."""

    def join_weight_group(self, address: str, first_rank: int, world_size: int, backend: str) -> int:
        """Join at rank `first_rank` + this worker's rank in its engine; returns that rank."""
        rank = first_rank + self.rank
        self._weight_membership().join(address, rank, world_size, backend)
        return rank

    def receive_weights(self, metadata: Sequence[Sequence]) -> int:
        """Take the learner's broadcast (`metadata`: (name, dtype, shape) of each tensor, in order) and reload the
        model from it, as `load_state_dict` does from tensors; returns the number of tensors."""
        entries = as_metadata(metadata)
        group = self._weight_membership().current(f"vLLM worker {self.rank}")
        # Layerwise reload in one call, the tensors streamed in as they arrive (each layer is processed once complete).
        group.receive_into(entries, lambda weights: self.reload_weights(weights_iterator=weights))
        return len(entries)

    def weights_fingerprint(self) -> str:
        """The fingerprint of this worker's part of the model (`strat.sync.fingerprint`)."""
        return fingerprint(self.get_model().named_parameters())

    def leave_weight_group(self) -> None:
        self._weight_membership().leave()

    def _weight_membership(self) -> Membership:
        # An instance attribute set on first use: vLLM refuses an extension whose class attributes clash with the
        # worker's.
        membership = self.__dict__.get("_strat_weight_membership")
        if membership is None:
            membership = self.__dict__["_strat_weight_membership"] = Membership()
        return membership
