"""The pinned install: both README commands install with the pins CI tested (and the extras their
command needs), CI runs the README's test command verbatim, and the pins satisfy pyproject.toml's
bounds for the core and every extra (whether they still resolve on the index is
`.ci/constraints.py check`, which CI runs on the test install, the core and every extra)."""

from __future__ import annotations

import re
from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PINS = ".ci/constraints.txt"


def _readme_commands() -> list[str]:
    """The README's one-line commands that start from nothing (a fresh venv)."""
    return re.findall(r"^python3 -m venv \.venv && .*$", (REPO / "README.md").read_text(), re.M)


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / PINS).read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+", line), f"not an exact pin: {line}"
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_both_readme_commands_install_the_pins_and_ci_runs_the_test_command_verbatim():
    commands = _readme_commands()
    assert len(commands) == 2 and [c.rsplit("&& ", 1)[1] for c in commands] == [
        "dynamiccl train experiment=quickstart", "python -m pytest -q"]
    assert all(f"pip install -q -c {PINS} " in c or f"pip install -c {PINS} " in c for c in commands)
    # each installs the extras its command needs: training, and everything for the suite
    assert ['-e ".[train]"' in commands[0], '-e ".[test]"' in commands[1]] == [True, True]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci, "CI must run the README's test command as written"
    assert "python3 .ci/constraints.py check" in ci


def _requirements(extras: set[str]) -> list[Requirement]:
    """pyproject's requirements (as installed) of the core and ``extras``, with the extras those
    name of dynamiccl itself (``dynamiccl[train]``) followed."""
    reqs = [Requirement(line) for line in requires("dynamiccl")]
    out = [req for req in reqs if req.marker is None]
    done, todo = set(), set(extras)
    while todo:
        extra = todo.pop()
        done.add(extra)
        for req in reqs:
            if req.marker is not None and req.marker.evaluate({"extra": extra}):
                if req.name == "dynamiccl":
                    todo |= req.extras - done
                else:
                    out.append(req)
    return out


def test_the_pins_satisfy_every_bound_of_pyproject():
    """Of the test install: the core and every extra, since [test] names them all."""
    pins = _pins()
    assert "dynamiccl" not in pins
    names = set()
    for req in _requirements({"test"}):
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        names.add(name)
        assert name in pins, f"{req.name} is not pinned in {PINS}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{PINS} pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
    assert {"torch", "ray", "wandb", "stable-baselines3", "matplotlib", "pytest"} <= names
