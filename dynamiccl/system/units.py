"""Sizes and durations as people write them (``100M``, ``4GiB``, ``10ms``), read as nccl-tests reads them.

nccl-tests' size parser looks only at the first letter after the number and reads it as binary:
``-b 100M``, ``100MB`` and ``100MiB`` are all 100 × 2^20 bytes. Sizes typed for nccl-tests must mean
the same bytes here, so this module follows it (``K``, ``M``, ``G``, and ``T`` beyond it); plain
numbers are bytes. Numbers may carry a fraction or an exponent as long as the result is a whole
number of bytes below 2^63 (the largest size NCCL's size_t-based tuner interface and the policy file
can carry).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

#: The largest size accepted (exclusive): NCCL passes sizes as size_t, the policy file as int64.
SIZE_LIMIT = 2**63
#: The longest duration accepted, one hour in µs: no collective call (nor a rank's lateness to
#: one) lasts longer; a larger figure is a unit slip (seconds or nanoseconds written as µs).
MAX_DURATION_US = 3.6e9
SIZE_HELP = ("bytes, or a number with K, M, G or T: the first letter is binary as in nccl-tests, so "
             "100M, 100MB and 100MiB are all 100 MiB")

_BINARY = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?:([kKmMgGtT])(?:[iI]?[bB])?|[bB])?\s*")
_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6, "": 1.0}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"


def parse_size(text: str | int) -> int:
    """Bytes from ``8``, ``64K``, ``64KB``, ``64KiB`` (all binary, as nccl-tests) or ``1.5G``."""
    if isinstance(text, bool):
        raise ValueError(f"cannot read size {text!r}: write a number of bytes, e.g. 1048576 or 1M")
    if isinstance(text, int):
        value = Decimal(text)
    else:
        m = _SIZE.fullmatch(str(text))
        if not m:
            raise ValueError(f"cannot read size {text!r}: write {SIZE_HELP}")
        try:
            value = Decimal(m.group(1)) * _BINARY[(m.group(2) or "").lower()]
        except ArithmeticError:  # decimal.Overflow: an exponent beyond any size
            value = Decimal(SIZE_LIMIT)
    if value < 0:
        raise ValueError(f"size must not be negative, got {text}")
    if value >= SIZE_LIMIT:
        raise ValueError(f"size {text} is too large: sizes must be below 2^63 bytes (8 EiB)")
    if value != value.to_integral_value():
        raise ValueError(f"size {text} is not a whole number of bytes ({value} B)")
    return int(value)


def parse_duration_us(text: str | float) -> float:
    """Microseconds from ``10ms``, ``250us``, ``3.5`` (bare numbers are microseconds); finite, ≥ 0."""
    if isinstance(text, bool):
        raise ValueError(f"cannot read duration {text!r}: write e.g. 10ms, 250us or 1.5s")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(_NUMBER + r"([a-zµ]*)\s*", str(text).lower())
        if not m or m.group(2) not in _TIME_UNITS:
            raise ValueError(f"cannot read duration {text!r}: write e.g. 10ms, 250us or 1.5s")
        value = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"duration {text} must be a finite, non-negative time, e.g. 10ms")
    if value > MAX_DURATION_US:
        raise ValueError(f"duration {text} is longer than an hour; give at most 3600s")
    return value


def format_size(nbytes: int) -> str:
    """Binary units for labels and axes: 8B, 64KiB, 1GiB, 1.5MiB (tables print plain bytes)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{nbytes}B"


def elements(nbytes: int, type_bytes: int = 4) -> int:
    """nccl-tests' count column: elements of its default type (float, 4 bytes) in ``nbytes``."""
    return nbytes // type_bytes


def format_time_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f}s"
    if us >= 1e3:
        return f"{us / 1e3:.2f}ms"
    return f"{us:.1f}us"
