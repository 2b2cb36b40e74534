"""The NCCL releases the model reproduces, and what each changes in NCCL's own selection.

The model is written against NCCL 2.30.7 (the constants in :mod:`dynamiccl.system.nccl` and
``constants.py``). From 2.28 NCCL keeps its cost-model constants in one table
(``ncclTunerConstantsDefaults``, ``src/graph/tuning.cc``), and between 2.28.3 and 2.30.7 the
releases differ from 2.30.7 in the numbers below and nothing else the model reads (each read from
NCCL's source at the release's tag, ``github.com/NVIDIA/nccl``; the files are named per field):

* ``src/graph/tuning.cc``: NVLSTree's network latency (``hwLatencies[NET][NVLS_TREE][SIMPLE]``:
  14 µs up to 2.28.7, 20.9 from 2.28.9); Blackwell's per-channel Ring/LL128 bandwidth
  (``perChMaxRingLL128Bws``: 2 x 36.7 up to 2.28.7, 2 x 36.7 / 34.6 / 2 x 36.7 in 2.28.9, 34.5 /
  34.6 / 34.5 in 2.29.2-2.29.3, 40.0 from 2.29.7) and NVLSTree's on four or more nodes
  (``perChMaxNVLSTreeBws``: 43.1 up to 2.28.7, 43.8 in 2.28.9-2.29.7, 80.0 from 2.30.3);
  treeCorrectionFactor applied to NVLSTree AllReduce on Blackwell with an x86 host (``ncclTopoGetAlgoTime``:
  from 2.29.2);
* ``src/graph/search.cc``: the speeds the sm100 topology search tries (intra-node 45 GB/s from
  2.29.2; inter-node 80 GB/s from 2.29.7 and 86 GB/s from 2.30.3);
* ``src/enqueue.cc`` (``scheduleCollTasksToPlan``): the least traffic a channel is given
  (``MinTrafficPerChannel``: 16 KiB up to 2.28.9, 32 KiB from 2.29.2), which sets how many
  channels a call is spread over (the count NCCL's TUNING line prints).

A release between two tags takes the constants of the tag before it. Releases before 2.28.3 keep
their constants elsewhere and differ in more (NCCL 2.21-2.22's Tree/Simple latency, PAT from 2.23),
so they are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dynamiccl.nccl_model import constants as K
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Link, Protocol
from dynamiccl.system.nccl_versions import NcclVersion, parse_version

_BLACKWELL = 3  # compCapIndex of sm100+ (NCCL's BLACKWELL_COMPCAP_IDX)
_FOUR_NODES = 2  # tuning scale index of four nodes or more


@dataclass(frozen=True)
class Release:
    """What one NCCL release's selection reads where it differs from 2.30.7's."""

    version: NcclVersion
    nvls_tree_net_latency_us: float = float(
        nccl.HW_LATENCY_US[Link.NET, Algorithm.NVLS_TREE, Protocol.SIMPLE])
    blackwell_ring_ll128_bw: tuple[float, float, float] = tuple(
        float(v) for v in nccl.PER_CH_MAX_RING_LL128_BW[_BLACKWELL])
    blackwell_nvls_tree_bw_4nodes: float = float(nccl.PER_CH_MAX_NVLS_TREE_BW[_BLACKWELL, _FOUR_NODES])
    nvls_tree_correction_blackwell: bool = True
    sm100_intra_speeds: tuple[float, ...] = field(default=K.SEARCH_SPEEDS[("sm100", "intra")])
    sm100_inter_speeds: tuple[float, ...] = field(default=K.SEARCH_SPEEDS[("sm100", "inter")])
    min_traffic_per_channel: int = 32 << 10

    def hw_latency_us(self, link: int, algorithm: int, protocol: int) -> float:
        """``hwLatencies[link][algorithm][protocol]`` of this release."""
        if (link, algorithm, protocol) == (Link.NET, Algorithm.NVLS_TREE, Protocol.SIMPLE):
            return self.nvls_tree_net_latency_us
        return float(nccl.HW_LATENCY_US[link, algorithm, protocol])

    def ring_ll128_bw(self, compcap: int, scale: int) -> float:
        """``perChMaxRingLL128Bws[compcap][scale]``."""
        if compcap == _BLACKWELL:
            return self.blackwell_ring_ll128_bw[scale]
        return float(nccl.PER_CH_MAX_RING_LL128_BW[compcap, scale])

    def nvls_tree_bw(self, compcap: int, scale: int) -> float:
        """``perChMaxNVLSTreeBws[compcap][scale]``."""
        if (compcap, scale) == (_BLACKWELL, _FOUR_NODES):
            return self.blackwell_nvls_tree_bw_4nodes
        return float(nccl.PER_CH_MAX_NVLS_TREE_BW[compcap, scale])

    def search_speeds(self, family: str, kind: str) -> tuple[float, ...]:
        """The per-channel speeds the topology search tries (``family``: default, sm90, sm100)."""
        if family == "sm100":
            return self.sm100_intra_speeds if kind == "intra" else self.sm100_inter_speeds
        return K.SEARCH_SPEEDS[(family, kind)]


def _speeds_without(kind: str, *dropped: float) -> tuple[float, ...]:
    return tuple(s for s in K.SEARCH_SPEEDS[("sm100", kind)] if s not in dropped)


_V = parse_version
_RING_LL128_2_28_7 = (2 * 36.7, 2 * 36.7, 2 * 36.7)
#: Every tagged release from 2.28.3, oldest first, with what it differs in from 2.30.7.
RELEASES: tuple[Release, ...] = (
    Release(_V("2.28.3"), nvls_tree_net_latency_us=14.0, blackwell_ring_ll128_bw=_RING_LL128_2_28_7,
            blackwell_nvls_tree_bw_4nodes=43.1, nvls_tree_correction_blackwell=False,
            sm100_intra_speeds=_speeds_without("intra", 45.0),
            sm100_inter_speeds=_speeds_without("inter", 86.0, 80.0), min_traffic_per_channel=16 << 10),
    Release(_V("2.28.7"), nvls_tree_net_latency_us=14.0, blackwell_ring_ll128_bw=_RING_LL128_2_28_7,
            blackwell_nvls_tree_bw_4nodes=43.1, nvls_tree_correction_blackwell=False,
            sm100_intra_speeds=_speeds_without("intra", 45.0),
            sm100_inter_speeds=_speeds_without("inter", 86.0, 80.0), min_traffic_per_channel=16 << 10),
    Release(_V("2.28.9"), blackwell_ring_ll128_bw=(2 * 36.7, 34.6, 2 * 36.7),
            blackwell_nvls_tree_bw_4nodes=43.8, nvls_tree_correction_blackwell=False,
            sm100_intra_speeds=_speeds_without("intra", 45.0),
            sm100_inter_speeds=_speeds_without("inter", 86.0, 80.0), min_traffic_per_channel=16 << 10),
    Release(_V("2.29.2"), blackwell_ring_ll128_bw=(34.5, 34.6, 34.5),
            blackwell_nvls_tree_bw_4nodes=43.8, sm100_inter_speeds=_speeds_without("inter", 86.0, 80.0)),
    Release(_V("2.29.3"), blackwell_ring_ll128_bw=(34.5, 34.6, 34.5),
            blackwell_nvls_tree_bw_4nodes=43.8, sm100_inter_speeds=_speeds_without("inter", 86.0, 80.0)),
    Release(_V("2.29.7"), blackwell_nvls_tree_bw_4nodes=43.8,
            sm100_inter_speeds=_speeds_without("inter", 86.0)),
    Release(_V("2.30.3")),
    Release(_V("2.30.4")),
    Release(_V("2.30.7")),
)
#: The release every other part of DynamICCL models (what PyTorch 2.15 loads).
DEFAULT = RELEASES[-1]
FIRST, LAST = RELEASES[0].version, RELEASES[-1].version


def release(version: str | NcclVersion | None = None) -> Release:
    """The constants of ``version`` (default: :data:`DEFAULT`): the latest tagged release at or
    before it; ValueError outside :data:`FIRST`..:data:`LAST` (within its minor series a later
    patch than the last tag is taken as that tag)."""
    if version is None:
        return DEFAULT
    wanted = parse_version(version)
    if wanted is None:
        raise ValueError(f"{version!r} is not an NCCL release (major.minor.patch)")
    modelled = f"the model reproduces NCCL {FIRST} to {LAST.major}.{LAST.minor}.x"
    if wanted < FIRST:
        raise ValueError(f"NCCL {wanted} is not modelled; {modelled} (older releases keep their "
                         "cost model elsewhere and differ in more)")
    if (wanted.major, wanted.minor) > (LAST.major, LAST.minor):
        raise ValueError(f"NCCL {wanted} is not modelled; {modelled} (a newer release may have "
                         "changed its constants: a newer dynamiccl may model it)")
    return next(r for r in reversed(RELEASES) if r.version <= wanted)


def differing(versions: list[Release] | None = None) -> list[Release]:
    """Releases whose constants differ from the one before them (what a per-release comparison
    needs to look at)."""
    out: list[Release] = []
    for r in versions or RELEASES:
        if not out or _constants(out[-1]) != _constants(r):
            out.append(r)
    return out


def _constants(r: Release) -> tuple:
    return tuple(getattr(r, f) for f in r.__dataclass_fields__ if f != "version")
