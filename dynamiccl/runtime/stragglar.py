"""StragglAR all-reduce (seed 004) on torch.distributed: hide a persistent straggler's delay.

While the straggler is late, the n − 1 punctual ranks reduce-scatter the buffer among themselves:
on NCCL with its reduce-scatter in a process subgroup per straggler identity (created once, by
every rank at the same point), which wants equal chunks, so a bucket whose size does not divide is
padded in a copy there. gloo's own reduce-scatter is slower than its all-reduce (13.9 vs 8.0 ms for
4 MiB on 3 CPU ranks here), so on gloo the punctual ranks pass chunks around a ring of
point-to-point sends (n − 2 steps of one chunk each, half the bytes of an all-reduce: 13.0 against
gloo's all-reduce's 21.5 ms for 16 MiB on 3 CPU ranks), on chunks that are views of the bucket
itself, cut as evenly as its size allows. Then the completion schedule
(:mod:`dynamiccl.runtime.matchings`) runs one round at a time, each rank's send and receive of the
round issued together with ``batch_isend_irecv``. In the straggler's rounds
both sides add the same two partial chunks (a + b and b + a are the same floating-point number), and
every other transfer copies a fully reduced chunk, so all ranks end with bit-identical buffers (an
average divides there too, (a + b) / n on both sides); the sum equals ``all_reduce``'s exactly for
integers and within rounding for floats (the order of the additions differs).

The schedule is written for the straggler at rank n − 1; any other straggler is swapped in by
renaming ranks (the paper's remark): schedule rank ``n − 1`` is the straggler, schedule ranks
``0 … n − 2`` are the punctual ranks in increasing order.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from dynamiccl.runtime.matchings import matchings_for


class StragglAR:
    """Sum-all-reduce that expects ``straggler`` to arrive last; one object per process group."""

    def __init__(self) -> None:
        self._punctual_groups: dict[int, dist.ProcessGroup | None] = {}

    def prepare(self, straggler: int) -> None:
        """Creates the punctual ranks' subgroup (NCCL's reduce-scatter needs one); every rank must
        call it at the same point."""
        world = dist.get_world_size()
        if not 0 <= straggler < world:
            raise ValueError(f"straggler rank {straggler} is outside 0..{world - 1}")
        if _needs_equal_chunks() and straggler not in self._punctual_groups:
            punctual = [r for r in range(world) if r != straggler]
            self._punctual_groups[straggler] = dist.new_group(punctual) if len(punctual) > 1 else None

    def all_reduce(self, tensor: torch.Tensor, straggler: int, divisor: int = 1) -> torch.Tensor:
        """Sums ``tensor`` over all ranks in place, divided by ``divisor``, and returns it.

        The division happens where a chunk is completed (each is, once, in its straggler round) and
        the rest of the schedule copies it, so averaging costs a punctual rank a pass over one chunk
        instead of over the whole buffer (a float ``tensor``: integers do not divide in place)."""
        world, me = dist.get_world_size(), dist.get_rank()
        if world == 1:
            return tensor.div_(divisor) if divisor != 1 else tensor
        self.prepare(straggler)
        punctual = [r for r in range(world) if r != straggler]
        real = [*punctual, straggler]          # schedule rank -> process rank
        virtual = real.index(me)
        equal = _needs_equal_chunks()
        buf, chunks = _chunked(tensor, world - 1, equal=equal)
        scratch = torch.empty(chunks[0].numel(), dtype=tensor.dtype, device=tensor.device)
        if me != straggler:
            if equal:
                self._reduce_scatter(buf, chunks, virtual, self._punctual_groups[straggler])
            else:
                _ring_reduce_scatter(chunks, virtual, punctual, scratch)
        for matches in matchings_for(world):
            for m in matches:
                if virtual not in (m.a, m.b):
                    continue
                mine_a = virtual == m.a
                peer = real[m.b if mine_a else m.a]
                send, recv = (m.send_a, m.send_b) if mine_a else (m.send_b, m.send_a)
                ops = []
                if send is not None:
                    ops.append(dist.P2POp(dist.isend, chunks[send], peer))
                if recv is not None:
                    into = scratch[:chunks[recv].numel()] if m.reduce else chunks[recv]
                    ops.append(dist.P2POp(dist.irecv, into, peer))
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
                if m.reduce:
                    chunks[recv].add_(into)
                    if divisor != 1:
                        chunks[recv].div_(divisor)
                break
        if buf.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
            tensor.copy_(buf[:tensor.numel()].view(tensor.shape))
        return tensor

    @staticmethod
    def _reduce_scatter(buf: torch.Tensor, chunks: list[torch.Tensor], virtual: int,
                        group: dist.ProcessGroup | None) -> None:
        """Precondition: punctual rank g holds chunk g summed over the punctual ranks."""
        if group is None:
            return
        out = torch.empty_like(chunks[virtual])
        dist.reduce_scatter_tensor(out, buf, group=group)
        chunks[virtual].copy_(out)


def _ring_reduce_scatter(chunks: list[torch.Tensor], virtual: int, punctual: list[int],
                         scratch: torch.Tensor) -> None:
    """The same precondition by point-to-point sends: in step s punctual rank g passes its partial
    chunk g − s − 1 to g + 1 and adds what g − 1 passes it (chunk g − s − 2); after m − 1 steps
    chunk g holds all m punctual ranks' contributions."""
    m = len(punctual)
    after, before = punctual[(virtual + 1) % m], punctual[(virtual - 1) % m]
    for step in range(m - 1):
        send, recv = (virtual - step - 1) % m, (virtual - step - 2) % m
        into = scratch[:chunks[recv].numel()]
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send], after),
                                            dist.P2POp(dist.irecv, into, before)]):
            work.wait()
        chunks[recv].add_(into)


def _needs_equal_chunks() -> bool:
    """gloo's punctual ranks pass chunks of any size around their ring; a reduce-scatter (NCCL)
    wants them equal. The default group's backend, which every rank (the straggler, outside the
    punctual group, too) reads alike."""
    return dist.get_backend() != "gloo"


def _chunked(tensor: torch.Tensor, n: int, equal: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A flat buffer and its ``n`` chunks, cut where every rank cuts them whatever its tensor's
    layout: as evenly as the size allows, or (``equal``) in chunks of one width, the last padded
    with zeros. The buffer is the tensor's own memory where that layout allows (a DDP bucket); a
    copy otherwise."""
    numel = tensor.numel()
    if not equal:
        buf = tensor.reshape(-1)  # a view of a contiguous tensor, else a copy
        return buf, list(buf.tensor_split(n))
    width = -(-numel // n)
    if tensor.is_contiguous() and numel == width * n:
        buf = tensor.view(-1)
    else:
        buf = torch.zeros(width * n, dtype=tensor.dtype, device=tensor.device)
        buf[:numel] = tensor.reshape(-1)
    return buf, list(buf.view(n, width))
