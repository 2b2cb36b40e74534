"""The learned prior's real corpus: measured ratios of forced choices to NCCL's default on real
systems, as series the prior learns from and is validated on beside the simulated ones.

A real system is a folder holding ``topology.yaml`` (its datasheet topology, the model the prior
learns the residuals of) and its measurements in any format ``dynamiccl tune --measurements``
reads (NVIDIA's forced-choice timings under ``data/``, runner ``*.jsonl``, nccl-tests logs): the
fixtures of ``tests/fixtures/real/nvidia/``. Each (collective, communicator size) it measured is
one series, read exactly as ``dynamiccl tune`` asks the prior about it
(:meth:`~dynamiccl.agents.shipping.tune.Tuner.prior_query` on every measurement, converted by
:meth:`~dynamiccl.agents.shipping.tune_prior.LearnedPriorSource.points`): the model's times of every
pair and of NCCL's default on the topology as given, and the measured log(t_pair / t_default) where
both were timed at a size, NaN elsewhere. A series' measured ratios are its truth: the prior learns
to predict one held-out measurement from the others, launch noise and all (each NVIDIA file is one
launch), with the noise tune would tell it (:meth:`LearnedPriorSource.noise`).

Which real systems train and which validate is the run's config (``PriorConfig.real_train``,
``real_validation``); a system in both is refused, so a validation system is never learned from.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from dynamiccl.agents.shipping.prior import series_arrays
from dynamiccl.agents.shipping.tune import Tuner
from dynamiccl.agents.shipping.tune_measurements import Measurements
from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource
from dynamiccl.agents.training.prior_series import Series
from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology

#: The file of a real system's folder that names its datasheet topology.
TOPOLOGY_FILE = "topology.yaml"
#: Where NVIDIA's timings of a platform lie in its folder (``nccl_topo_timings``'s layout).
NVIDIA_DATA = "data"


def measurement_files(folder: Path) -> list[Path]:
    """A real system's measurement files: NVIDIA's ``data/`` tree where there is one, else every
    ``*.jsonl`` (runner records) beside its ``topology.yaml``."""
    if (folder / NVIDIA_DATA).is_dir():
        return [folder / NVIDIA_DATA]
    return sorted(folder.glob("*.jsonl"))


def load_system(folder: str | Path) -> tuple[list[MeasurementRecord], Topology]:
    """A real system's records and datasheet topology; a folder that is none is a one-line
    ValueError naming what it lacks."""
    folder = Path(folder)
    if not (folder / TOPOLOGY_FILE).is_file():
        raise ValueError(f"{folder}: no {TOPOLOGY_FILE}; a real system of the prior's corpus is a folder "
                         "with its topology and its measurements (tests/fixtures/real/nvidia/*)")
    files = measurement_files(folder)
    if not files:
        raise ValueError(f"{folder}: no measurements ({NVIDIA_DATA}/ or *.jsonl) beside {TOPOLOGY_FILE}")
    return load_paths(files).records, load_topology(folder / TOPOLOGY_FILE)


def system_series(records: Sequence[MeasurementRecord], topology: Topology) -> list[Series]:
    """Every (collective, communicator size) of the records with a forced choice measured beside
    NCCL's default, as ``dynamiccl tune`` asks its prior about it with every measurement given: its
    measured ratios are its truth. A series with nothing the prior is asked is left out."""
    tuner = Tuner(topology, Measurements(list(records)))
    shapes = sorted({(Collective(r.coll), r.nranks, r.nnodes or 1) for r in records},
                    key=lambda k: (int(k[0]), k[1]))
    out = []
    for collective, nranks, nodes in shapes:
        sizes = tuner.measurements.sizes(collective, nranks)
        scenario = Scenario(topology.resized(nodes=nodes, gpus_per_node=nranks // nodes), collective,
                            sizes[0])
        query = tuner.prior_query(scenario)
        if not query.measured:
            continue
        model_us, measured = LearnedPriorSource.points(query)
        for s in series_arrays(model_us, measured):
            out.append(Series(s.collective, s.nranks, s.pairs, s.log2_sizes, s.pair_log_time,
                              s.default_log_time, s.measured, LearnedPriorSource.noise(query)))
    return [s for s in out if s.asked.any()]


@lru_cache(maxsize=16)
def _cached(folder: str) -> tuple[Series, ...]:
    return tuple(system_series(*load_system(folder)))


def corpus(folders: Sequence[str]) -> list[Series]:
    """Every series of the real systems in ``folders`` (read once per process)."""
    return [s for folder in folders for s in _cached(str(Path(folder).resolve()))]


def check_split(train: Sequence[str], validation: Sequence[str]) -> None:
    """A real system both learned from and validated on would make its validation a training score:
    refused in one line."""
    shared = sorted({Path(f).resolve().name for f in train} & {Path(f).resolve().name for f in validation})
    if shared:
        raise ValueError(f"real system {shared[0]} is both in real_train and real_validation; a "
                         "validation system is never learned from: drop it from one")
