"""Online passes: per-row or micro-batch SGD over one group's blocks in compiled code.

A round of ``solver="online"`` (:mod:`dask_dgd._engine.modes.online`) runs, on each
group, whole passes over its rows in the Numba kernels of :mod:`._online_kernels`:
every row is scored at the current parameters (the *progressive* loss, Vowpal Wabbit's
"average loss"), then the parameters move by that row's gradient (``micro=1``) or by
the mean gradient of a micro-batch.  Each row costs O(nnz x K), never O(n_params):

- the L2 decay: with "sgd", a running scale ``s`` of the penalised entries
  (``w = s * v``), folded into ``v`` when it falls below 1e-9; with the adaptive rules,
  lazily at each entry's own adaptive rate (an entry catches up the steps it missed
  when a row reads it, and at the round's end);
- the update rule touches only the row's entries: ``"sgd"`` (a constant learning rate,
  :class:`~dask_dgd.optim.InverseScaling`'s ``eta0 / (t + 1)**power_t`` or
  :class:`~dask_dgd.optim.InverseTime`'s ``eta0 / (1 + t / t0)``),
  ``"adagrad"`` (exactly :class:`~dask_dgd.optim.Adagrad`'s per-entry step) and
  ``"normalized"`` (the normalized adaptive rule, Ross, Mineiro and Langford 2013,
  Vowpal Wabbit's default: per-feature scales ``xmax``, AdaGrad accumulators, and the
  global ``sqrt(W / N)`` factor, ``W`` the weight seen and ``N`` the summed squared
  scaled row norms);
- the round remembers which entries moved, so the group's change from the round's
  start, ``w - sigma * w0`` (``sigma`` the product of the decays), has entries only
  there and is sent sparse.

The per-entry decay makes the adaptive rules' fixed point the penalised optimum
(``E[g_e] + lam * w_e = 0``) in per-row passes of one group; a decay at the base rate
(as the running scale) would not be, wherever an entry's rate differs from the base
rate.  Two cases stop short of it (measured, not yet corrected): micro-batch rounds
(``batch_size``), where an entry not drawn in a round does not decay in that round (a
feature in 1% of the rows: 0.64-0.70 against the optimum's 0.368), and several groups'
entry-by-entry average, where an entry only some groups touched is averaged over those
groups alone, without the others' decay (0.844 against 0.724).
The losses are those with a ``fused_code`` (squared error, logistic, Poisson,
multinomial); their row formulas are shared with the fused kernel
(:mod:`._rowloss`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..exceptions import ParameterError

__all__ = ["OnlinePass", "OnlineRule", "RoundChange", "supports"]

_RULES = ("sgd", "adagrad", "normalized")
_kernels: dict[str, Any] = {}


def _compile() -> Any:
    """The compiled kernels' module (imports Numba and compiles on first call)."""
    if "mod" not in _kernels:
        from . import _online_kernels

        _kernels["mod"] = _online_kernels
    return _kernels["mod"]


def supports(loss: Any) -> str | None:
    """Why the online passes cannot train ``loss`` (None: they can)."""
    if getattr(loss, "fused_code", None) is None:
        return f"the {type(loss).__name__} loss has no compiled row formula (only squared error, logistic, " \
               "Poisson and multinomial do)"
    return None


@dataclass(frozen=True)
class OnlineRule:
    """A per-row update rule of the online passes.

    ``name``: "sgd", "adagrad" or "normalized"; ``eta0``, ``power_t`` and ``t0``: the
    learning rate of update ``t`` (counted per group from 0) is
    ``eta0 / (1 + t / t0)**power_t``;
    ``initial_accumulator`` and ``eps``: Adagrad's.  The groups' models are averaged by
    sample weight for "sgd" (as local SGD) and by the round's summed squared gradients
    entry by entry for the adaptive rules (Vowpal Wabbit's AllReduce average)."""

    name: str
    eta0: float
    power_t: float = 0.0
    initial_accumulator: float = 0.0
    eps: float = 0.0
    t0: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in _RULES:
            raise ParameterError(f"the online rule must be one of {_RULES}; got {self.name!r}")
        if not (math.isfinite(self.eta0) and self.eta0 > 0):
            raise ParameterError(f"the online learning rate must be a finite number > 0; got {self.eta0!r}")
        if not (math.isfinite(self.t0) and self.t0 > 0):
            raise ParameterError(f"the online learning rate's offset must be a finite number > 0; got {self.t0!r}")

    @property
    def code(self) -> int:
        return _RULES.index(self.name)

    def rate(self, t: float) -> float:
        """The base learning rate of update ``t`` (as the kernels' ``_rate``)."""
        return self.eta0 if self.power_t == 0.0 else self.eta0 / (1.0 + t / self.t0) ** self.power_t

    @property
    def adaptive(self) -> bool:
        return self.name != "sgd"

    @property
    def average(self) -> str:
        """How the groups' models are averaged: "samples" or "coordinate"."""
        return "coordinate" if self.adaptive else "samples"


@dataclass(frozen=True)
class RoundChange:
    """A group's round, as it is averaged: the entries ``idx`` (ascending) that moved,
    the change ``delta = w - sigma * w0`` there (intercepts: ``w - w0``), the
    coordinate weights ``cw`` there (adaptive rules), ``sigma`` (the product of the
    round's decays), and the progressive loss and weight sums, with those of the first
    micro-batch."""

    idx: np.ndarray
    delta: np.ndarray
    cw: np.ndarray
    sigma: float
    loss_sum: float
    weight_sum: float
    first_loss: float
    first_weight: float
    updates: int


class OnlinePass:
    """One group's round: the model during the passes, and what it ends with.

    ``objective`` is the :class:`~dask_dgd.losses.LinearObjective` (its parameter layout
    and loss), ``l2`` the L2 strength (``Penalty.l2_strength``; the intercepts are not
    penalised), ``params`` the round's start ``w0``; ``state`` the group's rule state
    from its previous round (:attr:`state`; None: fresh), ``buffers`` a dict the pass
    keeps its O(n_params) work arrays in between rounds; ``micro`` rows per update (1:
    per row, importance-weighted steps ``w_i g_i x_i``; 0: one update at each
    ``apply_last``; otherwise mean gradients of ``micro`` rows); ``limit``: a
    progressive mean loss above it stops the pass (status 2); ``weight_scale``: the
    sample weights are multiplied by it (the data's rows over its total weight: weights
    of mean 1, so that the per-row steps' L2 decay, ``eta * lam`` a row whatever its
    weight, is the weighted mean loss's penalty; means and averages do not change).
    The weight sums of :meth:`finish` are in the data's own units."""

    def __init__(self, objective: Any, l2: float, rule: OnlineRule, params: np.ndarray, *,
                 state: dict[str, Any] | None = None, buffers: dict[str, Any] | None = None, micro: int = 1,
                 limit: float = math.inf, weight_scale: float = 1.0) -> None:
        reason = supports(objective.loss)
        if reason is not None:
            raise ParameterError(reason)
        self.mod = mod = _compile()
        self.d, self.K = int(objective.n_features), int(objective.n_outputs)
        self.fit_intercept = bool(objective.fit_intercept)
        self.n = n = int(objective.n_params)
        self.n_pen = self.d * self.K
        self.rule = rule
        self.w0 = np.asarray(params, dtype=np.float64)
        if self.w0.shape != (n,):
            raise ParameterError(f"params must have shape ({n},); got {self.w0.shape}")
        buf = {} if buffers is None else buffers
        m = mod.COLUMNS[rule.code]
        if buf.get("n") != n:
            buf.clear()
            buf.update(n=n, rmark=np.zeros(n, np.uint8), rtouched=np.zeros(n + 1, np.int64))
        if buf.get("E") is None or buf["E"].shape != (n, m):
            buf["E"] = np.empty((n, m))
        if micro != 1 and "gbuf" not in buf:
            buf.update(gbuf=np.zeros(n), mark=np.zeros(n, np.uint8), touched=np.zeros(n + 1, np.int64))
        self.buf = buf
        tiny = np.zeros(1)
        if state is None:
            state = self.fresh_state(objective, rule)
        # the rule's working arrays side by side (an entry's update reads one cache line);
        # the state it started from is left as it was (a retried round starts from it again)
        self.E = buf["E"]
        acc = np.ascontiguousarray(state["acc"], dtype=np.float64) if rule.adaptive else tiny
        xmax = np.ascontiguousarray(state["xmax"], dtype=np.float64) if rule.name == "normalized" else tiny
        mod.load_entries(self.E, np.ascontiguousarray(self.w0), acc, xmax, self.K, self.n_pen, rule.code,
                         float(state["t"]))
        self.gbuf = buf["gbuf"] if micro != 1 else tiny
        self.mark = buf["mark"] if micro != 1 else np.zeros(1, np.uint8)
        self.touched = buf["touched"] if micro != 1 else np.zeros(1, np.int64)
        st = mod.empty_state()
        st[mod.S_T], st[mod.S_N], st[mod.S_WSUM] = state["t"], state["N"], state["W"]
        self.st = st
        hp = np.zeros(mod.N_HYPER)
        hp[mod.H_ETA0], hp[mod.H_POWER_T], hp[mod.H_LAM] = rule.eta0, rule.power_t, float(l2)
        hp[mod.H_LIMIT], hp[mod.H_EPS], hp[mod.H_T0] = limit, rule.eps, rule.t0
        hp[mod.H_WSCALE] = weight_scale
        self.weight_scale = float(weight_scale)
        self.hp = hp
        ip = np.zeros(mod.N_INTS, np.int64)
        ip[mod.I_CODE], ip[mod.I_K], ip[mod.I_RULE] = objective.loss.fused_code, self.K, rule.code
        ip[mod.I_INTERCEPT], ip[mod.I_MICRO], ip[mod.I_OFFSET] = self.fit_intercept, int(micro), bool(objective.offset)
        self.ip = ip
        self.raw, self.g = np.zeros(self.K), np.zeros(self.K)
        self.t_start = int(state["t"])

    @staticmethod
    def fresh_state(objective: Any, rule: OnlineRule) -> dict[str, Any]:
        """A group's rule state before its first round."""
        n = int(objective.n_params)
        return {
            "acc": np.full(n, float(rule.initial_accumulator)) if rule.adaptive else None,
            "xmax": np.zeros(int(objective.n_features)) if rule.name == "normalized" else None,
            "t": 0.0, "N": 0.0, "W": 0.0,
        }

    @property
    def state(self) -> dict[str, Any]:
        """The rule state to continue from in the next round (new arrays)."""
        mod, st = self.mod, self.st
        return {"acc": self.E[:, mod.C_ACC].copy() if self.rule.adaptive else None,
                "xmax": self.E[: self.n_pen: self.K, mod.C_XMAX].copy() if self.rule.name == "normalized" else None,
                "t": float(st[mod.S_T]), "N": float(st[mod.S_N]), "W": float(st[mod.S_WSUM])}

    def block(self, X: Any, y: np.ndarray, sample_weight: np.ndarray | None, rows: np.ndarray,
              apply_last: bool = True) -> int:
        """Pass over ``rows`` (int64, in that order) of one block; returns the status (0
        ok, 1 a non-finite loss, 2 the progressive mean above the limit)."""
        mod = self.mod
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        y64 = np.ascontiguousarray(y, dtype=np.float64)
        has_w = sample_weight is not None
        sw = np.ascontiguousarray(sample_weight, dtype=np.float64) if has_w else np.zeros(0)
        b = self.buf
        tail = (self.E, self.gbuf, self.mark, self.touched, b["rmark"], b["rtouched"],
                self.raw, self.g, self.st, self.hp, self.ip, bool(apply_last))
        if sp.issparse(X):
            if X.format != "csr":
                raise ParameterError(f"the online passes read CSR blocks; got a {X.format} matrix")
            dummy = np.zeros((1, 1), X.data.dtype)
            return int(mod.pass_rows(True, X.indptr, X.indices, X.data, dummy, X.indices[:0], rows, y64, sw, has_w,
                                     self.d, *tail))
        if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype not in (np.float32, np.float64):
            raise ParameterError(f"the online passes read float NumPy or SciPy CSR blocks; got {type(X).__name__}")
        X = np.ascontiguousarray(X)
        cols = self._columns(X.shape[1])
        return int(mod.pass_rows(False, cols[:1], cols, X[0, :0], X, cols, rows, y64, sw, has_w, self.d, *tail))

    def _columns(self, n: int) -> np.ndarray:
        cols = self.buf.get("cols")
        if cols is None or cols.size != n:
            cols = self.buf["cols"] = np.arange(n, dtype=np.int64)
        return cols

    @property
    def scale(self) -> float:
        """``sigma``: what the round's decays made of an untouched entry (1 without L2)."""
        return float(self.st[self.mod.S_SCALE] * self.st[self.mod.S_FOLD])

    def _catch_up(self) -> None:
        """The adaptive rules' lazy decay of the touched entries, up to the last step."""
        mod, st = self.mod, self.st
        mod.catch_up_touched(self.E, self.buf["rtouched"], int(st[mod.S_NRT]), self.n_pen, self.K, st, self.hp,
                             self.rule.code)

    def params(self) -> np.ndarray:
        """The group's parameters now (dense, O(n_params))."""
        self._catch_up()
        w = self.E[:, self.mod.C_V].copy()
        w[: self.n_pen] *= self.st[self.mod.S_SCALE]
        return w

    def finish(self) -> RoundChange:
        """The round's change (O(touched)); clears the round's bookkeeping for the next."""
        mod, st, b = self.mod, self.st, self.buf
        self._catch_up()
        nrt = int(st[mod.S_NRT])
        idx = np.sort(b["rtouched"][:nrt])
        pen = idx < self.n_pen
        w = self.E[idx, mod.C_V]
        w[pen] *= st[mod.S_SCALE]
        sigma = self.scale
        delta = w - np.where(pen, sigma, 1.0) * self.w0[idx]
        cw = self.E[idx, mod.C_CW] if self.rule.adaptive else np.zeros(0)
        b["rmark"][idx] = 0
        nt = int(st[mod.S_NT])  # a micro-batch left open by a stopped pass: its buffers clean for the next
        if nt:
            open_ = self.touched[:nt]
            self.gbuf[open_] = 0.0
            self.mark[open_] = 0
            st[mod.S_NT] = 0
        ws = self.weight_scale
        return RoundChange(idx, delta, cw, sigma, float(st[mod.S_LOSS]) / ws, float(st[mod.S_WEIGHT]) / ws,
                           float(st[mod.S_FIRST_LOSS]) / ws, float(st[mod.S_FIRST_WEIGHT]) / ws,
                           int(st[mod.S_T]) - self.t_start)


def average_changes(params: np.ndarray, n_pen: int, average: str, idx: np.ndarray, values: np.ndarray,
                    weight: float, scale_sum: float) -> np.ndarray:
    """The groups' averaged model from the round's start ``params`` and the entries
    ``idx`` (ascending), ``values`` of their summed changes (see :class:`RoundChange`);
    the first ``n_pen`` entries are penalised, the others (intercepts) are not.

    ``"samples"``: the sum is ``sum n_g delta_g`` (entries of ``n``) and the average
    ``S w0 + sum / N`` on the penalised entries (``w0 + sum / N`` elsewhere),
    ``S = sum n_g sigma_g / N``, ``N = weight``: exactly ``sum n_g w_g / N``.
    ``"coordinate"``: the sum is ``[sum cw_g delta_g, sum cw_g]`` (entries of ``2n``),
    the average ``S w0 + num / den`` where ``den > 0``.  O(n) for the copy of
    ``params``, O(entries) for the rest."""
    n = params.size
    S = scale_sum / weight
    avg = params.copy()
    if S != 1.0:
        avg[:n_pen] *= S
    if average == "samples":
        avg[idx] += values / weight
        return avg
    top = idx < n
    t_idx, t_val = idx[top], values[top]
    d_idx, d_val = idx[~top] - n, values[~top]
    pos = np.minimum(np.searchsorted(t_idx, d_idx), max(t_idx.size - 1, 0))
    num = np.where(t_idx[pos] == d_idx, t_val[pos], 0.0) if t_idx.size else np.zeros(d_idx.size)
    moved = d_val > 0
    avg[d_idx[moved]] += num[moved] / d_val[moved]
    return avg
