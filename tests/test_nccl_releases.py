"""The NCCL-default model per release: each release's constants as its tag of NCCL has them, the
channels NCCL's planner spreads a call over, and ``check-model`` against the log's own release.

Fixture: rank 0's TUNING log of NCCL 2.29.7 (two ranks, Socket transport; see
tests/fixtures/real/nccl_debug/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.nccl_model import NcclModel, releases
from dynamiccl.nccl_model.schedule import spread_channels
from dynamiccl.nccl_model.select import channels_for
from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log_file
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.nccl_versions import NcclVersion
from dynamiccl.system.topology import load_topology

REAL = Path(__file__).parent / "fixtures" / "real"
LOG = REAL / "nccl_debug" / "rtx5090_socket_broadcast_tuning.log"
TOPOLOGY = REAL / "rtx5090_socket_2ranks" / "topology.yaml"


def test_a_release_takes_the_constants_of_the_tag_at_or_before_it():
    assert releases.release("2.29.5").version == NcclVersion(2, 29, 3)
    assert releases.release("2.30.9").version == NcclVersion(2, 30, 7)
    assert releases.release(None) is releases.DEFAULT and str(releases.DEFAULT.version) == "2.30.7"
    for outside in ("2.27.7", "2.31.0", "nccl"):
        with pytest.raises(ValueError, match="not|NCCL"):
            releases.release(outside)
    with pytest.raises(ValueError, match="2.28.3 to 2.30.x"):
        NcclModel(load_topology("dgx_h100"), "2.26.2")


def test_each_release_differs_from_2_30_7_where_its_source_does():
    """The values read from NCCL's source at each tag (src/graph/tuning.cc, search.cc, enqueue.cc)."""
    r2283, r2289, r2292, r2297, r2307 = (releases.release(v) for v in
                                         ("2.28.3", "2.28.9", "2.29.2", "2.29.7", "2.30.7"))
    assert [r.nvls_tree_net_latency_us for r in (r2283, r2289, r2307)] == [14.0, 20.9, 20.9]
    assert r2289.blackwell_ring_ll128_bw == (73.4, 34.6, 73.4)
    assert r2292.blackwell_ring_ll128_bw == (34.5, 34.6, 34.5)
    assert r2297.blackwell_ring_ll128_bw == r2307.blackwell_ring_ll128_bw == (40.0, 40.0, 40.0)
    assert [r.blackwell_nvls_tree_bw_4nodes for r in (r2283, r2289, r2297, r2307)] == \
        [43.1, 43.8, 43.8, 80.0]
    assert not r2289.nvls_tree_correction_blackwell and r2292.nvls_tree_correction_blackwell
    assert 45.0 not in r2289.sm100_intra_speeds and 45.0 in r2292.sm100_intra_speeds
    assert 80.0 not in r2292.sm100_inter_speeds and 80.0 in r2297.sm100_inter_speeds
    assert 86.0 not in r2297.sm100_inter_speeds and 86.0 in r2307.sm100_inter_speeds
    assert [r.min_traffic_per_channel for r in (r2289, r2292)] == [16 << 10, 32 << 10]
    assert [str(r.version) for r in releases.differing()] == \
        ["2.28.3", "2.28.9", "2.29.2", "2.29.7", "2.30.3"]


def test_a_blackwell_system_is_modelled_per_release_where_the_constants_differ():
    """Four DGX B200 nodes: NVLSTree's per-channel cap on four nodes moved from 43.8 (2.29.7) to 80
    GB/s (2.30.3), so its bandwidth in the table differs; Hopper is the same in every release."""
    b200 = load_topology(REAL / "dgx_b200_ib" / "topology.yaml", nodes=4)
    index = (Collective.ALLREDUCE, Algorithm.NVLS_TREE, Protocol.SIMPLE)
    old, new = (float(NcclModel(b200, v).tables.bandwidth[index]) for v in ("2.29.7", "2.30.7"))
    assert 0 < old < new
    h100 = load_topology("dgx_h100", nodes=2)
    tables = [NcclModel(h100, str(r.version)).tables.bandwidth for r in releases.differing()]
    assert all((t == tables[-1]).all() for t in tables)


def test_the_logged_channel_counts_are_nccls_planner_spreading_its_per_call_channels():
    """The log's communicator has 4 channels (its picks reach channel 3). With NCCL's per-call rule
    from 4 channels and the planner's 32 KiB least traffic a channel (2.29+) every logged count
    follows; with 2.28's 16 KiB two do not (32 KiB and 64 KiB calls would take twice the channels)."""
    log = parse_debug_log_file(LOG)
    model = NcclModel(load_topology(TOPOLOGY), "2.29.7")
    agree = {16 << 10: 0, 32 << 10: 0}
    for pick in log.distinct_picks():
        most = int(channels_for(model.system, model.tables, [pick.algorithm], [pick.protocol],
                                [pick.nbytes], comm_channels=4)[0])
        for least in agree:
            agree[least] += spread_channels(pick.collective, pick.nbytes, 2, pick.protocol, most, 4,
                                            least) == pick.channels
    assert agree == {32 << 10: 18, 16 << 10: 16}


def test_check_model_models_the_logs_release_and_compares_every_release(capsys):
    args = ["check-model", str(LOG), "--topology", str(TOPOLOGY)]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model_release"] == "2.29.7"
    assert all(p["model"].endswith("ch") for p in report["picks"]["rows"])
    assert main(args) == 0
    assert "model of NCCL 2.29.7 (the log's release)" in capsys.readouterr().out
    assert main([*args, "--all-releases", "--json"]) == 0
    rows = {r["release"]: r for r in json.loads(capsys.readouterr().out)["releases"]}
    assert set(rows) == {"2.28.3", "2.28.9", "2.29.2", "2.29.7", "2.30.3"}
    # the 32 KiB least traffic of 2.29 spreads the 32 KiB call over the one channel NCCL logged
    assert rows["2.29.7"]["picks_agreeing"] == rows["2.28.9"]["picks_agreeing"] + 1
    assert main([*args, "--nccl-version", "2.26.2"]) == 2
    assert "not modelled" in capsys.readouterr().err
