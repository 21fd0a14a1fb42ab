"""Point-to-point transfers between pipeline stages, behind one small interface.

    link = make_link(my_rank, peer_rank)        # after init(); call for every peer in the same global order
    link.send(tensor)                           # to the peer
    t = link.recv(shape, dtype)                 # from the peer
    t = link.exchange(tensor, shape, dtype)     # send and receive on one link without deadlock

Two implementations:

* ``BroadcastLink`` (CPU): MindSpore's CPU backend has no Send/Receive (nor isend/irecv, AlltoAll,
  ReduceScatter), but Broadcast and ``create_group`` work, so a transfer is a Broadcast in a two-rank
  group whose root is the sender.  The receiver passes a buffer of the right shape.  It is a rendezvous:
  both ranks must call the matching op in the same order (the schedules in ``schedules.py`` guarantee it).
* ``NativeLink`` (Ascend/GPU): ``mindspore.mint.distributed.send`` / ``recv``.  Not exercisable on this
  CPU-only machine.

``exchange`` always moves the lower rank's tensor first, then the higher rank's, on both ends, so a
stage's "send activation, receive gradient" pairs with its neighbour's "send gradient, receive activation".
Both run in PyNative (the host loop drives the schedule; stage compute may be ``ms.jit`` compiled).
"""

from __future__ import annotations

import numpy as np

from workloads.parallel.rules import pair_group_name


def native_p2p_available() -> bool:
    """True where MindSpore has real Send/Receive (not on the CPU backend)."""
    import mindspore as ms

    return ms.get_context("device_target") in ("Ascend", "GPU")


class _Link:
    kind = "?"

    def __init__(self, rank: int, peer: int):
        if rank == peer:
            raise ValueError(f"a point-to-point link needs two different ranks, got {rank} and {peer}")
        self.rank, self.peer = rank, peer
        self.bytes_sent = 0
        self.transfers = 0

    def send(self, tensor) -> None:
        raise NotImplementedError

    def recv(self, shape, dtype):
        raise NotImplementedError

    def exchange(self, tensor, shape, dtype):
        """Send ``tensor`` to the peer and receive a ``shape``/``dtype`` tensor from it (lower rank first)."""
        if self.rank < self.peer:
            self.send(tensor)
            return self.recv(shape, dtype)
        got = self.recv(shape, dtype)
        self.send(tensor)
        return got

    def _count(self, tensor) -> None:
        self.bytes_sent += int(np.prod(tensor.shape)) * tensor.itemsize
        self.transfers += 1


class BroadcastLink(_Link):
    """Transfer = Broadcast(root=sender) inside a two-rank communication group."""

    kind = "broadcast-pair"

    def __init__(self, rank: int, peer: int):
        super().__init__(rank, peer)
        from mindspore.communication import create_group

        self.group = pair_group_name(rank, peer)
        create_group(self.group, sorted((rank, peer)))

    def send(self, tensor) -> None:
        from mindspore.mint import distributed as dist

        dist.broadcast(tensor, src=self.rank, group=self.group)
        tensor.asnumpy()  # PyNative launches collectives asynchronously: wait, so spans time the transfer
        self._count(tensor)

    def recv(self, shape, dtype):
        import mindspore as ms
        from mindspore.mint import distributed as dist

        buf = ms.ops.zeros(tuple(shape), dtype)
        dist.broadcast(buf, src=self.peer, group=self.group)
        buf.asnumpy()  # wait for the data (see send)
        return buf


class NativeLink(_Link):
    """Native Send/Receive (HCCL/NCCL). On CPU MindSpore 2.10 refuses these ops."""

    kind = "send-recv"

    def send(self, tensor) -> None:
        from mindspore.mint import distributed as dist

        dist.send(tensor, dst=self.peer)
        tensor.asnumpy()
        self._count(tensor)

    def recv(self, shape, dtype):
        import mindspore as ms
        from mindspore.mint import distributed as dist

        buf = ms.ops.zeros(tuple(shape), dtype)
        dist.recv(buf, src=self.peer)
        buf.asnumpy()
        return buf


def make_link(rank: int, peer: int, native: bool | None = None) -> _Link:
    """A link to ``peer``; ``native=None`` picks Send/Receive where the backend has it, else Broadcast pairs.

    Creating a BroadcastLink creates a communication group: every rank must create its links in the same
    global order (e.g. ascending by the pair's lower rank), or ranks can wait on each other forever.
    """
    if native is None:
        native = native_p2p_available()
    return NativeLink(rank, peer) if native else BroadcastLink(rank, peer)
