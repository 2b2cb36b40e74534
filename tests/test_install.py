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


def test_the_pin_check_offline_says_it_cannot_reach_the_index_not_that_the_pins_broke():
    """With the index unreachable pip finds no version of anything ("from versions: none"), which
    read as pins that no longer resolve and advised a refresh; it says nothing was checked."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PIP_INDEX_URL": "http://user:secret@127.0.0.1:9/simple", "PIP_RETRIES": "0"}
    done = subprocess.run([sys.executable, str(REPO / ".ci" / "constraints.py"), "check"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "constraints.txt: not checked: pip cannot reach the package index (http://127.0.0.1:9/simple: "
        "[Errno 111] Connection refused); connect to the network (or set PIP_INDEX_URL to a mirror, "
        "or a proxy) and run it again"), done.stderr
