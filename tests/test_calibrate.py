"""Calibration recovers known tier parameters from synthetic measurements and refuses what the
data cannot determine. The "real system" is the simulator with perturbed parameters plus seeded
3 % log-normal noise (profiler.synthetic)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.cli.main import main
from dynamiccl.knobs import nccl_config
from dynamiccl.nccl import Algorithm, Collective, Protocol
from dynamiccl.profiler import synthetic as S
from dynamiccl.profiler.calibrate import CalibrationError, calibrate, prepare
from dynamiccl.profiler.fit_report import error_table, heldout_table
from dynamiccl.profiler.records import write_jsonl
from dynamiccl.topology import load_topology

FIX = Path(__file__).parent / "fixtures" / "profiler" / "nccl_tests"
TRUE_FACTORS = {"nvlink.bandwidth_GBps": 0.8, "nvlink.latency_us": 1.5,
                "infiniband.bandwidth_GBps": 0.7, "infiniband.latency_us": 1.4}
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)


def _sweeps(nodes=(1, 2, 4)):
    sizes = S.powers_of_two(10, 30, 2)  # 1 KiB .. 1 GiB
    sweeps = [S.Sweep(c, sizes, n) for c in COLLECTIVES for n in nodes]
    if max(nodes) > 1:  # a run with NCCL_ALGO=Ring NCCL_PROTO=Simple and 16 channels pinned
        sweeps.append(S.Sweep(Collective.ALLREDUCE, sizes, 2,
                              nccl_config(Algorithm.RING, Protocol.SIMPLE, 16)))
    return sweeps


@pytest.fixture(scope="module")
def setup():
    base = load_topology("dgx_h100")
    truth = S.perturbed(base, TRUE_FACTORS)
    records = S.measurements(truth, _sweeps(), noise_sigma=0.03, seed=1)
    return base, truth, records, calibrate(records, base)


def test_known_parameters_are_recovered(setup):
    base, truth, _, fit = setup
    true_values = {f"{t.name}.{f}": getattr(t, f) for t in truth.tiers
                   for f in ("bandwidth_GBps", "latency_us")}
    for p in fit.params:
        assert p.determined
        tolerance = 0.03 if p.label.endswith("bandwidth_GBps") else 0.10
        assert p.fitted == pytest.approx(true_values[p.label], rel=tolerance), p.label
        # the reported uncertainty is honest: the truth lies within 3 standard errors
        assert abs(np.log(p.fitted / true_values[p.label])) < 3 * p.rel_std + 1e-3, p.label
    assert fit.rms_log(fitted=False) > 0.1 > 0.04 > fit.rms_log(fitted=True)  # noise is 0.03
    assert fit.topology.tiers[0].bandwidth_GBps != base.tiers[0].bandwidth_GBps


def test_held_out_sizes_are_predicted_within_the_stated_error(setup):
    base, truth, _, fit = setup
    odd_sizes = tuple(3 * 2**k for k in range(11, 29, 3))  # 6 KiB .. 768 MiB, never fitted
    held = S.measurements(truth, [S.Sweep(c, odd_sizes, n) for c in COLLECTIVES for n in (1, 2, 8)],
                          noise_sigma=0.0, seed=2)
    rows = heldout_table(fit, prepare(held, base))
    assert {r.collective for r in rows} == {c.name.lower() for c in COLLECTIVES}
    for r in rows:  # 8 nodes was never measured either
        assert r.median_abs_pct < 2.0 and r.max_abs_pct < 5.0, r
        assert r.base_median_abs_pct > 5.0  # the base preset was clearly wrong


def test_fit_error_is_reported_per_collective_and_size_range(setup):
    _, _, _, fit = setup
    rows = error_table(fit.problem, fit.predicted_us, fit.predicted_base_us)
    assert len(rows) == 9  # 3 collectives x 3 size ranges
    assert {r.size_range for r in rows} == {"< 64KiB", "64KiB - 16MiB", ">= 16MiB"}
    assert all(r.median_abs_pct < 4.0 < r.base_median_abs_pct for r in rows)


def test_intra_node_data_cannot_determine_the_network():
    base = load_topology("dgx_h100")
    records = S.measurements(S.perturbed(base, TRUE_FACTORS), _sweeps(nodes=(1,)), seed=3)
    with pytest.raises(CalibrationError, match=r"infiniband.bandwidth_GBps: no measurement "
                                               r"crosses the infiniband tier.*2 or more nodes"):
        calibrate(records, base)
    fit = calibrate(records, base, keep_undetermined=True)
    kept = {p.label: p for p in fit.params if not p.determined}
    assert set(kept) == {"infiniband.bandwidth_GBps", "infiniband.latency_us"}
    assert fit.topology.tiers[1] == base.tiers[1]
    assert fit.topology.tiers[0].bandwidth_GBps == pytest.approx(360.0, rel=0.03)


def test_large_messages_alone_cannot_determine_a_latency():
    base = load_topology("dgx_h100")
    records = S.measurements(base, [S.Sweep(Collective.ALLREDUCE, S.powers_of_two(26, 30), n)
                                    for n in (1, 2)], seed=4)
    with pytest.raises(CalibrationError, match="nvlink.latency_us: .*add small sizes"):
        calibrate(records, base)


def test_a_slow_protocol_is_fitted_as_its_own_efficiency_and_written():
    base = load_topology("dgx_h100")
    sweeps = _sweeps() + [S.Sweep(Collective.ALLREDUCE, S.powers_of_two(16, 28, 2), 2,
                                  nccl_config(Algorithm.RING, Protocol.LL128, 16))]
    records = S.measurements(S.perturbed(base, TRUE_FACTORS), sweeps, seed=5,
                             efficiency={(Algorithm.RING, Protocol.LL128): 0.8})
    fit = calibrate(records, base)
    effs = {p.label: p for p in fit.refinements if p.label.endswith("bw_efficiency") and p.determined}
    ll128 = effs.pop("ring/ll128.bw_efficiency")
    assert ll128.fitted == pytest.approx(0.8, rel=0.08) and 0 < ll128.rel_std < 0.3
    assert all(abs(p.fitted - 1) < abs(ll128.fitted - 1) for p in effs.values())
    written = fit.topology.calibration.algo_proto(Algorithm.RING, Protocol.LL128)
    assert written.bw_efficiency.value == pytest.approx(ll128.fitted)


def test_unusable_measurements_are_refused():
    base = load_topology("dgx_a100")
    gloo = S.measurements(base, [S.Sweep(Collective.ALLREDUCE, (2**20,))])
    from dataclasses import replace

    with pytest.raises(CalibrationError, match="measured with gloo"):
        calibrate([replace(gloo[0], backend="gloo")], base)
    nvls = replace(gloo[0], algorithm="nvls", protocol="simple", channels=16, source="x.txt:3")
    with pytest.raises(CalibrationError, match=r"x.txt:3: ran nvls.*fix the base topology"):
        calibrate([nvls], base)


def test_cli_calibrates_nccl_tests_output_and_jsonl(tmp_path, capsys):
    out = tmp_path / "fitted.yaml"
    nccl_tests = str(FIX / "all_reduce_perf_v2_13_h100x8.txt")
    assert main(["calibrate", nccl_tests, "--topology", "dgx_h100", "-o", str(out)]) == 2
    assert "pass --keep-undetermined" in capsys.readouterr().err
    assert main(["calibrate", nccl_tests, "--topology", "dgx_h100", "-o", str(out),
                 "--keep-undetermined", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["size_range"] for r in report["fit_error"]] == ["< 64KiB", "64KiB - 16MiB", ">= 16MiB"]
    assert report["heldout_error"] and set(report["heldout_rel_std"]) <= {"small", "medium", "large"}
    assert report["rms_log_error"]["fitted"] < report["rms_log_error"]["base"]
    fitted = load_topology(out)  # a normal topology file
    nvlink = next(p for p in report["parameters"] if p["parameter"] == "nvlink.bandwidth_GBps")
    assert fitted.tiers[0].bandwidth_GBps == pytest.approx(nvlink["fitted"], rel=1e-3)

    base = load_topology("dgx_h100")
    jsonl = tmp_path / "m.jsonl"
    write_jsonl(S.measurements(S.perturbed(base, TRUE_FACTORS), _sweeps(), seed=6), jsonl)
    plot = tmp_path / "fit.png"
    assert main(["calibrate", str(jsonl), "--topology", "dgx_h100", "-o", str(out),
                 "--plot", str(plot)]) == 0
    printed = capsys.readouterr().out
    assert "infiniband.bandwidth_GBps" in printed and "held-out sizes" in printed
    assert plot.stat().st_size > 10_000
    fitted = load_topology(out)
    assert fitted.tiers[1].bandwidth_GBps == pytest.approx(35.0, rel=0.03)
    cal = fitted.calibration  # written, read back, and used by every command on this file
    assert cal.measurements == 110 and dict(cal.heldout_error)
    assert dict(cal.tiers)["infiniband.bandwidth_GBps"].rel_std < 0.05


def test_cli_reads_every_format_and_refuses_unreadable_files_in_one_line(tmp_path, capsys):
    out = tmp_path / "fitted.yaml"
    empty = tmp_path / "notes.txt"
    empty.write_text("nothing measured here\n")
    missing = tmp_path / "missing.txt"
    for bad in (empty, missing, tmp_path):
        assert main(["calibrate", str(bad), "--topology", "dgx_h100", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert str(bad) in err and len(err.splitlines()) == 1
    locked = tmp_path / "locked.txt"
    locked.write_text((FIX / "all_reduce_perf_v2_13_h100x8.txt").read_text())
    locked.chmod(0)
    if not os.access(locked, os.R_OK):  # root reads anything
        assert main(["calibrate", str(locked), "--topology", "dgx_h100", "-o", str(out)]) == 2
        assert "permission" in capsys.readouterr().err.lower()


def test_cli_calibrates_from_an_nccl_tests_json_report(tmp_path, capsys):
    """A -J report of a forced NCCL_ALGO=RING run on one H100 node (realdata's format fixture)."""
    report = Path(__file__).parent / "fixtures" / "real" / "formats" / "all_reduce_perf_h100_ring.json"
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(report), "--topology", "dgx_h100", "-o", str(out),
                 "--keep-undetermined", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["measurements"] > 30
    assert result["rms_log_error"]["fitted"] < result["rms_log_error"]["base"]
    assert load_topology(out).calibration.measurements == result["measurements"]


def test_held_out_sizes_alternate_within_every_run():
    from dynamiccl.profiler.fit_report import split_every_other

    base = load_topology("dgx_h100")
    records = S.measurements(base, _sweeps(nodes=(1, 2)), seed=7)
    train, test = split_every_other(records)
    assert len(train) + len(test) == len(records) and not set(map(id, train)) & set(map(id, test))
    runs = {(r.source, r.collective, r.algorithm) for r in records}
    for run in runs:
        fitted = sorted(r.nbytes for r in train if (r.source, r.collective, r.algorithm) == run)
        held = sorted(r.nbytes for r in test if (r.source, r.collective, r.algorithm) == run)
        assert all(a < b < c for a, b, c in zip(fitted, held, fitted[1:], strict=False))
