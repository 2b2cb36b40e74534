"""Bounded nonlinear least squares on NumPy alone: the trust-region reflective method.

Why it is written by hand: the calibration (:mod:`.calibrate`, which ``tune`` runs) was the core
install's only use of SciPy, and SciPy is 143 MB installed against a core that must stay under
100 MB for fleet installs (issue 41). What is here is the one configuration the calibration uses,
the algorithm of SciPy's ``least_squares(method="trf", x_scale="jac")`` with a dense forward-
difference Jacobian and the exact trust-region solver, so the fit lands on the same minima;
``tests/test_least_squares.py`` checks it against SciPy on textbook problems and on every real
calibration in the fixtures.

The problem is ``min ½‖f(x)‖²`` subject to ``lower <= x <= upper`` (a bound may be infinite):

* **Affine scaling** (Coleman & Li 1996; Branch, Coleman & Li 1999): each variable is measured in
  units of its distance to the bound its gradient pushes it towards (``_coleman_li``), so a variable
  near a bound it is pressed against takes short steps and the iterates stay strictly inside.
* **Trust region** (Moré 1978): the step minimises the Gauss-Newton model within a radius, found
  from one SVD of the scaled Jacobian by Newton's method on the secular equation for the
  Levenberg-Marquardt parameter; the radius grows after a step the model predicted well and shrinks
  after one it did not.
* **Reflection** (Branch, Coleman & Li 1999): a step leaving the box is cut at the bound it meets
  and the best of three is taken by the model: the cut step drawn back inside, its reflection off
  that bound, and the scaled gradient step.
* **Scaling** by the Jacobian's column norms, never decreasing (Moré 1978, §3), so a parameter in
  microseconds and one in log-bandwidth take comparable steps.
* **Stop** as MINPACK does: the cost changes by less than ``ftol`` relatively on a well-predicted
  step, the step by less than ``xtol``, the scaled gradient by less than ``gtol``, or ``max_nfev``
  trial points were evaluated (the Jacobian's differences not counted, as SciPy counts).

References: J. J. Moré, "The Levenberg-Marquardt algorithm: implementation and theory", Numerical
Analysis, Lecture Notes in Mathematics 630, Springer, 1978, pp. 105-116. T. F. Coleman and Y. Li,
"An interior trust region approach for nonlinear minimization subject to bounds", SIAM J. Optim.
6(2), 1996, pp. 418-445. M. A. Branch, T. F. Coleman and Y. Li, "A subspace, interior, and conjugate
gradient method for large-scale bound-constrained minimization problems", SIAM J. Sci. Comput.
21(1), 1999, pp. 1-23.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_EPS = float(np.finfo(float).eps)
#: Stop Newton's iteration on the secular equation when the step's length is within 1 % of the radius.
_RADIUS_RTOL = 0.01
_NEWTON_ITERATIONS = 10


@dataclass(frozen=True)
class Solution:
    """Where the solver stopped."""

    x: np.ndarray
    #: Half the sum of the squared residuals at ``x``.
    cost: float
    #: The residuals at ``x``.
    fun: np.ndarray
    #: Trial points evaluated (the start included, the Jacobian's differences not).
    nfev: int
    #: Jacobians computed (each ``len(x)`` more evaluations).
    njev: int
    #: Why it stopped: "gtol", "ftol", "xtol", "ftol+xtol" (converged) or "max_nfev".
    stop: str


def least_squares(fun: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, lower: np.ndarray,
                  upper: np.ndarray, *, diff_step: float = math.sqrt(_EPS),
                  max_nfev: int | None = None, ftol: float = 1e-8, xtol: float = 1e-8,
                  gtol: float = 1e-8) -> Solution:
    """Minimises ``½‖fun(x)‖²`` within ``lower <= x <= upper`` from ``x0``.

    ``diff_step`` is the forward difference's step relative to ``|x|`` (``_jacobian``);
    ``max_nfev`` bounds the trial points (default ``100 * len(x0)``). ValueError on bounds that
    leave no room, a start outside them, or residuals that are not finite at the start.
    """
    x0 = np.asarray(x0, dtype=float)
    lower = np.broadcast_to(np.asarray(lower, dtype=float), x0.shape)
    upper = np.broadcast_to(np.asarray(upper, dtype=float), x0.shape)
    if np.any(lower >= upper):
        raise ValueError("each lower bound must be below its upper bound")
    if np.any((x0 < lower) | (x0 > upper)):
        raise ValueError("the start is outside the bounds")
    max_nfev = 100 * len(x0) if max_nfev is None else max_nfev
    x = _interior(x0, lower, upper, 1e-10)
    f = np.asarray(fun(x), dtype=float)
    if not np.all(np.isfinite(f)):
        raise ValueError("the residuals are not finite at the start")
    jac = _jacobian(fun, x, f, lower, upper, diff_step)
    nfev, njev, m = 1, 1, len(f)
    cost = 0.5 * float(f @ f)
    grad = jac.T @ f
    col_norm = np.linalg.norm(jac, axis=0)
    col_norm[col_norm == 0] = 1.0
    v, dv = _coleman_li(x, grad, lower, upper)
    v[dv != 0] *= col_norm[dv != 0]
    radius = float(np.linalg.norm(x * col_norm / np.sqrt(v))) or 1.0
    alpha = 0.0  # the Levenberg-Marquardt parameter of the last trust-region step
    stop = None
    while True:
        v, dv = _coleman_li(x, grad, lower, upper)
        g_norm = float(np.max(np.abs(grad * v), initial=0.0))
        if g_norm < gtol:
            stop = "gtol"
        if stop is not None or nfev >= max_nfev:
            break
        # the "hat" variables: Coleman-Li scaling applied after the column-norm scaling
        v[dv != 0] *= col_norm[dv != 0]
        d = np.sqrt(v) / col_norm
        diag_h = grad * dv / col_norm  # the model's extra curvature from the scaling's derivative
        g_h = d * grad
        jac_h = jac * d
        u, s, vt = np.linalg.svd(np.vstack([jac_h, np.diag(np.sqrt(diag_h))]), full_matrices=False)
        uf = u[:m].T @ f
        theta = max(0.995, 1.0 - g_norm)  # how far short of a bound a step stops
        reduction = -1.0
        while reduction <= 0 and nfev < max_nfev:
            p_h, alpha = _trust_region_step(uf, s, vt.T, m, radius, alpha)
            step, step_h, predicted = _choose_step(x, jac_h, diag_h, g_h, p_h, d, radius, lower,
                                                   upper, theta)
            x_new = _interior(x + step, lower, upper, 0.0)
            f_new = np.asarray(fun(x_new), dtype=float)
            nfev += 1
            step_h_norm = float(np.linalg.norm(step_h))
            if not np.all(np.isfinite(f_new)):
                radius = 0.25 * step_h_norm
                continue
            cost_new = 0.5 * float(f_new @ f_new)
            reduction = cost - cost_new
            new_radius, ratio = _new_radius(radius, reduction, predicted, step_h_norm)
            stop = _converged(reduction, cost, float(np.linalg.norm(step)),
                              float(np.linalg.norm(x)), ratio, ftol, xtol)
            if stop is not None:
                break
            alpha *= radius / new_radius
            radius = new_radius
        if reduction > 0:
            x, f, cost = x_new, f_new, cost_new
            jac = _jacobian(fun, x, f, lower, upper, diff_step)
            njev += 1
            grad = jac.T @ f
            col_norm = np.maximum(col_norm, np.linalg.norm(jac, axis=0))
    return Solution(x, cost, f, nfev, njev, stop or "max_nfev")


def _jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, f: np.ndarray,
              lower: np.ndarray, upper: np.ndarray, rel_step: float) -> np.ndarray:
    """Forward differences with a step of ``rel_step * |x_j|`` away from zero (SciPy's rule for a
    given ``diff_step``; at ``x_j = 0``, where that step vanishes, ``sqrt(eps) * max(1, |x_j|)``).
    A step that would leave the box goes the other way if that fits, else the larger room is taken
    (whatever it is)."""
    sign = np.where(x >= 0, 1.0, -1.0)
    h = rel_step * sign * np.abs(x)
    vanishes = (x + h) - x == 0
    h[vanishes] = math.sqrt(_EPS) * sign[vanishes] * np.maximum(1.0, np.abs(x[vanishes]))
    room_below, room_above = x - lower, upper - x
    fits = np.abs(h) <= np.maximum(room_below, room_above)
    h[((x + h < lower) | (x + h > upper)) & fits] *= -1
    h[~fits] = np.where(room_above >= room_below, room_above, -room_below)[~fits]
    jac = np.empty((len(f), len(x)))
    for j in range(len(x)):
        moved = x.copy()
        moved[j] += h[j]
        jac[:, j] = (np.asarray(fun(moved), dtype=float) - f) / (moved[j] - x[j])
    return jac


def _interior(x: np.ndarray, lower: np.ndarray, upper: np.ndarray, rstep: float) -> np.ndarray:
    """``x`` moved strictly inside the box: off a bound it is within ``rstep * max(1, |bound|)`` of
    by that much (by one floating-point step when ``rstep`` is 0); to the middle of a box too
    narrow for that."""
    out = x.copy()
    if rstep == 0:
        at_low, at_high = x <= lower, x >= upper
        out[at_low] = np.nextafter(lower[at_low], upper[at_low])
        out[at_high] = np.nextafter(upper[at_high], lower[at_high])
    else:
        below, above = x - lower, upper - x
        near_low = rstep * np.maximum(1.0, np.abs(lower))
        near_high = rstep * np.maximum(1.0, np.abs(upper))
        at_low = np.isfinite(lower) & (below <= np.minimum(above, near_low))
        at_high = np.isfinite(upper) & (above <= np.minimum(below, near_high))
        out[at_low] = lower[at_low] + near_low[at_low]
        out[at_high] = upper[at_high] - near_high[at_high]
    tight = (out < lower) | (out > upper)
    out[tight] = 0.5 * (lower[tight] + upper[tight])
    return out


def _coleman_li(x: np.ndarray, grad: np.ndarray, lower: np.ndarray,
                upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Coleman-Li scaling vector ``v`` and its derivative ``dv`` (Coleman & Li 1996, eq. 2.2):
    the distance to the finite bound the negative gradient points at, else 1."""
    v, dv = np.ones_like(x), np.zeros_like(x)
    up = (grad < 0) & np.isfinite(upper)
    v[up], dv[up] = upper[up] - x[up], -1.0
    down = (grad > 0) & np.isfinite(lower)
    v[down], dv[down] = x[down] - lower[down], 1.0
    return v, dv


def _trust_region_step(uf: np.ndarray, s: np.ndarray, v: np.ndarray, m: int, radius: float,
                       alpha: float) -> tuple[np.ndarray, float]:
    """The step minimising ``‖J p + f‖`` with ``‖p‖ <= radius``, and its Levenberg-Marquardt
    parameter, from the SVD ``J = U diag(s) V'`` (``uf = U' f``): the Gauss-Newton step when it
    fits, else ``p(alpha) = -V diag(s / (s² + alpha)) uf`` with ``‖p(alpha)‖ = radius`` solved by
    safeguarded Newton iterations started from the previous ``alpha`` (Moré 1978, §5)."""
    n = len(s)
    suf = s * uf
    full_rank = m >= n and s[-1] > _EPS * m * s[0]
    if full_rank:
        p = -v @ (uf / s)
        if np.linalg.norm(p) <= radius:
            return p, 0.0

    def excess(a: float) -> tuple[float, float]:
        """‖p(a)‖ - radius and its derivative in ``a``."""
        denom = s ** 2 + a
        norm = float(np.linalg.norm(suf / denom))
        return norm - radius, -float(np.sum(suf ** 2 / denom ** 3)) / norm

    high = float(np.linalg.norm(suf)) / radius
    low = 0.0
    if full_rank:
        value, slope = excess(0.0)
        low = -value / slope
    if not full_rank and alpha == 0:
        alpha = max(0.001 * high, math.sqrt(low * high))
    for _ in range(_NEWTON_ITERATIONS):
        if not low <= alpha <= high:
            alpha = max(0.001 * high, math.sqrt(low * high))
        value, slope = excess(alpha)
        if value < 0:
            high = alpha
        ratio = value / slope
        low = max(low, alpha - ratio)
        alpha -= (value + radius) * ratio / radius
        if abs(value) < _RADIUS_RTOL * radius:
            break
    p = -v @ (suf / (s ** 2 + alpha))
    return p * (radius / np.linalg.norm(p)), alpha  # exactly on the boundary


def _choose_step(x: np.ndarray, jac_h: np.ndarray, diag_h: np.ndarray, g_h: np.ndarray,
                 p_h: np.ndarray, d: np.ndarray, radius: float, lower: np.ndarray, upper: np.ndarray,
                 theta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The step to try (in x and in the scaled variables) and the reduction the model predicts.

    The trust-region step ``p_h`` if it stays inside the box; otherwise the best by the model of
    (Branch, Coleman & Li 1999, §3): that step cut where it meets a bound and drawn back by
    ``theta``; the reflected step, which continues from that bound with the hit components'
    direction reversed, as far as the model likes within the box and the radius; and the scaled
    steepest-descent step, as far as the model likes within both."""
    p = d * p_h
    if _inside(x + p, lower, upper):
        return p, p_h, -_model(jac_h, g_h, p_h, diag_h)
    to_bound, hits = _step_to_bound(x, p, lower, upper)
    r_h = p_h.copy()
    r_h[hits != 0] *= -1
    r = d * r_h
    p, p_h = p * to_bound, p_h * to_bound
    to_region = _to_sphere(p_h, r_h, radius)
    to_box = _step_to_bound(x + p, r, lower, upper)[0]
    longest = min(to_box, to_region)
    if longest > 0:
        shortest = (1 - theta) * to_bound / longest  # keeps the reflected point off the bound
        longest = theta * to_box if longest == to_box else to_region
    else:
        shortest, longest = 0.0, -1.0
    r_value = math.inf
    if shortest <= longest:
        a, b, c = _along(jac_h, g_h, r_h, diag_h, p_h)
        t, r_value = _minimum_1d(a, b, c, shortest, longest)
        r_h = p_h + t * r_h
        r = d * r_h
    p, p_h = p * theta, p_h * theta
    p_value = _model(jac_h, g_h, p_h, diag_h)
    ag_h = -g_h
    to_region = radius / np.linalg.norm(ag_h)
    to_box = _step_to_bound(x, d * ag_h, lower, upper)[0]
    a, b, _ = _along(jac_h, g_h, ag_h, diag_h)
    t, ag_value = _minimum_1d(a, b, 0.0, 0.0, theta * to_box if to_box < to_region else to_region)
    ag_h = t * ag_h
    if p_value < r_value and p_value < ag_value:
        return p, p_h, -p_value
    if r_value < p_value and r_value < ag_value:
        return r, r_h, -r_value
    return d * ag_h, ag_h, -ag_value


def _inside(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> bool:
    return bool(np.all((x >= lower) & (x <= upper)))


def _step_to_bound(x: np.ndarray, s: np.ndarray, lower: np.ndarray,
                   upper: np.ndarray) -> tuple[float, np.ndarray]:
    """The multiple of ``s`` at which ``x + t s`` first meets a bound (inf if never), and which
    components meet one there (-1 a lower bound, +1 an upper, 0 none)."""
    moving = s != 0
    steps = np.full_like(x, np.inf)
    with np.errstate(over="ignore"):
        steps[moving] = np.maximum((lower - x)[moving] / s[moving], (upper - x)[moving] / s[moving])
    first = float(np.min(steps))
    return first, np.where(steps == first, np.sign(s), 0.0).astype(int)


def _to_sphere(x: np.ndarray, s: np.ndarray, radius: float) -> float:
    """The positive ``t`` with ``‖x + t s‖ = radius``, for ``x`` inside the sphere (the roots of
    the quadratic computed without cancellation)."""
    a, b, c = float(s @ s), float(x @ s), float(x @ x) - radius ** 2
    q = -(b + math.copysign(math.sqrt(max(b * b - a * c, 0.0)), b))
    return max(q / a, c / q) if q != 0 else math.sqrt(-c / a)


def _model(jac: np.ndarray, g: np.ndarray, s: np.ndarray, diag: np.ndarray) -> float:
    """The quadratic model's change along step ``s``: ``½ s'(J'J + diag)s + g's``."""
    js = jac @ s
    return 0.5 * float(js @ js + s @ (diag * s)) + float(g @ s)


def _along(jac: np.ndarray, g: np.ndarray, s: np.ndarray, diag: np.ndarray,
           s0: np.ndarray | None = None) -> tuple[float, float, float]:
    """``a, b, c`` of the model on the line ``s0 + t s``: ``a t² + b t + c``."""
    js = jac @ s
    a = 0.5 * float(js @ js + s @ (diag * s))
    b = float(g @ s)
    if s0 is None:
        return a, b, 0.0
    js0 = jac @ s0
    return a, b + float(js0 @ js + s0 @ (diag * s)), _model(jac, g, s0, diag)


def _minimum_1d(a: float, b: float, c: float, low: float, high: float) -> tuple[float, float]:
    """Where ``a t² + b t + c`` is least on ``[low, high]``, and its value there."""
    ts = [low, high]
    if a != 0 and low < -0.5 * b / a < high:
        ts.append(-0.5 * b / a)
    values = [t * (a * t + b) + c for t in ts]
    k = int(np.argmin(values))
    return ts[k], values[k]


def _new_radius(radius: float, reduction: float, predicted: float,
                step_norm: float) -> tuple[float, float]:
    """The next radius and the ratio of the actual to the predicted reduction: a quarter of the step
    after a poor prediction (ratio < 1/4), twice the radius after a good one that reached it."""
    if predicted > 0:
        ratio = reduction / predicted
    else:
        ratio = 1.0 if predicted == reduction == 0 else 0.0
    if ratio < 0.25:
        return 0.25 * step_norm, ratio
    if ratio > 0.75 and step_norm > 0.95 * radius:
        return 2.0 * radius, ratio
    return radius, ratio


def _converged(reduction: float, cost: float, step_norm: float, x_norm: float, ratio: float,
               ftol: float, xtol: float) -> str | None:
    """MINPACK's tests: the cost barely changed on a step the model predicted, or the step is tiny."""
    by_cost = reduction < ftol * cost and ratio > 0.25
    by_step = step_norm < xtol * (xtol + x_norm)
    if by_cost and by_step:
        return "ftol+xtol"
    return "ftol" if by_cost else "xtol" if by_step else None
