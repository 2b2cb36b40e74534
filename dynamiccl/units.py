"""Sizes and durations as people write them (``100MB``, ``4GiB``, ``10ms``)."""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30,
}
_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6, "": 1.0}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"


def parse_size(text: str | int) -> int:
    """Bytes from ``8``, ``64KB`` (10^3), ``64KiB`` (2^10), ``1.5GB``; nccl-tests' bare K/M/G are binary."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative, got {text}")
        return text
    m = re.fullmatch(_NUMBER + r"([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _SIZE_UNITS:
        raise ValueError(
            f"cannot read size {text!r}: write a number with B, KB, MB, GB, KiB, MiB or GiB, e.g. 100MB"
        )
    return int(round(float(m.group(1)) * _SIZE_UNITS[unit]))


def parse_duration_us(text: str | float) -> float:
    """Microseconds from ``10ms``, ``250us``, ``3.5`` (bare numbers are microseconds)."""
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(_NUMBER + r"([a-zµ]*)\s*", str(text).lower())
    if not m or m.group(2) not in _TIME_UNITS:
        raise ValueError(f"cannot read duration {text!r}: write e.g. 10ms, 250us or 1.5s")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


def format_size(nbytes: int) -> str:
    """Binary units the way nccl-tests users read them: 8B, 64KiB, 1GiB, 1.5MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{nbytes}B"


def format_time_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f}s"
    if us >= 1e3:
        return f"{us / 1e3:.2f}ms"
    return f"{us:.1f}us"
