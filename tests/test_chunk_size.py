"""The chunk size, NCCL's fourth knob: NCCL's own (NCCL 2.30.7 src/enqueue.cc calcCollChunking), its
physics in the simulator, the policy file's chunk_bytes column (format 3), the plugin's getChunkSize,
the runtime's pin, measurements, tune and its plan, show and explain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.agents.shipping.launchers import launches, plan_lines, script, with_pins
from dynamiccl.agents.shipping.tune import TunedPolicy, Tuner
from dynamiccl.agents.shipping.tune_measurements import DEFAULT, Choice, Measurements
from dynamiccl.agents.shipping.tune_plan import PlannedMeasurement, plan
from dynamiccl.cli.main import main
from dynamiccl.decisions import refined
from dynamiccl.nccl_model import NcclModel
from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.records import ImpossibleRecord, MeasurementRecord
from dynamiccl.profiler.measure.runner import CollectiveSpec
from dynamiccl.runtime.plugin_control import Pin, PluginControl
from dynamiccl.runtime.tuning import Candidate, Tuning
from dynamiccl.simulator import simulate
from dynamiccl.system import chunking
from dynamiccl.system.knobs import Config, ConfigBatch, Hierarchy, Schedule, invalid_reason
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

AR, BC, AG = Collective.ALLREDUCE, Collective.BROADCAST, Collective.ALLGATHER
RING, TREE = Algorithm.RING, Algorithm.TREE
LL, LL128, SIMPLE = Protocol.LL, Protocol.LL128, Protocol.SIMPLE
H100x4 = load_topology("dgx_h100", nodes=4)
H100x8 = load_topology("dgx_h100", nodes=8)


def _nccl(algorithm, collective, protocol, piece, topology=H100x4, tuner=None) -> int:
    spec = chunking.chunking_of(algorithm)
    return int(chunking.nccl_chunk(spec, topology, collective, protocol, np.array([piece]), tuner)[0])


# -- NCCL's own chunk (calcCollChunking @2.30.7) -----------------------------------------------------


def test_nccls_own_chunk_starts_at_a_slot_times_the_chunk_steps_less_the_flags():
    assert _nccl(RING, AR, SIMPLE, 1 << 30) == 2 << 20  # 4 MiB / 8 slots x 4 chunk steps
    assert _nccl(RING, AG, SIMPLE, 1 << 30) == 2 << 20
    assert _nccl(RING, BC, SIMPLE, 1 << 30) == 512 << 10  # broadcast: one chunk step
    assert _nccl(RING, AR, LL, 1 << 30) == 32 << 10  # 512 KiB / 8, half of it flags
    assert _nccl(RING, AR, LL128, 1 << 30) == 576000  # 4915200 / 8 x 15/16
    assert _nccl(TREE, AR, SIMPLE, 1 << 20) == 512 << 10


def test_nccl_shrinks_tree_ll128_nvls_and_pat_chunks_for_small_pieces():
    # Tree/LL128 on 4 nodes x 8: steps 1 + log2(4) + 0.8 = 3.8 -> halve while piece/chunk < 30.4
    # (to 131072 at most), then while piece/chunk < 7.6 (to 32768), rounded to the 1920 B grain
    assert _nccl(TREE, AR, LL128, 64 << 10) == 18000 // 1920 * 1920
    assert _nccl(TREE, AR, LL128, 1 << 30) == 576000
    one = load_topology("dgx_h100", nodes=1)  # NVLS: 128 KiB, then the ladder with 8 heads
    assert _nccl(Algorithm.NVLS, AR, SIMPLE, 1 << 30, one) == 128 << 10
    assert _nccl(Algorithm.NVLS, AR, SIMPLE, 32 << 20, one) == 64 << 10
    assert _nccl(Algorithm.NVLS, AR, SIMPLE, 2 << 20, one) == 32 << 10
    assert _nccl(Algorithm.NVLS, AR, SIMPLE, 256 << 10, one) == 16 << 10
    pat = load_topology("dgx_h100", nodes=8, gpus_per_node=1)
    assert _nccl(Algorithm.PAT, AG, SIMPLE, 64 << 20, pat) == 512 << 10
    assert _nccl(Algorithm.PAT, AG, SIMPLE, 4 << 20, pat) == 128 << 10  # 4 MiB / 32


def test_a_tuners_chunk_is_clamped_to_the_buffer_and_rounded_down_to_the_grain():
    assert _nccl(RING, AR, SIMPLE, 1 << 30, tuner=16 << 20) == 2 << 20
    assert _nccl(RING, AR, LL128, 1 << 30, tuner=5000) == 3840
    assert _nccl(RING, AR, SIMPLE, 1 << 30, tuner=-1) == 2 << 20  # kept
    model = NcclModel(H100x4)
    pick = model.choose(AR, 1 << 20).config
    assert model.own_value("chunk_bytes", AR, 1 << 20, pick) == _nccl(
        pick.algorithm, AR, pick.protocol, -(-(1 << 20) // pick.channels))


# -- the simulator ----------------------------------------------------------------------------------


def _times(topology, collective, configs, sizes):
    return simulate(topology, int(collective), np.asarray(sizes, float),
                    ConfigBatch.from_configs(configs)).time_us


def test_nccls_own_chunk_given_explicitly_times_as_nccl_running_it():
    sizes = [1 << 14, 1 << 20, 1 << 26]
    for config in (Config(RING, SIMPLE, 16), Config(TREE, SIMPLE, 16, Hierarchy.HIERARCHICAL),
                   Config(TREE, LL128, 16, Hierarchy.HIERARCHICAL)):
        own = [_nccl(config.algorithm, AR, config.protocol, -(-n // 16)) for n in sizes]
        for n, chunk in zip(sizes, own, strict=True):
            t = _times(H100x4, AR, [config, Config(*(getattr(config, f) for f in (
                "algorithm", "protocol", "channels", "hierarchy")), chunk_bytes=chunk)], [n])[0]
            assert t[1] == pytest.approx(t[0], rel=1e-9)


def test_a_smaller_chunk_never_speeds_a_ring_and_shortens_a_deep_pipelines_fill():
    sizes = 2.0 ** np.arange(12, 31, 2)
    ring = [Config(RING, SIMPLE, 16, chunk_bytes=c) for c in (None, 16 << 10, 256 << 10)]
    t = _times(H100x4, AR, ring, sizes)
    assert np.all(t[:, 1:] >= t[:, :1] * (1 - 1e-9))
    assert t[-1, 1] > 1.5 * t[-1, 0], "16 KiB chunks put a hop's latency on every ring step"
    chain = [Config(RING, SIMPLE, 16, chunk_bytes=c) for c in (None, 64 << 10)]
    b = _times(H100x8, BC, chain, [16 << 20, 1 << 10])
    assert b[0, 1] < 0.7 * b[0, 0], "a 63-hop broadcast chain stores and forwards 512 KiB chunks"
    assert b[1, 1] == pytest.approx(b[1, 0]), "a piece smaller than both chunks: the same"
    flat = [Config(RING, LL128, 16, chunk_bytes=c) for c in (None, 256 << 10)]
    ll128 = _times(H100x8, BC, flat, [16 << 20])[0]
    assert ll128[1] == pytest.approx(ll128[0], rel=0.05), "LL128 forwards line by line"


def test_only_nccls_own_algorithms_take_a_chunk():
    hier = Config(RING, SIMPLE, 8, Hierarchy.HIERARCHICAL, Schedule.BW_AWARE, 2, chunk_bytes=65536)
    assert invalid_reason(H100x4, AR, hier) == \
        "a chunk size is NCCL's knob: only NCCL's own algorithms take one"
    assert invalid_reason(H100x4, AR, Config(RING, SIMPLE, 8, chunk_bytes=1024)).startswith(
        "chunk_bytes must be 4096..")
    assert invalid_reason(H100x4, AR, Config(RING, SIMPLE, 8, chunk_bytes=65536)) is None


def test_refined_picks_a_chunk_where_it_pays_and_keeps_nccls_where_it_does_not():
    chain = Scenario(H100x8, BC, 16 << 20)
    default = Config(RING, SIMPLE, 16)
    assert refined(chain, default).config.chunk_bytes is not None
    small = Scenario(H100x8, AR, 1 << 12)
    assert refined(small, Config(RING, LL, 1)).config.chunk_bytes is None


# -- the policy file, the plugin and the runtime ------------------------------------------------------

HEADER = pf.Header("chunk-test", "2026-01-01T00:00:00Z", "dgx_h100", "0" * 16, "2.21.5..2.32.3",
                   "0" * 16)


def _policy(chunk: int | None) -> pf.PolicyFile:
    rule = pf.Rule(AR, 1 << 20, 2 << 20, decision=pf.Decision(RING, SIMPLE, chunk_bytes=chunk))
    return pf.PolicyFile(HEADER, (pf.Slice(rules=(rule,)),))


def test_a_chunk_makes_a_format_3_file_and_older_files_still_read():
    text = pf.dumps(_policy(65536))
    assert text.startswith("DYNAMICCL-POLICY 3\n") and "chunk_bytes" in text
    assert pf.loads(text).slices[0].rules[0].decision == pf.Decision(RING, SIMPLE, chunk_bytes=65536)
    assert pf.loads(text).version == 3
    old = pf.dumps(_policy(None))
    assert old.startswith("DYNAMICCL-POLICY 2\n") and "chunk_bytes" not in old
    assert pf.loads(old).slices[0].rules[0].decision.chunk_bytes is None


def test_show_names_the_chunk_column_and_the_nccl_releases_that_ignore_it(tmp_path, capsys):
    path = pf.write(_policy(65536), tmp_path / "c.dccl")
    assert main(["show", str(path), "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "format 3" in out and "chunk_bytes" in out and "65536" in out
    assert "chunk_bytes: only NCCL 2.30.3 and later take it" in out and "2.21.5..2.32.3" in out
    assert main(["show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["chunk_bytes"] == 65536


def test_the_plugin_gives_a_decided_calls_pieces_its_chunk_and_a_pin_does_too(tmp_path, monkeypatch):
    from nccl_tuner_standin import NcclTunerStandIn

    library = str(plugin.library_path())
    monkeypatch.setenv("DYNAMICCL_POLICY", str(pf.write(_policy(65536), tmp_path / "c.dccl")))
    comm = NcclTunerStandIn(library, 16, 2)
    assert comm.decide(1 << 20) == (int(RING), int(SIMPLE), 0)
    assert comm.chunk(1 << 16, int(RING), int(SIMPLE), 2 << 20) == 65536
    assert comm.chunk(1 << 16, int(RING), int(LL), 32 << 10) == 32 << 10, "another pair: NCCL's"
    comm.finalize()
    monkeypatch.delenv("DYNAMICCL_POLICY")
    control = PluginControl(Path(library))
    control.pin(Pin(int(AR), 0, 1 << 30, Candidate(RING, SIMPLE, chunk_bytes=256 << 10)))
    try:
        pinned = NcclTunerStandIn(library, 16, 2)
        assert pinned.decide(1 << 24) == (int(RING), int(SIMPLE), 0)
        assert pinned.chunk(1 << 20, int(RING), int(SIMPLE), 2 << 20) == 256 << 10
        pinned.finalize()
    finally:
        control.unpin(int(AR), 0, 1 << 30)


def test_the_runtime_carries_a_chunk_in_what_rank_0_broadcasts():
    chunked = Candidate(RING, SIMPLE, 8, 65536)
    action = Tuning._encode(1, chunked)
    assert action.tolist() == [1, int(RING), int(SIMPLE), 8, 65536]
    tuning = Tuning.__new__(Tuning)
    tuning.queue = []
    assert tuning.apply(action) == (1, chunked)


# -- measurements, tune and its plan ------------------------------------------------------------------


def test_records_and_specs_carry_a_chunk_and_refuse_an_impossible_one():
    record = MeasurementRecord("allreduce", 1 << 20, 16, 100.0, 1.0, 1.0, "ring", "simple",
                               chunk_bytes=65536)
    again = MeasurementRecord.from_json(record.to_json())
    assert again.chunk_bytes == 65536 and again.config_label == "ring/simple/auto-ch/64KiB-chunk"
    with pytest.raises(ImpossibleRecord, match="chunk_bytes 100 is not a chunk size in bytes"):
        MeasurementRecord("allreduce", 1 << 20, 16, 100.0, 1.0, 1.0, chunk_bytes=100)
    spec = CollectiveSpec("allreduce", 1 << 20, "nccl", algorithm="ring", protocol="simple",
                          chunk_bytes=65536)
    assert spec.knobs.unforceable() == ("chunk_bytes",) and "NCCL_ALGO" in spec.knobs.env()
    assert spec.config_label == "ring/simple/auto-ch/64KiB-chunk"


def _record(s: Scenario, choice: Choice, time_us: float, launch: str) -> MeasurementRecord:
    return MeasurementRecord(s.collective.name.lower(), s.nbytes, s.topology.nranks, time_us, 1.0, 1.0,
                             nnodes=s.topology.nodes, launch=launch, **choice.record())


def test_tune_pins_a_measured_chunk_and_the_model_alone_never_does():
    s = Scenario(H100x8, BC, 16 << 20)
    chunked = Choice(RING, SIMPLE, chunk_bytes=65536)
    times = ((DEFAULT, (400.0, 410.0, 405.0)), (chunked, (200.0, 205.0, 198.0)))
    measured = [_record(s, c, t, f"{c.label()}-{i}") for c, ts in times for i, t in enumerate(ts)]
    tuner = Tuner(H100x8, Measurements(measured))
    d = tuner.decide(s)
    assert d.chosen == chunked and d.verdict.evidence == "measured"
    rule, _ = TunedPolicy(tuner).decide_rule(s)
    assert rule == pf.Decision(RING, SIMPLE, chunk_bytes=65536)
    bare = Tuner(H100x8, Measurements([_record(s, DEFAULT, 400.0, "d")]))
    assert all(c.chunk_bytes is None for c in bare.decide(s).estimates)


def test_the_plan_proposes_a_chunk_run_where_the_model_says_it_pays_launched_with_the_plugin():
    s = Scenario(H100x8, BC, 16 << 20)
    tuner = Tuner(H100x8, Measurements([_record(s, DEFAULT, 400.0, "d")]))
    planned = plan(tuner, [s], 20)
    chunked = [m for m in planned if m.choice.chunk_bytes is not None]
    assert chunked and chunked[0].reason == "could beat NCCL's default if measured"
    runs = with_pins(launches([PlannedMeasurement(BC, 64, chunked[0].choice, s.nbytes, 1.0, "")], 8),
                     H100x8)
    # a launch on every launcher, pinned through the plugin (tests/test_chunk_plan.py runs one)
    lines = plan_lines(runs)
    assert len(lines) == 2 and all(" broadcast_perf -b 16777216 -e 16777216 " in x for x in lines)
    assert all("NCCL_TUNER_PLUGIN" in x and "NCCL_ALGO" not in x for x in lines)
    assert all("NCCL has no variable for chunk_bytes" in x for x in lines)
    text = script(runs, "srun", logs="logs", made_by="test", then="tune")
    assert f"pin {runs[0].name} {runs[0].pin_sha256} <<'POLICY'" in text


def test_profile_collective_takes_a_chunk_only_with_a_pair_and_on_nccl(capsys):
    assert main(["profile", "collective", "--backend", "gloo", "--nprocs", "2",
                 "--chunk-bytes", "64K"]) == 2
    assert "--chunk-bytes are NCCL knobs" in capsys.readouterr().err


def test_explain_says_where_a_chunk_pays_for_nccls_own_pick(capsys):
    assert main(["explain", "--topology", "dgx_h100", "--nodes", "8", "--collective", "broadcast",
                 "--min-size", "16M", "--max-size", "16M", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["refined_config"].endswith("-chunk") and row["refined_gain"] > 1.3
    assert row["nccl_chunk_bytes"] is None and "best_chunk_bytes" in row
