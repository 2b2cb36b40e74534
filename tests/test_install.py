"""The pinned install: both README commands install with the pins CI tested, CI runs the README's test
command verbatim, and the pins satisfy pyproject.toml's bounds (whether they still resolve on the
index is `.ci/constraints.py check`, which CI runs)."""

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
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci, "CI must run the README's test command as written"
    assert "python3 .ci/constraints.py check" in ci


def test_the_pins_satisfy_every_bound_of_pyproject():
    pins = _pins()
    assert "dynamiccl" not in pins
    for req in map(Requirement, requires("dynamiccl")):  # pyproject's, as installed
        if req.marker is not None and not req.marker.evaluate({"extra": "test"}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is not pinned in {PINS}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{PINS} pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
