"""How many channels NCCL spreads one call over: what its TUNING line prints.

The per-call pick (``select.py``) gives a collective at most ``nMaxChannels`` channels
(``topoGetAlgoInfo``). The planner then cuts the call into cells and deals them to channels so that
each channel carries at least ``MinTrafficPerChannel`` bytes of traffic
(``scheduleCollTasksToPlan``, NCCL 2.28-2.30 ``src/enqueue.cc``), so a small call runs on fewer
channels than it may use, and ``channel{Lo..Hi}`` in NCCL's TUNING line counts those. This module
restates that dealing for a call planned alone (nothing else queued in its plan), with a 4-byte
element (nccl-tests' default ``float``).
"""

from __future__ import annotations

from dynamiccl.system.nccl import Collective, Protocol

#: nccl-tests' default element: float.
ELEMENT_BYTES = 4
#: Cell sizes are rounded up to this many bytes (``divUp(..., 16) * 16``).
_ALIGN = 16


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def traffic_per_byte(collective: Collective, nranks: int) -> int:
    """``ncclFuncTrafficPerByte``: the bytes a rank moves per byte of its buffer."""
    if collective == Collective.ALLREDUCE:
        return 2
    if collective in (Collective.ALLGATHER, Collective.REDUCESCATTER):
        return nranks
    return 1


def spread_channels(collective: Collective, nbytes: int, nranks: int, protocol: Protocol,
                    max_channels: int, kind_channels: int, min_traffic: int,
                    element_bytes: int = ELEMENT_BYTES) -> int:
    """The channels a call planned alone is dealt to: ``nbytes`` as NCCL's TUNING line counts it
    (the whole buffer of an all-gather or reduce-scatter), ``max_channels`` its ``nMaxChannels``,
    ``kind_channels`` the communicator's channels of its kind (``nChannels``; ``nvlsChannels`` for
    NVLS), ``min_traffic`` the release's ``MinTrafficPerChannel``."""
    per_rank = collective in (Collective.ALLGATHER, Collective.REDUCESCATTER)
    buffer = nbytes // nranks if per_rank else nbytes
    count = buffer // element_bytes
    if count <= 0 or max_channels <= 1 or kind_channels <= 1:
        return 1
    per_byte = traffic_per_byte(collective, nranks) * (4 if protocol == Protocol.LL else 1)
    traffic = max(min_traffic, count * element_bytes * per_byte)
    per_channel = _div_up(traffic // min(max_channels, kind_channels), _ALIGN) * _ALIGN
    cell = _div_up(_div_up(min_traffic, per_byte), _ALIGN) * _ALIGN
    per_cell = cell // element_bytes
    cells = _div_up(count * element_bytes, cell)
    cell_traffic = cell * per_byte
    cells_per_channel = min(cells, _div_up(per_channel, cell_traffic))
    lo = min(cells, _div_up(per_channel, cell_traffic))
    mid, hi = divmod(cells - lo, cells_per_channel)
    if kind_channels < (lo != 0) + mid + (hi != 0):  # overflowed the channels there are
        mid = kind_channels - 2
        cells_per_channel = (cells - lo) // (mid + 1)
        hi = cells_per_channel + (cells - lo) % (mid + 1)
    if hi == 0 and mid != 0:
        hi, mid = cells_per_channel, mid - 1
    count_lo = lo * per_cell - (0 if hi else cells * per_cell - count)
    return (count_lo != 0) + mid + (hi != 0)
