"""Issue 33's trial in the suite: hostile and careless inputs through the real ``dynamiccl`` executable.

The cases are the trial's own list (``experiments/hostile_inputs.py``). One of each kind, each
answered before any fitting or sweep (``Case.suite``), runs here as its own process, as a user would
start it, in a fresh copy of the trial's inputs; each must be refused in one line with exit code 2
or answered with exit code 0 (as the case says), say what the case says it must say, and leave
every input as it was. The rest, fitting measurements for seconds each, run only in the trial.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "hostile_inputs.py"
sys.path.insert(0, str(SCRIPT.parent))
import hostile_inputs  # noqa: E402

sys.path.pop(0)

SUITE = [case for case in hostile_inputs.cases() if case.suite]
#: Seconds a quick refusal may take however loaded the machine (a hang blocks for ever).
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("dynamiccl") is None:
        pytest.skip("the dynamiccl executable is not on PATH (pip install -e .)")
    root = tmp_path_factory.mktemp("hostile") / "inputs"
    hostile_inputs.build_workspace(root)
    return root


@pytest.mark.parametrize("case", SUITE, ids=[c.name[-70:] for c in SUITE])
def test_a_hostile_input_is_answered_cleanly(inputs: Path, case: hostile_inputs.Case) -> None:
    outcome = hostile_inputs.run_case(case, inputs, TIMEOUT_S)
    assert outcome.verdict in ("clean", "sensible"), (outcome.verdict, outcome.answer)


def test_the_trial_runs_each_case_through_the_executable_and_sorts_what_it_sees(inputs: Path) -> None:
    """The sorting itself: a refusal that is due but does not come is nonsense accepted, a message
    without what it must say is misleading, and a file written unasked is stray."""
    Case = hostile_inputs.Case
    run = hostile_inputs.run_case
    assert run(Case(("topologies",), "refuse"), inputs, TIMEOUT_S).verdict == "accepted"
    assert run(Case(("show", "nosuch.dccl"), "refuse", says="a file that is here"), inputs,
               TIMEOUT_S).verdict == "misleading"
    stray = Case(("export", "--policy", "nccl_default", "--topology", "dgx_h100", "-o", "new.dccl"),
                 "accept")
    assert run(stray, inputs, TIMEOUT_S).verdict == "stray"


def test_a_cases_stop_signal_reaches_the_command_on_time(inputs: Path) -> None:
    """A case with ``stop`` gets its signal while it runs, as from ``timeout`` or a closed terminal
    (``ab run`` and ``profile job`` must end their job and keep what they measured): here a job
    that would sleep for a minute, stopped after a second, ends with the shell's 143."""
    import signal

    case = hostile_inputs.accept("profile", "job", "--out", "prof", "--", "sleep", "60", code=143,
                                 says="stopped by SIGTERM", stop=(signal.SIGTERM, 1.0))
    outcome = hostile_inputs.run_case(case, inputs, TIMEOUT_S)
    assert (outcome.verdict, outcome.code) == ("sensible", 143), outcome.answer
    assert outcome.seconds < 30


def test_a_process_a_case_leaves_running_is_found_and_ended(tmp_path: Path) -> None:
    """The trial's check for stray processes: one whose working folder is the case's copy of the
    inputs is named and ended (a job profile job orphaned ran on, unseen by a check of files)."""
    import subprocess
    import time

    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    try:
        assert any("time.sleep(60)" in command for command in hostile_inputs._end_strays(tmp_path))
        assert left.wait(timeout=30) == -9
        time.sleep(0.1)
        assert hostile_inputs._end_strays(tmp_path) == []
    finally:
        left.kill()
