"""NCCL release versions as data: read from every place a log states one, compared, and written as
the window a policy file is stamped with.

NCCL states its version in several spellings, all of them read here into one :class:`NcclVersion`:

* its ``NCCL_DEBUG=INFO`` banner, ``NCCL INFO NCCL version 2.26.2+cuda12.4`` (``src/init.cc``,
  ``VERSION_STRING``: major.minor.patch, a suffix, ``+cuda`` and the CUDA version);
* nccl-tests' header, ``# nccl-tests version 2.17.9 nccl-headers=22602 nccl-library=22602``, and
  its ``-J`` report's ``"nccl_version": 22602``: ``NCCL_VERSION_CODE``, major * 10000 + minor * 100
  + patch since NCCL 2.9 (``src/nccl.h.in``: ``NCCL_VERSION(X,Y,Z)``);
* ``torch.cuda.nccl.version()``, a tuple ``(2, 26, 2)``, and the plain ``2.26.2`` of a sidecar.

A policy file's ``nccl`` header holds the releases it was measured on as ``LOW..HIGH`` (inclusive
at both ends, :data:`WINDOW_SEPARATOR`; a single ``A.B.C`` is read as ``A.B.C..A.B.C``); the tuner
plugin defers every call under an NCCL outside it. The window's grammar is written only here: the
policy file, ``show`` and the plugin's C check (whose header ``dynamiccl.plugin.policy_format``
generates from these constants) agree on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from dynamiccl.system.nccl import VERSION_CODE_WEIGHTS, version_code

#: Between the two ends of a policy file's ``nccl`` window (``2.26.2..2.26.2``).
WINDOW_SEPARATOR = ".."
#: Digits each part of a window's versions may have (major, minor, patch): minor and patch below
#: 100, as the version code requires.
WINDOW_VERSION_DIGITS = (3, 2, 2)
_WINDOW_VERSION = r"\.".join(f"([0-9]{{1,{n}}})" for n in WINDOW_VERSION_DIGITS)
_WINDOW = re.compile(f"{_WINDOW_VERSION}(?:{re.escape(WINDOW_SEPARATOR)}{_WINDOW_VERSION})?")
_CODE_MAJOR, _CODE_MINOR = VERSION_CODE_WEIGHTS[:2]
_DOTTED = re.compile(r"^v?(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
_CODE = re.compile(r"^\d{5,6}$")
#: nccl-tests' header: the NCCL it was built against and the one it loaded (2.13 and later).
_NCCL_TESTS_LIBRARY = re.compile(r"nccl-library=(\d{4,6})")
_INFO_BANNER = re.compile(r"NCCL version (v?\d+\.\d+\.\d+\S*)")


@dataclass(frozen=True, order=True)
class NcclVersion:
    """One NCCL release (major, minor, patch), ordered as releases are."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def code(self) -> int:
        """``NCCL_VERSION_CODE`` as ``ncclGetVersion`` returns it (22602 for 2.26.2)."""
        return version_code(self.major, self.minor, self.patch)

    @classmethod
    def from_code(cls, code: int) -> NcclVersion:
        """The release of a version code (23007 -> 2.30.7)."""
        return cls(code // _CODE_MAJOR, code // _CODE_MINOR % _CODE_MINOR, code % _CODE_MINOR)


def parse_version(value: object) -> NcclVersion | None:
    """The release ``value`` names, or None where it names none: ``2.26.2``, ``2.26.2+cuda12.4``,
    ``v2.26.2-1`` (a git tag), ``22602`` (a version code, int or text), ``(2, 26, 2)``."""
    if isinstance(value, NcclVersion):
        return value
    if isinstance(value, (tuple, list)) and len(value) >= 3 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value[:3]):
        return NcclVersion(*value[:3])
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if m := _DOTTED.match(text):
        return NcclVersion(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if _CODE.match(text):
        return NcclVersion.from_code(int(text))
    return None


def version_in_text(line: str) -> NcclVersion | None:
    """The version one log line states: NCCL's INFO banner or nccl-tests' header (the library it
    loaded, not the headers it was built with), else None."""
    if m := _INFO_BANNER.search(line):
        return parse_version(m.group(1))
    if m := _NCCL_TESTS_LIBRARY.search(line):
        return parse_version(m.group(1))
    return None


def window_text(versions: Iterable[NcclVersion]) -> str:
    """The ``nccl`` header of a policy measured on ``versions``: ``LOW..HIGH`` over them."""
    found = sorted(set(versions))
    if not found:
        raise ValueError("no NCCL version to stamp a policy with")
    return f"{found[0]}{WINDOW_SEPARATOR}{found[-1]}"


def parse_window(text: str) -> tuple[NcclVersion, NcclVersion] | None:
    """(low, high) of a policy file's ``nccl`` header, ``A.B.C`` or ``A.B.C..X.Y.Z`` with low <= high,
    or None where it is neither (the plugin then defers every call: it cannot tell where the policy
    holds). The plugin's reading: its C check is generated from the same grammar."""
    match = _WINDOW.fullmatch(text)
    if not match:
        return None
    parts = [int(g) for g in match.groups() if g is not None]
    low = NcclVersion(*parts[:3])
    high = NcclVersion(*parts[3:]) if len(parts) == 6 else low
    return (low, high) if low <= high else None


def in_window(version: NcclVersion, window: str) -> bool | None:
    """Whether ``version`` lies in the window (inclusive); None where the window is unreadable."""
    ends = parse_window(window)
    return None if ends is None else ends[0] <= version <= ends[1]
