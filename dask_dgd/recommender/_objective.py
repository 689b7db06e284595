"""The training objective of matrix factorization: its model and the shards' sums.

The engine trains the item table ``V`` (the shared parameters, flattened) like any
other parameters; the user factors are the groups' *local parameters*: each shard's
users live with it (model parallelism), updated where they are by the same update rule,
and never travel (only at the end of a fit, and in checkpoints).  A step sends ``V`` (and,
for confidence-weighted least squares, its Gram matrix) to every shard; each shard
computes its loss and gradient sums with the kernels of
:mod:`dask_dgd.losses._factorization` and sends back the gradient rows of the items its
ratings touched (row-sparse, or dense when that is smaller), which the engine adds in
the fixed block tree.

A user's ratings are all in one shard, in a fixed order, so user gradients do not
depend on the sharding at all and item gradients only through the order in which the
shards' sums are added (floating-point tolerance).  Mini-batches are drawn by hashing
each rating's key with the seed and the epoch
(:func:`~dask_dgd.losses._factorization.batch_buckets`), so they are the same ratings
however the data is sharded.
"""

import dataclasses
import math
from dataclasses import dataclass

import array_api_compat
import numpy as np

from .._backend import get_namespace, to_numpy
from .._engine.runtime.group_steps import BlockSums, Draw, SolvedLocal
from .._engine.runtime.reduce import RowSparse
from .._engine.solvers.als import CG_STEPS
from ..losses import _als
from ..losses import _factorization as kernels
from ._shards import init_rows

__all__ = ["AlsPhase", "FactorModel", "FactorizationTraining", "HashBatches", "grow_state", "in_model_units"]


@dataclass(frozen=True)
class FactorModel:
    """What a shard needs to know about the model (pure settings, picklable).

    ``kind`` is ``"explicit"``, ``"bpr"`` or ``"wls"``; ``mu`` the global mean rating
    (explicit); ``n_items`` the size of the item table.

    ``unit``: the unit of the parameters the engine trains (:meth:`column_units`).
    Explicit ratings trained by gradient steps take the ratings' standard deviation:
    the engine's parameters are then the factors divided by ``sqrt(unit)`` and the
    biases divided by ``unit``, numbers of the same size whatever the ratings' units,
    so that an adaptive optimizer's steps (Adam, RMSprop: a step of about the learning
    rate in each parameter) reach the same fit in any units (Adagrad's start, its
    accumulator's initial value, and plain SGD's steps still scale with the gradient).  The objective
    and its gradient are the model's own, by the chain rule; only the parameters'
    coordinates change.  1 (alternating least squares, implicit feedback): the
    parameters themselves.
    """

    kind: str
    n_components: int
    alpha: float
    alpha_bias: float
    confidence_scale: float
    init_scale: float
    mu: float
    n_items: int
    seed: int
    unit: float = 1.0

    @property
    def user_bias(self):
        return self.kind == "explicit"

    @property
    def item_bias(self):
        return self.kind in ("explicit", "bpr")

    @property
    def user_width(self):
        return self.n_components + self.user_bias

    @property
    def item_width(self):
        return self.n_components + self.item_bias

    def column_units(self, side):
        """What the engine's parameters of one side (``"item"`` or ``"user"``) are
        multiplied by, column by column, to give the model's: ``sqrt(unit)`` for the
        factors, ``unit`` for the bias; None when ``unit`` is 1."""
        if self.unit == 1.0:
            return None
        width, bias = (self.item_width, self.item_bias) if side == "item" else (self.user_width, self.user_bias)
        d = np.full(width, math.sqrt(self.unit))
        if bias:
            d[-1] = self.unit
        return d

    def to_engine(self, table, side):
        """A table of the model's parameters (rows x columns) in the engine's units."""
        d = self.column_units(side)
        return table if d is None else table / d

    def from_engine(self, table, side):
        """A table of the engine's parameters in the model's units."""
        d = self.column_units(side)
        return table if d is None else table * d


def in_model_units(model, result):
    """A :class:`~dask_dgd._engine.train.FitResult` of ``model`` whose item table
    (``params``) is in the model's units (the users', ``local``, come so from
    :meth:`FactorizationTraining.local_export`); its optimizer state stays the engine's."""
    if model.unit == 1.0:
        return result
    table = model.from_engine(np.asarray(result.params, dtype=np.float64).reshape(model.n_items, model.item_width),
                              "item")
    return dataclasses.replace(result, params=table.ravel())



@dataclass(frozen=True)
class NoPenalty:
    """The shared parameters' penalty of a model whose penalty is in its loss."""

    has_l1 = False
    decay_mask = None

    @staticmethod
    def prox(params, step):
        return params


@dataclass(frozen=True)
class HashBatches:
    """Batches of matrix factorization: ``n_batches`` per epoch, each the ratings whose
    hashed key falls in it (the same ratings however the data is sharded)."""

    n_batches: int
    seed: int

    @property
    def steps_per_epoch(self):
        return self.n_batches

    @property
    def full_batch(self):
        return self.n_batches == 1

    def draw(self, step):
        j = int(step) - 1
        return Draw((self.seed,), int(step), None, j // self.n_batches, j % self.n_batches, self.n_batches)

    def group_draw(self, shard, g, clock):
        """Asynchronous training: the group's batch at its ``clock``-th step."""
        clock = int(clock)
        return Draw((self.seed,), clock, None, clock // self.n_batches, clock % self.n_batches, self.n_batches)

    @staticmethod
    def draw_rows(shard, draw, partial):
        return int(partial.weight_sum)


@dataclass(frozen=True)
class AlsPhase:
    """What a step of alternating least squares asks of the shards (see
    :mod:`dask_dgd._engine.solvers.als`): ``"solve"``: solve the users (``user_cg_steps``
    conjugate-gradient steps each) at the item table sent (``gram``: its Gram matrix,
    wls), then the usual sums at them;
    ``"matvec"``: the table sent is a conjugate-gradient direction ``D``, return the
    observed part of ``A_i d_i`` for every item."""

    phase: str
    gram: object = None
    user_cg_steps: int = 3

    @property
    def nbytes(self):
        return 0 if self.gram is None else int(self.gram.nbytes)


def _map_state(state, fn):
    """An optimizer state (a NamedTuple) with ``fn`` applied to its array fields."""
    if state is None:
        return None
    return type(state)(**{
        name: fn(value) if array_api_compat.is_array_api_obj(value) else value
        for name, value in state._asdict().items()
    })


def _rows(shard, memory, seed, draw):
    """The rows of this step's ratings, increasing (so their users are sorted)."""
    if draw is None or draw.n_batches == 1:
        if "all" not in memory:
            xp = get_namespace(shard.r)
            memory["all"] = xp.arange(shard.n_rows, dtype=xp.int64, device=array_api_compat.device(shard.r))
        return memory["all"]
    if memory.get("epoch") != draw.epoch:
        b = kernels.batch_buckets(shard.key, seed, draw.epoch, draw.n_batches)
        xp = get_namespace(b)
        order = xp.argsort(b, stable=True)
        edges = xp.arange(draw.n_batches + 1, dtype=b.dtype, device=array_api_compat.device(b))
        memory["order"] = order
        memory["bounds"] = to_numpy(xp.searchsorted(xp.take(b, order), edges))
        memory["epoch"] = draw.epoch
    lo, hi = int(memory["bounds"][draw.batch]), int(memory["bounds"][draw.batch + 1])
    return memory["order"][lo:hi]


def _validation_sums(shard, U, V, mu):
    """The step extras of a shard's held-out ratings at the factors ``U``, ``V``
    (explicit ratings): their squared error ``val_sq`` and count ``val_n``; with a
    baseline (:func:`~._shards.with_val_base`), the sum ``val_d`` and the sum of squares
    ``val_d2`` of the rating-by-rating differences ``d = e**2 - e_base**2`` of the
    squared errors (the paired comparison of :mod:`._auto`)."""
    lu, gi, r = shard.val
    xp = get_namespace(U)
    k = V.shape[1] - 1
    P = xp.take(U, xp.astype(lu, xp.int64), axis=0)
    Q = xp.take(V, xp.astype(gi, xp.int64), axis=0)
    e = mu + P[:, k] + Q[:, k] + xp.sum(P[:, :k] * Q[:, :k], axis=1) - r
    out = {"val_sq": float(xp.vecdot(e, e)), "val_n": float(r.shape[0])}
    if shard.val_base is not None:
        eb = shard.val_base - r
        d = e * e - eb * eb
        out["val_d"], out["val_d2"] = float(xp.sum(d)), float(xp.vecdot(d, d))
    return out


def _touched_rows(xp, memory, on_host):
    """The item-gradient rows this step touched, as NumPy (``idx`` None: the dense
    table, when that is smaller), and the item gradient and flags reset to zero."""
    gV, touched = memory["gV"], memory["touched"]
    width = gV.shape[1]
    dense_bytes = gV.shape[0] * width * 8
    if on_host:  # reset only the touched rows: the table may be much larger
        idx = np.flatnonzero(touched)
        if idx.size * (4 + 8 * width) < dense_bytes:
            idx = idx.astype(np.int32)
            out = gV[idx]
            gV[idx] = 0.0
            touched[idx] = False
            return idx, out
        out = gV.copy()
        gV[:] = 0.0
        touched[:] = False
        return None, out
    idx = xp.nonzero(touched)[0]
    if idx.shape[0] * (4 + 8 * width) < dense_bytes:
        idx, out = to_numpy(idx).astype(np.int32), to_numpy(xp.take(gV, idx, axis=0))
    else:
        idx, out = None, to_numpy(gV)
    # fresh zeros (a device memset) rather than a scatter; ``out`` may share gV's memory
    memory["gV"], memory["touched"] = xp.zeros_like(gV), xp.zeros_like(touched)
    return idx, out


@dataclass(frozen=True)
class FactorizationTraining:
    """Matrix factorization as a training objective of the engine (see
    :mod:`dask_dgd._engine.objective` for the protocol): the item table is the shared
    parameters, each shard's user factors its group's local parameters."""

    model: FactorModel
    n_batches: int = 1

    has_local = True
    tol_on_objective = True
    hint = "raise alpha"
    penalty = NoPenalty()

    @property
    def n_params(self):
        return self.model.n_items * self.model.item_width

    def _table(self, params):
        return np.asarray(params, dtype=np.float64).reshape(self.model.n_items, self.model.item_width)

    def _model_table(self, params):
        """The item table of the engine's ``params``, in the model's units."""
        return self.model.from_engine(self._table(params), "item")

    # ------------------------------------------------------------- worker side
    def local_init(self, shard, init):
        """The shard's users' factors (seeded, or ``init = (U, state)`` of a continued
        fit) on the shard's device; their optimizer state (None: created at the first
        update)."""
        m = self.model
        if init is None:
            U, state = init_rows(m.seed, shard.users, m.user_width, m.init_scale, m.user_bias), None
        else:
            U, state = init
        U = m.to_engine(np.asarray(U, dtype=np.float64), "user")
        U = shard.to_shard(np.ascontiguousarray(U, dtype=np.float64))
        return U, _map_state(state, shard.to_shard)

    @staticmethod
    def local_size(params):
        return int(params.shape[0])

    @staticmethod
    def local_place(shard, snapshot):
        """A snapshot read from a checkpoint, moved to the shard's device."""
        params, state, grad = snapshot
        move = shard.to_shard
        return move(params), _map_state(state, move), None if grad is None else move(grad)

    def local_export(self, shard, params, state):
        """The shard's users, their factors (in the model's units) and optimizer state
        (the engine's), and its (user, item) pairs (all NumPy)."""
        U = self.model.from_engine(to_numpy(params), "user")
        return (shard.users, U, _map_state(state, to_numpy), to_numpy(shard.uptr), to_numpy(shard.gi))

    def group_sums(self, shard, params, aux, draw, local, memory=None):
        """One shard's sums at the item table ``params`` and its users' factors ``local``:
        loss, the touched item-gradient rows, the users' gradient (unscaled)."""
        memory = {} if memory is None else memory
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is the engine's to handle
            if isinstance(aux, AlsPhase):
                return self._als_sums(shard, params, aux, local, memory)
            return self._group_sums(shard, params, aux, draw, local, memory)

    def _als_sums(self, shard, params, aux, U, memory):
        """A step of alternating least squares on this shard (see :class:`AlsPhase`)."""
        m = self.model
        explicit = m.kind == "explicit"
        table = self._table(params)
        if aux.phase == "solve":
            U = _als.solve_users(shard.uptr, shard.gi, shard.r, table, aux.gram, m.mu, m.alpha, m.alpha_bias,
                                 m.confidence_scale, explicit, U, aux.user_cg_steps)
            sums, _ = self._group_sums(shard, params, aux.gram, None, U, memory)
            return sums, SolvedLocal(U)
        if "gV" not in memory or memory["gV"].shape != (m.n_items, m.item_width):
            memory["gV"] = np.zeros((m.n_items, m.item_width))
            memory["touched"] = np.zeros(m.n_items, dtype=bool)
        by_item = None
        if _als.kernel_threads() > 1:  # (the items split over threads: the ratings by item, once per shard)
            cached = memory.get("by_item")
            if cached is None or cached[0] is not shard.gi or cached[2].shape != (m.n_items + 1,):
                cached = memory["by_item"] = (shard.gi, *_als.item_order(shard.gi, m.n_items))
            by_item = cached[1:]
        _als.item_matvec(shard.lu, shard.gi, shard.r, U, table, m.alpha, m.alpha_bias, m.confidence_scale, explicit,
                         memory["gV"], memory["touched"], by_item)
        idx, out = _touched_rows(np, memory, True)
        grad = out.ravel() if idx is None else RowSparse(idx, out, m.n_items)
        return {shard.index: BlockSums(0.0, grad, float(shard.n_rows), {"matvec": 1.0})}, None

    def _group_sums(self, shard, params, aux, draw, U, memory):
        m = self.model
        V = shard.to_shard(self._model_table(params))
        gram_items = shard.to_shard(aux)
        xp = get_namespace(U)
        du = m.column_units("user")
        if du is not None:  # the users' factors in the model's units (the engine's times du)
            du = shard.to_shard(du)
            U = U * du
        if "gV" not in memory or memory["gV"].shape != (m.n_items, m.item_width):  # (another model's buffers)
            device = array_api_compat.device(U)
            memory["gV"] = xp.zeros((m.n_items, m.item_width), dtype=xp.float64, device=device)
            memory["touched"] = xp.zeros(m.n_items, dtype=xp.bool, device=device)
        gU, gV, touched = xp.zeros_like(U), memory["gV"], memory["touched"]
        rows = _rows(shard, memory, m.seed, draw)
        step = 0 if draw is None else draw.step
        if m.kind == "explicit":
            # the biases' penalty is once per user and item, not per rating: the users'
            # here (each user's ratings are all in this shard), the items' in finish
            loss, sq = kernels.explicit_sums(shard.lu, shard.gi, shard.r, rows, U, V, m.mu, m.alpha, 0.0,
                                             gU, gV, touched)
            loss += self._bias_penalty(xp, U, gU)
        elif m.kind == "bpr":
            loss, sq = kernels.bpr_sums(shard.lu, shard.gi, shard.key, shard.uptr, rows, U, V, m.alpha,
                                        m.alpha_bias, m.seed, step, gU, gV, touched)
        else:
            loss, sq = kernels.wls_sums(shard.lu, shard.gi, shard.r, rows, U, V, m.alpha, m.confidence_scale,
                                        gU, gV, touched)
        extras = {"sq_sum": float(sq)}
        if shard.val is not None and m.kind == "explicit" and (draw is None or draw.batch == draw.n_batches - 1):
            extras.update(_validation_sums(shard, U, V, m.mu))
        if m.kind == "wls":
            extras["gram"] = to_numpy(U.T @ U)  # at this step's factors, before their update
            _, g_all = kernels.wls_all_pairs(U, gram_items, 1.0 / self.n_batches)
            gU += g_all
        idx, out = _touched_rows(xp, memory, shard.like is None)
        # the gradients with respect to the engine's parameters (chain rule: times the units)
        if du is not None:
            gU = gU * du
        di = m.column_units("item")
        if di is not None:
            out = out * di
        flat = xp.reshape(gU, (-1,))
        extras["local_sq"] = float(xp.vecdot(flat, flat)) if math.isfinite(float(loss)) else 0.0
        grad = out.ravel() if idx is None else RowSparse(idx, out, m.n_items)
        return {shard.index: BlockSums(float(loss), grad, float(rows.shape[0]), extras)}, gU

    def grad_template(self):
        return np.zeros((self.model.n_items, self.model.item_width))

    def dense_grad(self, grad):
        if isinstance(grad, np.ndarray):
            return grad
        out = np.zeros(self.n_params)
        grad.add_to(out)
        return out

    # ------------------------------------------------------------- driver side
    @property
    def als_shape(self):
        """The item table's shape (alternating least squares)."""
        return (self.model.n_items, self.model.item_width)

    def als_support(self):
        """None when alternating least squares can train this model, else why not."""
        if self.model.kind == "bpr":
            return "loss='bpr' is not a least-squares objective; use solver='gd'"
        if self.model.unit != 1.0:  # (the solver's tables are the model's own)
            return "the model's parameters are scaled for gradient steps (unit != 1)"
        return None

    def als_aux(self, phase, table):
        """What a step of alternating least squares sends besides ``table``."""
        gram = table.T @ table if phase == "solve" and self.model.kind == "wls" else None
        return AlsPhase(phase, gram, CG_STEPS)

    @staticmethod
    def als_gram(partial):
        """The users' Gram matrix of the all-pairs term (wls), or None."""
        return partial.extras.get("gram")

    def als_preconditioner(self, V):
        """The item systems' conjugate-gradient preconditioner, per column (explicit
        ratings: :func:`~dask_dgd.losses._als.factor_preconditioner` on the factor
        columns, 1 on the bias's), or None."""
        if self.model.kind != "explicit":
            return None
        pre = np.ones(self.model.item_width)
        pre[:-1] = _als.factor_preconditioner(V, self.model.alpha)
        return pre

    def als_diag(self):
        """What the driver adds to every item system's diagonal (the item biases'
        penalty, once per item: explicit ratings), per column, or None."""
        if self.model.kind != "explicit":
            return None
        diag = np.zeros(self.model.item_width)
        diag[-1] = self.model.alpha_bias
        return diag

    def step_aux(self, params):
        """The items' Gram matrix (confidence-weighted least squares), once per step."""
        if self.model.kind != "wls":
            return None
        V = self._model_table(params)
        return V.T @ V

    def _bias_penalty(self, xp, table, grad):
        """``alpha_bias`` times the sum of the squared biases (the last column of
        ``table``), once per row per epoch (a step of ``n_batches`` takes its share);
        its gradient is added to ``grad``'s last column."""
        c = self.model.alpha_bias / self.n_batches
        if c == 0.0:
            return 0.0
        b = table[:, -1]
        grad[:, -1] = grad[:, -1] + (2.0 * c) * b
        return c * float(xp.vecdot(b, b))

    def finish(self, partial, params):
        """Mean loss per rating (the penalty is in it) and the item table's gradient;
        the all-pairs term of confidence-weighted least squares from the users' Gram;
        the item biases' penalty (explicit ratings)."""
        n = partial.weight_sum
        loss, grad = partial.loss_sum, partial.grad_sum
        di = self.model.column_units("item")  # (the gradients' chain rule to the engine's parameters)
        if self.model.kind == "explicit" and "matvec" not in partial.extras:
            g = np.zeros((self.model.n_items, self.model.item_width))
            loss = loss + self._bias_penalty(np, self._model_table(params), g)
            grad = grad + (g if di is None else g * di).ravel()
        if self.model.kind == "wls" and "gram" in partial.extras:
            a_loss, a_grad = kernels.wls_all_pairs(self._model_table(params), partial.extras["gram"],
                                                   1.0 / self.n_batches)
            loss = loss + a_loss
            grad = grad + (a_grad if di is None else a_grad * di).ravel()
        if n <= 0:
            return 0.0, np.zeros(self.n_params)
        return loss / n, grad / n

    @staticmethod
    def l1_value(params):
        return 0.0

    @staticmethod
    def grad_norm(partial, grad):
        n = partial.weight_sum
        local = math.sqrt(max(partial.extras.get("local_sq", 0.0), 0.0)) / n if n > 0 else 0.0
        return math.hypot(float(np.linalg.norm(grad)), local)

    def record_extras(self, partial):
        if self.model.kind != "explicit":
            return {}
        out = {"rmse": math.sqrt(partial.extras.get("sq_sum", 0.0) / max(partial.weight_sum, 1))}
        if partial.extras.get("val_n", 0) > 0:  # held-out ratings (alpha="auto"), at this step's factors
            out["val_rmse"] = math.sqrt(partial.extras["val_sq"] / partial.extras["val_n"])
            out["val_score"] = -out["val_rmse"]
            if "val_d2" in partial.extras:  # paired with a baseline's held-out errors
                n = partial.extras["val_n"]
                mean = partial.extras["val_d"] / n
                out["val_gain"] = -mean
                out["val_gain_se"] = math.sqrt(max(partial.extras["val_d2"] / n - mean * mean, 0.0) / max(n - 1, 1))
        return out

    def batching(self, shards, batch_size, seed):
        return HashBatches(self.n_batches, self.model.seed)

    def lipschitz(self, shards, params):
        raise NotImplementedError("matrix factorization takes its learning rate from the optimizer")

    def check_data(self, shards):
        """The ratings were checked at setup: a non-finite objective is a divergence."""


def grow_state(state, extra, optimizer, columns=False):
    """An optimizer state with ``extra`` more rows (in their initial state) for new
    users or items; ``columns``: ``extra`` more columns, before the others (factors
    added in front of the biases' column)."""
    if extra <= 0 or state is None:  # (None: a fit by alternating least squares keeps no state)
        return state
    fields = {}
    for name, value in state._asdict().items():
        if isinstance(value, np.ndarray) and value.ndim == 2:
            shape = (value.shape[0], extra) if columns else (extra, value.shape[1])
            fresh = getattr(optimizer.init(np.zeros(shape)), name)
            value = np.hstack([fresh, value]) if columns else np.vstack([value, fresh])
        fields[name] = value
    return type(state)(**fields)
