"""Calibration recovers known tier parameters from synthetic measurements and refuses what the
data cannot determine. The "real system" is the simulator with perturbed parameters plus seeded
3 % log-normal noise (profiler.fit.synthetic)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.cli.main import main
from dynamiccl.profiler.fit import synthetic as S
from dynamiccl.profiler.fit.calibrate import MAX_REL_STD, CalibrationError, calibrate, prepare
from dynamiccl.profiler.fit.fit_report import error_table, heldout_table, split_every_other
from dynamiccl.profiler.formats.measurements import read
from dynamiccl.profiler.formats.records import write_jsonl
from dynamiccl.system.knobs import nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology

FIX = Path(__file__).parent / "fixtures" / "profiler" / "nccl_tests"
SOPHIA = Path(__file__).parent / "fixtures" / "real" / "sophia_dgx_a100_ib"
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


def test_a_trial_point_with_a_vanishing_bandwidth_is_infinitely_wrong_without_a_warning(setup):
    """The solver may probe a log-coded bandwidth near zero (bench_tuning --calibrate did): the
    residual must be +inf, which least_squares rejects, and no overflow warning may reach the user."""
    from dynamiccl.profiler.fit import fit_params as FP
    from dynamiccl.profiler.fit.calibrate import _residuals, pick_configs

    base, _, records, _ = setup
    problem = prepare(records, base)
    problem.configs = pick_configs(problem, base)
    params = FP.tier_params(base)
    x = np.array([FP.encode(p, FP.natural_value(base, p)) for p in params])
    bandwidth = next(i for i, p in enumerate(params) if p.label == "infiniband.bandwidth_GBps")
    assert params[bandwidth].log_coded
    x[bandwidth] = -705.0  # e^-705 GB/s: a byte takes longer than a double can count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        residuals = _residuals(problem, base, params, x)
    crossing = np.array([shape[0] > 1 for shape in problem.shapes])
    assert np.isposinf(residuals[crossing]).any(), "the probe should overflow the largest sizes"
    assert np.all(residuals[crossing] > 1e3) and np.all(np.isfinite(residuals[~crossing]))


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
    with pytest.raises(CalibrationError, match=r"x.txt:3 .*: ran nvls.*give the topology"):
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
                 "--plot", str(plot)]) == 2  # its own earlier file, kept unless told
    assert "pass --force" in capsys.readouterr().err
    assert main(["calibrate", str(jsonl), "--topology", "dgx_h100", "-o", str(out),
                 "--plot", str(plot), "--force"]) == 0
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
    base = load_topology("dgx_h100")
    records = S.measurements(base, _sweeps(nodes=(1, 2)), seed=7)
    train, test = split_every_other(records)
    assert len(train) + len(test) == len(records) and not set(map(id, train)) & set(map(id, test))
    runs = {(r.source, r.collective, r.algorithm) for r in records}
    for run in runs:
        fitted = sorted(r.nbytes for r in train if (r.source, r.collective, r.algorithm) == run)
        held = sorted(r.nbytes for r in test if (r.source, r.collective, r.algorithm) == run)
        assert all(a < b < c for a, b, c in zip(fitted, held, fitted[1:], strict=False))


def test_held_out_sizes_are_never_fitted_in_either_placement():
    """nccl-tests prints an out-of-place and an in-place time for every size: a size is held out
    with both, or the held-out error is measured on sizes the fit saw."""
    records, _ = read(SOPHIA / "all_reduce_n2.txt")
    assert {r.in_place for r in records} == {False, True}
    train, test = split_every_other(records)
    assert {r.nbytes for r in train}.isdisjoint({r.nbytes for r in test})
    sizes = sorted({r.nbytes for r in records})
    assert sorted({r.nbytes for r in test}) == sizes[1::2] and len(train) + len(test) == len(records)


def _sophia_records():
    return [r for name in ("all_reduce_n2.txt", "all_gather_n2.txt") for r in read(SOPHIA / name)[0]]


def _system_fit_inputs(name: str):
    from dataclasses import replace

    from dynamiccl.profiler.formats.published import load_system, system_topology

    system = Path(__file__).parent / "fixtures" / "real" / name
    runs = load_system(system)
    return [r for run in runs for r in run.records], replace(system_topology(system), launch=runs[0].launch)


def test_determined_means_the_reported_uncertainty_is_within_the_limit():
    """One criterion: what is written as fitted carries a reported uncertainty within the limit,
    and whatever exceeds it is kept at its base value with the reason (real p4d logs on EFA, whose
    data cannot tell the network latency from the transport's overhead)."""
    records, base = _system_fit_inputs("p4d_a100_efa")
    fit = calibrate(records, base, keep_undetermined=True)
    fitted = [p for p in fit.params + fit.refinements if p.determined]
    assert fitted and all(p.rel_std <= MAX_REL_STD for p in fitted), \
        [(p.label, p.rel_std) for p in fitted if p.rel_std > MAX_REL_STD]
    kept = {p.label: p for p in fit.params + fit.refinements if not p.determined and p.note}
    assert "efa.latency_us" in kept and "only determined to" in kept["efa.latency_us"].note
    assert all(p.fitted == p.base for p in kept.values())
    cal = fit.topology.calibration
    written = [f for _, f in cal.tiers] + [f for a in cal.algorithms
                                          for f in (a.bw_efficiency, a.base_latency_us) if f]
    written += [f for f in (cal.launch_floor_us, cal.transport_overhead_us) if f]
    assert written and all(f.rel_std <= MAX_REL_STD for f in written)
    assert fit.topology.tiers[1].latency_us == base.tiers[1].latency_us
    with pytest.raises(CalibrationError, match="cannot determine .* pass --keep-undetermined"):
        calibrate(records, base)


def test_fitted_parameters_stay_within_physical_bounds():
    """Issue 23: the DGX A100 logs fitted an NVLink hop of 0 µs and a ring/LL128 efficiency of
    1.073; a hop takes at least its link's floor and no algorithm beats the links' own rate."""
    from dynamiccl.profiler.fit.fit_params import HOP_LATENCY_FLOOR_US, MAX_EFFICIENCY

    base = load_topology(SOPHIA / "topology.yaml")
    fit = calibrate(_sophia_records(), base, keep_undetermined=True)
    by_label = {p.label: p for p in fit.params + fit.refinements}
    for tier in base.tiers:
        assert by_label[f"{tier.name}.latency_us"].fitted >= HOP_LATENCY_FLOOR_US[tier.link]
    efficiencies = [p for p in fit.refinements if p.label.endswith(".bw_efficiency")]
    assert efficiencies and all(p.fitted <= MAX_EFFICIENCY for p in efficiencies)
    assert by_label["ring/ll128.bw_efficiency"].fitted == MAX_EFFICIENCY  # was 1.073
    assert fit.topology.tiers[0].latency_us == HOP_LATENCY_FLOOR_US["nvlink"]  # was 0
    assert fit.rms_log(fitted=True) < 0.12 < fit.rms_log(fitted=False)


def test_cli_calibrates_real_logs_without_their_no_op_rows(tmp_path, capsys):
    """The size-0 rows of all_gather_n2.txt (6 sizes, ~0.2 µs each) are no measurements: read as
    ones they wreck the fit and a log-size axis cannot draw them."""
    out, plot = tmp_path / "fitted.yaml", tmp_path / "fit.png"
    assert main(["calibrate", str(SOPHIA / "all_reduce_n2.txt"), str(SOPHIA / "all_gather_n2.txt"),
                 "--topology", str(SOPHIA / "topology.yaml"), "-o", str(out), "--keep-undetermined",
                 "--plot", str(plot), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["measurements"] == 2 * 29 + 2 * (29 - 6)
    assert report["rms_log_error"]["base"] < 0.3 and report["rms_log_error"]["fitted"] < 0.15
    assert max(r["max_abs_pct"] for r in report["fit_error"]) < 100
    assert plot.stat().st_size > 10_000


def test_cli_refuses_a_json_that_is_no_measurement_in_one_line(tmp_path, capsys):
    bad = tmp_path / "j.json"
    bad.write_text('{"a": 1}\n')
    assert main(["calibrate", str(bad), "--topology", "dgx_h100", "-o", str(tmp_path / "f.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "__init__" not in err
    assert all(f in err for f in ("-J", "tuner measurement CSV", "--record"))


def test_a_latency_pair_seen_only_as_a_sum_near_zero_keeps_the_fit():
    """TCP between two L40S hosts: a hop's latency and the socket transport's overhead only show as
    their sum, which the data puts near 0 µs. Both bounds bind, so the latency is determined (at a
    network hop's floor) and the overhead is the one sent back to its base value, with the fit still
    good; sending the overhead back first (8 µs, above the whole sum) would wreck it."""
    from dynamiccl.profiler.fit.fit_params import HOP_LATENCY_FLOOR_US

    records, base = _system_fit_inputs("l40s_tcp_socket")
    fit = calibrate(records, base, keep_undetermined=True)
    assert fit.rms_log(fitted=True) < 0.1 < fit.rms_log(fitted=False)
    by_label = {p.label: p for p in fit.params + fit.refinements}
    latency = by_label["socket.latency_us"]
    assert latency.determined and latency.fitted == HOP_LATENCY_FLOOR_US["net"]
    assert latency.rel_std <= MAX_REL_STD
    assert all(p.rel_std <= MAX_REL_STD for p in by_label.values() if p.determined)


H200 = Path(__file__).parent / "fixtures" / "real" / "runner" / "h200_emulated4"


def test_forced_runs_nccl_honoured_are_fitted_and_a_record_it_could_not_run_is_left_out(tmp_path,
                                                                                      capsys):
    """Issue 28: the H200 sweep's forced LL128 launches ran (NCCL_PROTO names the protocol, so
    NCCL's default rule that keeps LL128 off over a socket does not apply) and are fitted; a record
    NCCL could not have run there (NVLS on one GPU per node) is named and left out, and the fit
    goes on with the rest."""
    from dataclasses import replace

    base = load_topology(H200 / "topology.yaml")
    records = read(H200 / "sweep.jsonl")[0]
    ll128 = [r for r in records if r.protocol == "ll128"]
    assert ll128 and not base.ll128_enabled
    impossible = replace(records[0], algorithm="nvls", protocol="simple", source="bad.jsonl:7")
    fit = calibrate([*records, impossible], base, keep_undetermined=True, corrections=False)
    assert len(fit.problem.records) == len(records)
    assert {c.protocol for c in fit.problem.configs} == set(Protocol)  # LL128 among them
    assert len(fit.skipped) == 1 and fit.skipped[0].startswith("bad.jsonl:7 (allreduce 4096 B")
    assert "nvls" in fit.skipped[0]
    assert fit.rms_log(True) < 0.7 * fit.rms_log(False)
    logs = tmp_path / "with_bad.jsonl"
    write_jsonl([*records, impossible], logs)
    assert main(["calibrate", str(logs), "--topology", str(H200 / "topology.yaml"),
                 "--keep-undetermined", "-o", str(tmp_path / "fitted.yaml")]) == 0
    assert "note: not fitted: bad.jsonl:7" in capsys.readouterr().err
