"""The READMEs stay true: the front door is short and lists every command, every relative link and
every repository path they name exists, and the checklist for adding an algorithm names the steps
the code needs (the table, NCCL's formulas, the graph, the physics, the header, the prior, the
checkpoints, the tests)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from dynamiccl.cli.main import build_parser

REPO = Path(__file__).resolve().parents[1]
#: The front door and the reference beside the code it describes.
READMES = ("README.md", "dynamiccl/README.md", "agents/README.md", "envs/README.md",
           "profiler/README.md", "experiments/README.md")
#: A backticked path starting with one of these is a file or folder of the repository.
ROOTS = ("dynamiccl/", "agents/", "envs/", "profiler/", "configs/", "experiments/", "tests/")


def _text(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)}


def test_the_front_door_is_short_and_its_table_lists_every_command():
    text = _text("README.md")
    assert len(text.splitlines()) <= 250
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = re.findall(r"^\| `dynamiccl ([a-z-]+)", text, re.M)
    assert sorted(set(rows)) == sorted(sub.choices), "one row of the command table per subcommand"
    assert text.index("## Architecture") < text.index("## Results"), "the map comes right after"


@pytest.mark.parametrize("name", READMES)
def test_every_relative_link_resolves(name):
    text = _text(name)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (REPO / name).parent / path if path else REPO / name
        if not file.exists():
            broken.append(target)
        elif anchor and (file.is_dir() or anchor not in _anchors(file.read_text(encoding="utf-8"))):
            broken.append(target)
    assert not broken, f"{name}: links to nothing: {broken}"


@pytest.mark.parametrize("name", READMES)
def test_every_repository_path_named_exists(name):
    """A moved module leaves its old path in prose; this names it."""
    spans = re.findall(r"`([^`\s]+)`", re.sub(r"```.*?```", "", _text(name), flags=re.S))
    paths = {s.split("::")[0].rstrip(".,") for s in spans if s.startswith(ROOTS)}
    missing = sorted(p for p in paths
                     if "<" not in p and "*" not in p and "…" not in p and not (REPO / p).exists())
    assert not missing, f"{name} names paths that do not exist: {missing}"


def test_the_algorithm_checklist_names_every_step_the_code_needs():
    section = _text("dynamiccl/README.md").split("## Adding an NCCL algorithm")[1].split("\n## ")[0]
    for needed in ("dynamiccl/system/nccl.py", "dynamiccl/nccl_model/", "dynamiccl/nccl_model/graph.py",
                   "dynamiccl/simulator/<name>.py", "python -m dynamiccl.plugin.policy_format",
                   "dynamiccl/plugin/csrc/policy_format.h", "agents/shipping/learned_prior.npz",
                   "dynamiccl train agent=learned_prior", "tests/test_algorithm_table.py"):
        assert needed in section, needed
    assert "[adding an NCCL algorithm](dynamiccl/README.md#adding-an-nccl-algorithm)" in _text("README.md")
