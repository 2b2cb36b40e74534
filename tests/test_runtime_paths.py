"""Each bucket's path as the simulator predicts it for the job's topology, agreed by every rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.runtime import RuntimeConfig
from dynamiccl.runtime.paths import (
    PathOptions,
    PathTable,
    fit_topology,
    predict,
    predicted_times,
    size_bin,
)
from dynamiccl.system.topology import load_topology

WORKERS = str(Path(__file__).parent / "runtime_workers.py")
REPO = Path(__file__).resolve().parents[1]
BOTH = PathOptions(stragglar=True, hierarchical_chunks=1)


def test_the_topology_is_sized_to_the_job():
    dgx = load_topology("dgx_h100")
    one_node = fit_topology(dgx, 4, None)
    assert (one_node.nodes, one_node.gpus_per_node) == (1, 4)
    two_nodes = fit_topology(dgx, 4, 2)
    assert (two_nodes.nodes, two_nodes.gpus_per_node) == (2, 2)
    assert fit_topology(dgx, 16, None) == dgx.resized(nodes=2)
    with pytest.raises(ValueError, match="set RuntimeConfig.ranks_per_node"):
        fit_topology(dgx, 6, 4)


def test_a_preset_name_or_file_is_loaded_like_the_cli_loads_it(tmp_path):
    assert RuntimeConfig(topology="dgx_h100").topology == load_topology("dgx_h100")
    copy = tmp_path / "cluster.yaml"
    copy.write_text((REPO / "configs" / "topology" / "dgx_a100.yaml").read_text())
    assert RuntimeConfig(topology=copy).topology == load_topology("dgx_a100")
    with pytest.raises(ValueError, match="no-such-system"):
        RuntimeConfig(topology="no-such-system")


@pytest.mark.parametrize("ranks_per_node", [None, 2])
def test_every_bin_runs_what_the_simulator_predicts_fastest(ranks_per_node):
    topology = fit_topology(load_topology("dgx_h100"), 4, ranks_per_node)
    sizes = {size_bin(n): n for n in (1 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 26)}
    table = predict(topology, sizes, True, 5000.0, 0.3, BOTH)
    for n in sizes.values():
        for first, delay in ((True, 5000.0), (False, 0.0)):
            times = predicted_times(topology, n, delay, 0.3, BOTH)
            assert table.path(n, first) == min(times, key=times.__getitem__)
            assert ("stragglar" in times) == first  # only the bucket the straggler delays
            assert ("hierarchical" in times) == (ranks_per_node == 2)  # a ring over two nodes
    unseen = 1 << 30
    assert table.path(unseen, True) == table.path(unseen, False) == "nccl"


def test_the_model_overrules_the_fixed_rules_where_they_lose():
    """The fixed rules run StragglAR on every first bucket once a straggler is known; the model
    keeps NCCL's all-reduce where StragglAR's extra rounds cost more than they hide (a small
    bucket), and takes StragglAR where the hidden reduce-scatter pays (a large one, long delay)."""
    topology = fit_topology(load_topology("dgx_h100"), 4, None)
    small, large = 1 << 10, 1 << 26
    table = predict(topology, {size_bin(small): small, size_bin(large): large}, True, 5000.0, 0.0,
                    BOTH)
    assert table.path(small, first=True) == "nccl"
    assert table.path(large, first=True) == "stragglar"
    assert table.path(large, first=False) == "nccl"
    no_straggler = predict(topology, {size_bin(large): large}, False, 5000.0, 0.0, BOTH)
    assert no_straggler.path(large, first=True) == "nccl"
    without = predict(topology, {size_bin(large): large}, True, 5000.0, 0.0,
                      PathOptions(stragglar=False, hierarchical_chunks=None))
    assert without.path(large, first=True) == "nccl"  # a job that disabled StragglAR never runs it


def test_tables_survive_the_broadcast_encoding():
    table = PathTable(tuple(i % 3 for i in range(64)), tuple((i + 1) % 3 for i in range(64)))
    assert PathTable.decode(table.encode()) == table
    assert PathTable.decode(PathTable.encode_none()) is None
    assert len(PathTable.encode_none()) == len(table.encode())


def _expected_counts(table: PathTable | None, sizes: list[int], steps: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i, n in enumerate(sizes):
        path = table.path(n, first=i == 0) if table is not None else "nccl"
        counts[path] = counts.get(path, 0) + steps
    return counts


@pytest.mark.multiproc
@pytest.mark.parametrize("ranks_per_node, sizes, expected", [
    # two nodes of two: the fixed rules would run StragglAR first and NCCL's ring for 64 KiB; the
    # model's hierarchical ring beats both on these small buckets, straggler or not
    (2, [1 << 12, 1 << 16], ("hierarchical", "hierarchical")),
    # one node: StragglAR hides its reduce-scatter in a long delay on a 4 MiB first bucket
    (None, [1 << 22, 1 << 12], ("stragglar", "nccl")),
])
def test_every_rank_runs_the_simulators_path_per_bin_from_the_same_step(ranks_per_node, sizes,
                                                                         expected):
    config = {"measure_every": 2, "window": 3, "majority": 0.6, "straggler_threshold_us": 15000.0}
    out = launch(f"{WORKERS}:paths_in_lockstep", 4,
                 {"topology": "dgx_h100", "ranks_per_node": ranks_per_node, "sizes": sizes,
                  "steps": 12, "late_rank": 3, "late_ms": 60.0, "config": config}, timeout_s=300)
    history = out[0]["history"]
    assert all(o["history"] == history for o in out)  # same states, tables and paths, same steps
    assert all(o["exact"] for o in out)  # every path summed exactly like all_reduce (int64)
    state, table = history[-1][1], history[-1][3]
    assert state.straggler == 3
    topology, options = out[0]["topology"], out[0]["options"]
    assert table == predict(topology, {size_bin(n): n for n in sizes}, True, state.delay_us,
                            state.c2c, options)
    assert (table.path(sizes[0], first=True), table.path(sizes[1], first=False)) == expected
    # each table is applied from the step after the decision that broadcast it, on every rank
    previous_tables = [None] + [table for _, _, _, table in history[:-1]]
    for (_, _, paths, _), previous in zip(history, previous_tables, strict=True):
        assert paths == _expected_counts(previous, sizes, config["measure_every"])
