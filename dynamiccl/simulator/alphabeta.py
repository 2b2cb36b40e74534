"""Pure α-β costs of the all-reduce algorithms in seed 004's Table 1 (power-of-two n).

α = per-round latency (µs), β = µs per byte, s = buffer bytes. These are the textbook formulas the
simulator's richer model reduces to on a single-tier any-to-any fabric; the tests check both.
"""

from __future__ import annotations

import math


def ring_allreduce_us(n: int, s: float, alpha: float, beta: float) -> float:
    """2(n−1) rounds of s/n: 2(n−1)α + 2(n−1)/n · sβ."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * s * beta


def rhd_allreduce_us(n: int, s: float, alpha: float, beta: float) -> float:
    """Recursive halving/doubling: 2 log2 n · α + 2(n−1)/n · sβ."""
    return 2 * math.log2(n) * alpha + 2 * (n - 1) / n * s * beta


def stragglar_allreduce_us(n: int, s: float, alpha: float, beta: float) -> float:
    """StragglAR with its precondition masked: (n + log2 n − 2)(α + s/(n−1) · β)."""
    r = n + math.log2(n) - 2
    return r * alpha + r / (n - 1) * s * beta


def broadcast_baseline_us(n: int, s: float, alpha: float, beta: float) -> float:
    """Seed 004's straggler-aware broadcast baseline: log2 n · α + log2 n · sβ."""
    return math.log2(n) * alpha + math.log2(n) * s * beta


def torus_allreduce_us(dims: tuple[int, ...], s: float, alpha: float, beta: float) -> float:
    """Dimension by dimension (reduce-scatter along each dimension, then all-gather back): a ring of
    d steps per dimension, 2 Σ(d−1) rounds of one hop, and the flat ring's bytes, 2(n−1)/n · sβ."""
    n = math.prod(dims)
    return 2 * sum(d - 1 for d in dims) * alpha + 2 * (n - 1) / n * s * beta


def ring_allgather_us(n: int, s: float, alpha: float, beta: float) -> float:
    """n−1 rounds of s/n (s = the gathered buffer, nccl-tests' size)."""
    return (n - 1) * alpha + (n - 1) / n * s * beta


def torus_allgather_us(dims: tuple[int, ...], s: float, alpha: float, beta: float) -> float:
    """All-gather along one dimension after the other: Σ(d−1) rounds, (n−1)/n · sβ of bytes."""
    n = math.prod(dims)
    return sum(d - 1 for d in dims) * alpha + (n - 1) / n * s * beta


def beta_us_per_byte(gbps: float) -> float:
    return 1e-3 / gbps
