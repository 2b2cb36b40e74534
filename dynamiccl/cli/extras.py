"""Which extra to install when a command needs a library the install lacks.

``pip install dynamiccl`` is the core: the plugin, ``tune``, ``show``, ``export``, ``check-model``,
``calibrate``, ``simulate``, ``explain``, ``profile topology``. Training, the runtime, sweeps and
figures need the extras of ``pyproject.toml`` (``[train]``, ``[runtime]``, ``[sweep]``, ``[plots]``,
``[all]``). Commands import those libraries only when they run, so a core install reaches the
import, and :func:`missing_extra` turns its ModuleNotFoundError into one line naming the extra. Which
extra installs which distribution is read from the installed package's metadata (pyproject's
extras), so it is written once; only the import names, which differ from the distributions', are
listed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, requires

#: The optional libraries by import name -> the distribution that provides it.
OPTIONAL_MODULES = {
    "torch": "torch", "gymnasium": "gymnasium", "stable_baselines3": "stable-baselines3",
    "sb3_contrib": "sb3-contrib", "hydra": "hydra-core", "omegaconf": "hydra-core", "wandb": "wandb",
    "ray": "ray", "matplotlib": "matplotlib", "tqdm": "tqdm", "scipy": "scipy",
}
PROJECT = "dynamiccl"


#: A requirement line of the package metadata: name, [extras], version bounds; marker.
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?[^;]*(?:;(.*))?")


@dataclass(frozen=True)
class Requirement:
    """One requirement of an extra: a distribution and the extras it asks of it."""

    name: str
    extras: frozenset[str]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_requirements(lines: list[str] | None = None) -> dict[str, list[Requirement]]:
    """Each extra -> its requirements (other extras not expanded), from the metadata's requirement
    lines (default: the installed package's; the core's, without an extra marker, are left out)."""
    if lines is None:
        try:
            lines = requires(PROJECT) or []
        except PackageNotFoundError:
            return {}
    extras: dict[str, list[Requirement]] = {}
    for line in lines:
        name, asked, marker = _REQUIREMENT.match(line).groups()
        found = re.search(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker or "")
        if found:
            wanted = frozenset(e.strip() for e in (asked or "").split(",") if e.strip())
            extras.setdefault(found.group(1), []).append(Requirement(name, wanted))
    return extras


def installed_by(extra: str, extras: dict[str, list[Requirement]], seen: frozenset = frozenset()
                 ) -> set[str]:
    """The distributions (normalized names) installing ``extra`` brings, extras it names included."""
    out: set[str] = set()
    for req in extras.get(extra, []):
        if _normalized(req.name) == PROJECT:
            for inner in req.extras - seen:
                out |= installed_by(inner, extras, seen | {extra})
        else:
            out.add(_normalized(req.name))
    return out


def extra_for(distribution: str, preferred: str | None = None) -> str | None:
    """The extra to install for ``distribution``: ``preferred`` (the command's own) if it brings it,
    else the smallest of the extras that name it themselves (not through another extra); None when
    no extra does (or the metadata is missing)."""
    extras = extra_requirements()
    want = _normalized(distribution)
    if preferred and want in installed_by(preferred, extras):
        return preferred
    naming = [name for name, reqs in extras.items() if any(_normalized(r.name) == want for r in reqs)]
    return min(naming, key=lambda name: (len(installed_by(name, extras)), name), default=None)


def missing_extra(exc: ModuleNotFoundError, preferred: str | None = None) -> str | None:
    """One line for a command that imported an optional library this install lacks, naming the
    extra that installs it; None when ``exc`` is about anything else (a bug, not the install)."""
    module = (exc.name or "").split(".")[0]
    distribution = OPTIONAL_MODULES.get(module)
    if distribution is None:
        return None
    extra = extra_for(distribution, preferred) or preferred or "all"
    return (f"this needs {distribution}, which this install does not have: pip install "
            f"'{PROJECT}[{extra}]' (in a source checkout: pip install -e '.[{extra}]')")
