"""Where a group meets: a port the OS assigns and rank 0 holds until the group meets, so that no other process can
take it between the address being handed out and the group forming (a port found free and released first could)."""

from __future__ import annotations

import datetime
import errno
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from strat.sync.process_group import Rendezvous, WeightGroup, describe, member_store

TIMEOUT = datetime.timedelta(seconds=60)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_the_port_is_held_until_the_group_meets_on_it() -> None:
    rendezvous = Rendezvous("127.0.0.1")
    port = _port(rendezvous.address)
    assert rendezvous.address == f"tcp://127.0.0.1:{port}" and port > 0
    # Another process taking the port on purpose, as a busy machine might: it cannot.
    with socket.socket() as intruder, pytest.raises(OSError) as taken:
        intruder.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    with ThreadPoolExecutor(1) as learner_side:
        joined = learner_side.submit(WeightGroup.join, rendezvous, 0, 2, "gloo", 60.0)
        receiver = WeightGroup.join(rendezvous.address, 1, 2, "gloo", 60.0)
        sender = joined.result(timeout=60)
        sent = learner_side.submit(sender.send, state, describe(state))
        received = dict(receiver.receive(describe(state)))
        sent.result(timeout=60)
    sender.close()
    receiver.close()
    assert torch.equal(received["w"], state["w"])


def test_rank_0_and_only_rank_0_serves_the_rendezvous() -> None:
    rendezvous = Rendezvous("127.0.0.1")
    try:
        with pytest.raises(ValueError, match="rank 0, and only rank 0"):
            member_store(rendezvous.address, 0, 2, TIMEOUT)
        with pytest.raises(ValueError, match="rank 0, and only rank 0"):
            member_store(rendezvous, 1, 2, TIMEOUT)
        with pytest.raises(ValueError, match="outside a world of 2"):
            member_store(rendezvous.address, 2, 2, TIMEOUT)
    finally:
        rendezvous.close()


def test_a_rendezvous_serves_one_group() -> None:
    rendezvous = Rendezvous("127.0.0.1")
    store = member_store(rendezvous, 0, 1, TIMEOUT)
    store.set("k", "v")
    assert store.get("k") == b"v" and store.port == _port(rendezvous.address)
    with pytest.raises(RuntimeError, match="used already"):
        member_store(rendezvous, 0, 1, TIMEOUT)
