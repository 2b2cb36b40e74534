"""Measured corrections: what the fitted parameters still miss, measured per size, used between the
sizes measured, faded out beyond them, and only where they were measured."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.profiler.fit.calibrate import calibrate, pick_configs, predict, prepare
from dynamiccl.profiler.fit.fit_report import split_every_other, topology_yaml
from dynamiccl.profiler.formats.published import load_system, system_topology
from dynamiccl.simulator import simulate
from dynamiccl.system.calibration import (
    CORRECTION_FADE_OCTAVES,
    CORRECTION_HOLD_OCTAVES,
    Calibration,
    CalibrationFormatError,
    MeasuredCorrection,
    calibration_from_dict,
)
from dynamiccl.system.knobs import ConfigBatch, nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology

MIB = 1 << 20
RING_SIMPLE = MeasuredCorrection(Collective.ALLREDUCE, Algorithm.RING, Protocol.SIMPLE, 1, 8,
                                 (1.0 * MIB, 4.0 * MIB), (2.0, 8.0))
FIXTURES = Path(__file__).parent / "fixtures" / "real"


def test_a_correction_interpolates_in_log_log_holds_then_fades_back_to_the_model():
    f = RING_SIMPLE.factor
    assert f(np.array([MIB, 4 * MIB]))[[0, 1]] == pytest.approx([2.0, 8.0])
    assert f(np.array([2 * MIB]))[0] == pytest.approx(4.0)        # halfway in log size and log factor
    hold = 4 * MIB * 2 ** CORRECTION_HOLD_OCTAVES
    assert f(np.array([hold]))[0] == pytest.approx(8.0)
    halfway = hold * 2 ** (CORRECTION_FADE_OCTAVES / 2)
    assert f(np.array([halfway]))[0] == pytest.approx(math.sqrt(8.0))
    gone = hold * 2 ** CORRECTION_FADE_OCTAVES
    assert f(np.array([gone, 16 * gone, 8.0]))[[0, 1, 2]] == pytest.approx([1.0, 1.0, 1.0])


def test_corrections_round_trip_and_a_bad_one_names_its_field():
    cal = Calibration(measurements=4, corrections=(RING_SIMPLE,))
    assert calibration_from_dict(cal.to_dict()) == cal
    bad = cal.to_dict()
    bad["corrections"][0]["sizes"] = [4 * MIB, MIB]
    with pytest.raises(CalibrationFormatError, match="ascending"):
        calibration_from_dict(bad)
    bad = cal.to_dict()
    bad["corrections"][0]["protocol"] = "fast"
    with pytest.raises(CalibrationFormatError) as err:
        calibration_from_dict(bad)
    assert err.value.field == "corrections[0].protocol"


def test_the_simulator_applies_a_correction_only_where_it_was_measured():
    base = load_topology("dgx_h100", nodes=1)
    corrected = replace(base, calibration=Calibration(corrections=(RING_SIMPLE,)))
    configs = ConfigBatch.from_configs([nccl_config(Algorithm.RING, Protocol.SIMPLE, 16),
                                        nccl_config(Algorithm.RING, Protocol.LL, 16),
                                        nccl_config(Algorithm.NVLS, Protocol.SIMPLE, 16)])
    colls = np.array([int(Collective.ALLREDUCE), int(Collective.ALLGATHER)])
    sizes = np.array([2.0 * MIB, 2.0 * MIB])
    before = simulate(base, colls, sizes, configs).time_us
    after = simulate(corrected, colls, sizes, configs).time_us
    assert after[0, 0] == pytest.approx(4.0 * before[0, 0])   # all-reduce, ring/simple: corrected
    assert after[0, 1:] == pytest.approx(before[0, 1:])        # other protocols and algorithms
    assert after[1] == pytest.approx(before[1])                # another collective
    two_nodes = corrected.resized(nodes=2)                     # another system shape
    assert simulate(two_nodes, colls, sizes, configs).time_us == pytest.approx(
        simulate(base.resized(nodes=2), colls, sizes, configs).time_us)


def _polaris_halves():
    runs = [r for r in load_system(FIXTURES / "polaris_a100_slingshot") if r.nodes == 2]
    topology = replace(system_topology(FIXTURES / "polaris_a100_slingshot"), launch=runs[0].launch)
    return topology, split_every_other([rec for run in runs for rec in run.records])


def _heldout_log_error(topology, records) -> np.ndarray:
    problem = prepare(records, topology)
    pred = predict(problem, topology, pick_configs(problem, topology))
    return np.abs(np.log(pred / problem.measured_us))


def test_calibration_writes_corrections_that_predict_unseen_sizes_better_than_the_parameters(
        tmp_path: Path):
    topology, (train, test) = _polaris_halves()
    fit = calibrate(train, topology, keep_undetermined=True)
    corrections = fit.topology.calibration.corrections
    assert corrections and all((c.nodes, c.gpus_per_node) == (2, 4) for c in corrections)
    measured = {float(r.nbytes) for r in train}
    assert {s for c in corrections for s in c.sizes} <= measured   # only sizes the fit saw
    params_only = replace(fit.topology, calibration=replace(fit.topology.calibration, corrections=()))
    with_corr, without = _heldout_log_error(fit.topology, test), _heldout_log_error(params_only, test)
    assert np.median(with_corr) < 0.8 * np.median(without)
    # the written file carries them (factors to the file's 4 digits)
    path = tmp_path / "fitted.yaml"
    path.write_text(topology_yaml(fit.topology))
    back = load_topology(path).calibration.corrections
    assert [c.sizes for c in back] == [c.sizes for c in corrections]
    assert np.concatenate([c.factors for c in back]) == pytest.approx(
        np.concatenate([c.factors for c in corrections]), rel=1e-3)


def test_recalibrating_ignores_the_corrections_of_an_earlier_fit():
    topology, (train, _) = _polaris_halves()
    first = calibrate(train, topology, keep_undetermined=True)
    written = first.topology.calibration
    skewed = replace(written, corrections=tuple(
        replace(c, factors=tuple(10.0 * f for f in c.factors)) for c in written.corrections))
    again = calibrate(train, replace(topology, calibration=skewed), keep_undetermined=True)
    assert again.topology.calibration.corrections == written.corrections
    plain = calibrate(train, topology, keep_undetermined=True, corrections=False)
    assert plain.topology.calibration.corrections == ()
