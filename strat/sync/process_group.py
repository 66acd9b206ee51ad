"""The weight group of `engine.weight_sync=collective`: a torch.distributed process group of its own, in which the
learner (rank 0) broadcasts its weights to every inference worker (ranks 1..N), NCCL between GPUs, gloo over TCP.

It is apart from vLLM's own process group and from the learner ranks' (FSDP2) one: built like vLLM's
`stateless_init_torch_distributed_process_group` (a TCP store on rank 0's node, a `ProcessGroup` with one backend),
but without vLLM, so that the learner and the hf engine need none. Every member must call `WeightGroup.join` at the
same time. A sync: the learner hands the agents the weights' metadata (`describe`, through Ray), then `send`s the
tensors in that order, one broadcast each, while every member `receive`s them. No global torch.distributed state
is touched, so a learner rank that is also in the FSDP2 group, or a vLLM worker in vLLM's, can join one."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple
from urllib.parse import urlsplit

import torch
from torch.distributed import PrefixStore, ProcessGroup, ProcessGroupGloo, TCPStore

GROUP_TIMEOUT_S = 300.0
"""How long a member waits for the others: to meet at the rendezvous, and for each broadcast."""
BACKENDS = ("nccl", "gloo")


class TensorMeta(NamedTuple):
    """One tensor of a broadcast as the receivers allocate it: its name, dtype (`float32`, `bfloat16`...) and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def describe(state: Mapping[str, torch.Tensor]) -> list[TensorMeta]:
    """The metadata of a state dict, in its order (the order of the broadcasts)."""
    return [TensorMeta(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in state.items()]


def as_metadata(items: Iterable[Sequence]) -> list[TensorMeta]:
    """TensorMeta again from plain (name, dtype, shape) sequences, as they arrive through vLLM's RPC."""
    return [TensorMeta(str(name), str(dtype), tuple(int(n) for n in shape)) for name, dtype, shape in items]


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"tensor dtype {name!r} is not a torch dtype")
    return dtype


class Rendezvous:
    """Where a group meets: `tcp://host:port` with a port the OS assigned on rank 0's node, held (bound, listening)
    from the moment the address is handed out until rank 0's TCP store takes the socket over. A port found free and
    released before use could be taken by another process in between, a race on a busy machine."""

    def __init__(self, host: str) -> None:
        self._socket: socket.socket | None = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._socket.bind(("", 0))
        self._socket.listen()
        port = self._socket.getsockname()[1]
        self.address = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def store(self, world_size: int, timeout: datetime.timedelta) -> TCPStore:
        """Rank 0's TCP store, serving on the held socket; blocks until the other `world_size - 1` members have
        connected. Once only: the store then owns the socket."""
        if self._socket is None:
            raise RuntimeError(f"the rendezvous at {self.address} was used already: a new group needs a new one")
        held, self._socket = self._socket, None
        url = urlsplit(self.address)
        return TCPStore(url.hostname, url.port, world_size, True, timeout, master_listen_fd=held.detach())

    def close(self) -> None:
        """Release the port unused."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def member_store(address: str | Rendezvous, rank: int, world_size: int, timeout: datetime.timedelta) -> TCPStore:
    """The TCP store through which a group's members meet: rank 0 serves it on the `Rendezvous` it handed the address
    out of (and waits for the others), the other ranks connect to that address (`tcp://host:port`)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"group rank {rank} is outside a world of {world_size}")
    if (rank == 0) != isinstance(address, Rendezvous):
        raise ValueError(f"group rank {rank}: rank 0, and only rank 0, joins with the Rendezvous it handed out")
    if isinstance(address, Rendezvous):
        return address.store(world_size, timeout)
    url = urlsplit(address)
    if url.scheme != "tcp" or url.hostname is None or url.port is None:
        raise ValueError(f"group address {address!r}: expected tcp://host:port")
    return TCPStore(url.hostname, url.port, world_size, False, timeout)


class WeightGroup:
    """This process's membership of a weight group."""

    def __init__(self, group: torch.distributed.ProcessGroup, store: torch.distributed.Store, rank: int,
                 world_size: int, backend: str) -> None:
        self._group: torch.distributed.ProcessGroup | None = group
        self._store = store  # rank 0 serves the store: keep it alive with the group
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    @classmethod
    def join(cls, address: str | Rendezvous, rank: int, world_size: int, backend: str,
             timeout_s: float = GROUP_TIMEOUT_S) -> WeightGroup:
        """Meet the other members at `address` (`tcp://host:port` on rank 0's node, which serves the store there; rank
        0 passes the `Rendezvous` it handed the address out of). Blocks until all `world_size` members have joined, or
        raises after `timeout_s`."""
        if backend not in BACKENDS:
            raise ValueError(f"weight group backend {backend!r} (allowed: {', '.join(BACKENDS)})")
        if backend == "nccl" and not torch.cuda.is_available():
            raise RuntimeError(f"weight group rank {rank}: backend nccl needs a GPU and this process sees none"
                               " (engine.collective_backend=gloo works on CPUs)")
        timeout = datetime.timedelta(seconds=timeout_s)
        store = member_store(address, rank, world_size, timeout)
        prefixed = PrefixStore("strat-weights", store)
        group = ProcessGroup(prefixed, rank, world_size)
        if backend == "gloo":
            implementation = ProcessGroupGloo(prefixed, rank, world_size, timeout=timeout)
            kind, device = ProcessGroup.BackendType.GLOO, torch.device("cpu")
        else:
            # Imported here: CPU builds of torch have no ProcessGroupNCCL.
            from torch.distributed import ProcessGroupNCCL

            options = ProcessGroupNCCL.Options()
            options._timeout = timeout
            implementation = ProcessGroupNCCL(prefixed, rank, world_size, options)
            kind, device = ProcessGroup.BackendType.NCCL, torch.device("cuda")
        group._set_default_backend(kind)
        implementation._set_sequence_number_for_group()
        group._register_backend(device, kind, implementation)
        return cls(group, store, rank, world_size, backend)

    def send(self, state: Mapping[str, torch.Tensor], metadata: Sequence[TensorMeta]) -> None:
        """Rank 0: broadcast the tensors of `state` that `metadata` lists, in its order (what the others receive)."""
        if self.rank != 0:
            raise RuntimeError(f"weight group rank {self.rank} cannot send: only rank 0 (the learner) broadcasts")
        group = self._live()
        try:
            for meta in metadata:
                tensor = state[meta.name]
                if (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)) != (meta.dtype, meta.shape):
                    raise ValueError(f"{meta.name}: {tensor.dtype} {tuple(tensor.shape)} differs from its"
                                     f" metadata {meta}")
                group.broadcast(tensor.to(self.device).contiguous(), 0).wait()
            self._synchronize()
        except BaseException:
            self.close()  # the others then fail at once instead of waiting for the timeout
            raise

    def receive(self, metadata: Sequence[TensorMeta]) -> Iterator[tuple[str, torch.Tensor]]:
        """Ranks 1..N: each broadcast tensor in turn, as (name, tensor) in a new buffer on this member's device."""
        group = self._live()
        try:
            for meta in metadata:
                buffer = torch.empty(meta.shape, dtype=_dtype(meta.dtype), device=self.device)
                group.broadcast(buffer, 0).wait()
                yield meta.name, buffer
            self._synchronize()
        except GeneratorExit:
            raise
        except BaseException:
            self.close()
            raise

    def receive_into(self, metadata: Sequence[TensorMeta],
                     load: Callable[[Iterator[tuple[str, torch.Tensor]]], None]) -> None:
        """Receive a whole broadcast, `load` consuming the tensors as they come. Should `load` fail part-way, the rest
        of the broadcast is still received (and dropped) before its error is raised: no member is left waiting."""
        incoming = self.receive(metadata)
        try:
            load(incoming)
        finally:
            for _ in incoming:
                pass

    def close(self) -> None:
        """Leave the group (it cannot be joined again: the members form a new one)."""
        group, self._group = self._group, None
        if group is not None:
            group.shutdown()
        self._store = None

    def _live(self) -> torch.distributed.ProcessGroup:
        if self._group is None:
            raise RuntimeError(f"weight group rank {self.rank} was closed (after an error, or replaced): form it again")
        return self._group

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class Membership:
    """The weight group a process (an engine's worker, an hf engine, the learner) is in now, if any: joining again
    leaves the old group first, so that a group formed anew after an agent restart replaces it."""

    def __init__(self) -> None:
        self.group: WeightGroup | None = None

    def join(self, address: str | Rendezvous, rank: int, world_size: int, backend: str) -> None:
        self.leave()
        self.group = WeightGroup.join(address, rank, world_size, backend)

    def current(self, who: str) -> WeightGroup:
        if self.group is None:
            raise RuntimeError(f"{who} is in no weight group: join_weight_group must come before a collective sync")
        return self.group

    def leave(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            group.close()
