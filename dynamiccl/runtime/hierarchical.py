"""Hierarchical all-reduce with seed 000's bandwidth-aware schedule, on process subgroups.

Ranks ``node·k … node·k + k − 1`` form a node. Per piece of the buffer: reduce-scatter inside the
node (every rank ends with 1/k of the piece summed over its node), all-reduce across nodes of that
1/k among the ranks with the same local index (the slow tier carries 1/k of the data, not all of it),
all-gather inside the node. With ``chunks`` > 1 the buffer is cut into pieces that are pipelined:
the cross-node all-reduce of one piece runs while the node reduce-scatters the next — the "active
chunks" of seed 000, which keep the slow tier busy instead of waiting behind the fast one (its FIFO
anti-benefit). All subgroups are created once, in the constructor, which every rank calls together.

Each element is reduced once (in the cross-node step, whose result every member receives; an average
divides it there) and then copied, so all ranks end bit-identical; integers match ``all_reduce``
exactly, floats within rounding.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class HierarchicalAllReduce:
    """Sum-all-reduce over ``world / ranks_per_node`` nodes of ``ranks_per_node`` ranks each."""

    def __init__(self, ranks_per_node: int, chunks: int = 1) -> None:
        world = dist.get_world_size()
        if ranks_per_node < 1 or world % ranks_per_node:
            raise ValueError(f"ranks_per_node={ranks_per_node} does not divide the {world} ranks into "
                             "equal nodes; give the number of ranks each node runs (e.g. GPUs per node)")
        if chunks < 1:
            raise ValueError(f"chunks must be at least 1, got {chunks}")
        self.k, self.chunks = ranks_per_node, chunks
        nodes = world // ranks_per_node
        self.intra, _ = dist.new_subgroups_by_enumeration(
            [list(range(n * ranks_per_node, (n + 1) * ranks_per_node)) for n in range(nodes)])
        self.inter, _ = dist.new_subgroups_by_enumeration(
            [list(range(i, world, ranks_per_node)) for i in range(ranks_per_node)])
        self.nodes = nodes

    def all_reduce(self, tensor: torch.Tensor, divisor: int = 1) -> torch.Tensor:
        """Sums ``tensor`` over all ranks in place, divided by ``divisor``, and returns it.

        The division is applied to this rank's 1/k shard between the cross-node all-reduce and the
        all-gather, so averaging costs a pass over 1/k of the buffer (a float ``tensor``)."""
        flat = tensor.reshape(-1)
        per = self.k * self.chunks
        width = -(-flat.numel() // per)
        in_place = flat.numel() == width * per and flat.data_ptr() == tensor.data_ptr()
        if in_place:
            buf = flat
        else:
            buf = torch.zeros(width * per, dtype=tensor.dtype, device=tensor.device)
            buf[:flat.numel()] = flat
        pieces = buf.view(self.chunks, self.k * width)
        shards = torch.empty(self.chunks, width, dtype=tensor.dtype, device=tensor.device)
        scattered = [self._intra_rs(shards[p], pieces[p]) for p in range(self.chunks)]
        crossed = []
        for p, work in enumerate(scattered):
            if work is not None:
                work.wait()
            crossed.append(dist.all_reduce(shards[p], group=self.inter, async_op=True)
                           if self.nodes > 1 else None)
        gathered = []
        for p, work in enumerate(crossed):
            if work is not None:
                work.wait()
            if divisor != 1:
                shards[p].div_(divisor)
            gathered.append(self._intra_ag(pieces[p], shards[p]))
        for work in gathered:
            if work is not None:
                work.wait()
        if not in_place:
            tensor.copy_(buf[:flat.numel()].view_as(tensor))
        return tensor

    def _intra_rs(self, out: torch.Tensor, piece: torch.Tensor) -> dist.Work | None:
        if self.k == 1:
            out.copy_(piece)
            return None
        return dist.reduce_scatter_tensor(out, piece, group=self.intra, async_op=True)

    def _intra_ag(self, piece: torch.Tensor, shard: torch.Tensor) -> dist.Work | None:
        if self.k == 1:
            piece.copy_(shard)
            return None
        return dist.all_gather_into_tensor(piece, shard, group=self.intra, async_op=True)
