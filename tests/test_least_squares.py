"""The calibration's bounded least-squares solver (``profiler.fit.least_squares``), written on NumPy
so the core install needs no SciPy: textbook problems with known answers, then every real
calibration in the fixtures fitted as well as ``scipy.optimize.least_squares`` (trust-region
reflective, the method it replaced) fits it. SciPy comes with the ``[test]`` extra; the core
install does not have it (``test_core_install.py``)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

from dynamiccl.cli.main import main
from dynamiccl.profiler.fit import calibrate as C
from dynamiccl.profiler.fit.least_squares import least_squares
from dynamiccl.profiler.formats.measurements import read
from dynamiccl.profiler.formats.published import load_system, system_dirs, system_topology
from dynamiccl.system.topology import load_topology

REAL = Path(__file__).parent / "fixtures" / "real"
INF = math.inf
#: How much higher than SciPy's a cost may end (relative): per solve, and for a whole calibration.
SOLVE_RTOL, FIT_RTOL = 1e-3, 1e-4


def rosenbrock(x: np.ndarray) -> np.ndarray:
    return np.array([10 * (x[1] - x[0] ** 2), 1 - x[0]])


def scipy_trf(fun, x0, lower, upper, *, diff_step: float, max_nfev: int):
    """SciPy's solver as the calibration called it before (method, scaling, steps, budget)."""
    return scipy.optimize.least_squares(fun, x0, bounds=(lower, upper), method="trf",
                                        diff_step=diff_step, x_scale="jac", max_nfev=max_nfev)


def _recording(fun, seen: list):
    """``fun``, noting every point it is evaluated at in ``seen``."""
    def wrapped(x):
        seen.append(x.copy())
        return fun(x)
    return wrapped


# --- textbook problems -------------------------------------------------------------------------

def test_rosenbrock_from_the_textbook_start_reaches_its_minimum():
    sol = least_squares(rosenbrock, np.array([-1.2, 1.0]), [-INF, -INF], [INF, INF])
    assert sol.x == pytest.approx([1.0, 1.0], abs=1e-7)
    assert sol.cost < 1e-20 and sol.stop in ("gtol", "ftol", "xtol", "ftol+xtol")
    assert sol.njev > 1 and sol.nfev >= sol.njev


def test_an_optimum_on_a_bound_is_reached_and_no_evaluation_leaves_the_box():
    """Rosenbrock with x0 <= 0.5: the valley floor x1 = x0² is followed to the bound, (0.5, 0.25),
    cost ½(1 - 0.5)²; neither a trial point nor a finite-difference step is outside the box."""
    lower, upper = np.array([-INF, -INF]), np.array([0.5, INF])
    seen: list[np.ndarray] = []
    sol = least_squares(_recording(rosenbrock, seen), np.array([-2.0, 2.0]), lower,
                        upper, diff_step=1e-4)
    assert sol.x == pytest.approx([0.5, 0.25], abs=1e-6) and sol.cost == pytest.approx(0.125, rel=1e-8)
    assert all(np.all((x >= lower) & (x <= upper)) for x in seen)
    # a linear problem whose answer is outside the box on both sides: the box's nearest point
    target = np.array([3.0, -3.0, 0.5])
    sol = least_squares(lambda x: x - target, np.zeros(3), -np.ones(3), np.ones(3))
    assert sol.x == pytest.approx([1.0, -1.0, 0.5], abs=1e-6)


def test_a_rank_deficient_jacobian_gives_the_least_cost_and_leaves_an_unseen_parameter_alone():
    """The residuals see x0 and x1 only as their sum (best 1.2), x2 is pushed onto its bound 2, and
    x3 does not show at all (a zero column): cost ½(0.2² + 0.1² + 1²) = 0.525, x3 where it began."""
    def fun(x):
        s = x[0] + x[1]
        return np.array([s - 1, 2 * s - 2.5, x[2] - 3])

    sol = least_squares(fun, np.array([0.0, 0.0, 0.0, 0.7]), -np.ones(4), 2 * np.ones(4))
    assert np.all(np.isfinite(sol.x))
    assert sol.cost == pytest.approx(0.525, rel=1e-8)
    assert sol.x[0] + sol.x[1] == pytest.approx(1.2, abs=1e-4)
    assert sol.x[2] == pytest.approx(2.0, abs=1e-6) and sol.x[3] == 0.7


def test_a_trial_point_with_infinite_residuals_shrinks_the_step():
    """1/x - 1 is infinite at and below 0: the first step from 4 lands there, and the solver
    retreats instead of failing (the calibration's residual is inf where a bandwidth vanishes)."""
    def fun(x):
        return np.array([1 / x[0] - 1 if x[0] > 0 else INF])

    seen: list[np.ndarray] = []
    sol = least_squares(_recording(fun, seen), np.array([4.0]), [-INF], [INF])
    assert any(x[0] <= 0 for x in seen)
    assert sol.x == pytest.approx([1.0], abs=1e-6)


def test_the_evaluation_budget_is_kept():
    sol = least_squares(rosenbrock, np.array([-1.2, 1.0]), [-INF, -INF], [INF, INF], max_nfev=3)
    assert sol.stop == "max_nfev" and sol.nfev == 3


@pytest.mark.parametrize("x0, lower, upper, problem", [
    ([0.0], [1.0], [1.0], "lower bound"),
    ([3.0], [0.0], [2.0], "outside the bounds"),
    ([-1.0], [-INF], [INF], "not finite"),
])
def test_bad_input_is_refused(x0, lower, upper, problem):
    def log(x):
        with np.errstate(invalid="ignore"):
            return np.log(x)

    with pytest.raises(ValueError, match=problem):
        least_squares(log, np.array(x0), lower, upper)


@pytest.mark.parametrize("name, fun, x0, lower, upper", [
    ("rosenbrock", rosenbrock, [-1.2, 1.0], [-INF, -INF], [INF, INF]),
    ("rosenbrock, x1 >= 1.5", rosenbrock, [-1.2, 2.0], [-INF, 1.5], [INF, INF]),
    ("exponential decay, amplitude <= 1.5",
     lambda x: x[0] * np.exp(-x[1] * np.arange(10.0)) - 2 * np.exp(-0.5 * np.arange(10.0)),
     [1.0, 0.1], [0.0, 0.0], [1.5, 10.0]),
])
def test_textbook_problems_end_where_scipy_ends(name, fun, x0, lower, upper):
    x0, lower, upper = (np.array(v, dtype=float) for v in (x0, lower, upper))
    ours = least_squares(fun, x0, lower, upper, diff_step=1e-4, max_nfev=400)
    theirs = scipy_trf(fun, x0, lower, upper, diff_step=1e-4, max_nfev=400)
    assert ours.cost == pytest.approx(theirs.cost, rel=1e-9, abs=1e-15), name
    assert ours.x == pytest.approx(theirs.x, abs=1e-6), name


# --- every real calibration in the fixtures ----------------------------------------------------

def _published(system: Path):
    runs = load_system(system)
    topology = system_topology(system)
    launches = {run.launch for run in runs}
    if len(launches) == 1:  # the launch mode sets the host's launch floor (validate_real.py)
        topology = replace(topology, launch=launches.pop())
    return [r for run in runs for r in run.records], topology


def _runner_sweep():
    folder = REAL / "runner" / "h200_emulated4"
    return read(folder / "sweep.jsonl")[0], load_topology(folder / "topology.yaml")


DATASETS = {p.name: (lambda p=p: _published(p)) for p in system_dirs(REAL)}
DATASETS["runner/h200_emulated4"] = _runner_sweep


class SideBySide:
    """Our solver, as the calibration calls it, with SciPy's cost on the very same problem noted
    beside each solve."""

    def __init__(self) -> None:
        self.costs: list[tuple[float, float]] = []

    def __call__(self, fun, x0, lower, upper, *, diff_step: float, max_nfev: int):
        ours = least_squares(fun, x0, lower, upper, diff_step=diff_step, max_nfev=max_nfev)
        theirs = scipy_trf(fun, x0, lower, upper, diff_step=diff_step, max_nfev=max_nfev)
        self.costs.append((ours.cost, theirs.cost))
        return ours

    def check(self) -> None:
        assert self.costs, "the calibration called the solver"
        for ours, theirs in self.costs:
            assert ours <= theirs * (1 + SOLVE_RTOL), (ours, theirs)


@pytest.fixture(scope="module")
def tune_run(tmp_path_factory):
    """``dynamiccl tune`` on the 8xH100 fixture: what it hands the calibration, its fit, and the
    solves side by side."""
    calls, solver = [], SideBySide()
    real = C.calibrate

    def recorded(records, topology, **kwargs):
        fit = real(records, topology, **kwargs)
        calls.append((list(records), topology, kwargs, fit))
        return fit

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(C, "calibrate", recorded)
        mp.setattr(C, "least_squares", solver)
        out = tmp_path_factory.mktemp("tune") / "tuned.dccl"
        assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements",
                     str(REAL / "h100_nvswitch_node"), "-o", str(out)]) == 0
    assert len(calls) == 1
    return (*calls[0], solver)


def _gap_in_sigmas(label: str, ours: float, theirs: float, rel_std: float) -> float:
    """How far apart two fitted values are in the reported relative 1-sigma (a factor for
    bandwidths and efficiencies, a share of max(value, 1 µs) for latencies, as calibrate reports)."""
    if label.endswith(("GBps", "bw_efficiency")):
        return abs(math.log(ours / theirs)) / math.log1p(rel_std)
    return abs(ours - theirs) / (rel_std * max(theirs, 1.0))


def _same_fit_as_scipy(ours: C.FitResult, records, topology, monkeypatch, **kwargs) -> None:
    monkeypatch.setattr(C, "least_squares", scipy_trf)
    reference = C.calibrate(records, topology, **kwargs)
    assert ours.skipped == reference.skipped
    assert ours.rms_log(True) <= reference.rms_log(True) * (1 + FIT_RTOL)
    for mine, theirs in zip(ours.params + ours.refinements, reference.params + reference.refinements,
                            strict=True):
        assert (mine.label, mine.determined) == (theirs.label, theirs.determined)
        if theirs.determined:
            assert _gap_in_sigmas(theirs.label, mine.fitted, theirs.fitted, theirs.rel_std) <= 1.0, \
                (mine, theirs)
            assert mine.rel_std == pytest.approx(theirs.rel_std, rel=0.1), (mine, theirs)
        else:
            assert mine.fitted == theirs.fitted == theirs.base, (mine, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_real_calibration_fits_as_well_as_scipy(name, monkeypatch):
    """Each solve of the fit ends within 0.1 % of SciPy's cost on the same problem; the whole
    calibration (picks re-made, undetermined parameters dropped) ends within 0.01 % of SciPy's
    misfit, with the same parameters determined, each within the 1-sigma SciPy's fit reports."""
    records, topology = DATASETS[name]()
    solver = SideBySide()
    monkeypatch.setattr(C, "least_squares", solver)
    kwargs = {"keep_undetermined": True, "corrections": False}  # as tune calls it
    ours = C.calibrate(records, topology, **kwargs)
    solver.check()
    _same_fit_as_scipy(ours, records, topology, monkeypatch, **kwargs)


@pytest.mark.slow
def test_tune_on_the_8xh100_fixture_calibrates_as_scipy_did(tune_run, monkeypatch):
    records, topology, kwargs, fit, solver = tune_run
    assert any(p.determined for p in fit.params)
    solver.check()
    _same_fit_as_scipy(fit, records, topology, monkeypatch, **kwargs)
