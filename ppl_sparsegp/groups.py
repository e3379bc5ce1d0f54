r"""Finite cyclic transformation groups acting on inputs, for the harmonic kernel decomposition.

A *way* is a transformation :math:`G` of the input space that is *T-cyclic*: :math:`G^T = \mathrm{id}`
with T the smallest such integer [1, §3.1]. A *group* is a product of commuting ways
:math:`G = G_1\otimes\dots\otimes G_J` with multi-index powers :math:`G^{\mathbf s} = G_1^{s_1}\cdots
G_J^{s_J}` [1, §3.5]; it has :math:`\tilde T = \prod_j T_j` elements (the orbit of a point) and, after
pairing complex conjugate sub-kernels [1, §3.4], :math:`T = \prod_j(\lfloor T_j/2\rfloor + 1)` real
sub-kernels with DFT weights

.. math::

    w^{(j)}_t(s) = \frac{c_t}{T_j}\cos\frac{2\pi t s}{T_j},\quad t = 0..\lfloor T_j/2\rfloor,\qquad
    c_t = 1\ (t = 0 \text{ or } t = T_j/2),\ 2\ \text{otherwise},\qquad
    w_{\mathbf t}(\mathbf s) = \prod_j w^{(j)}_{t_j}(s_j),

so that :math:`k_{\mathbf t}(\mathbf x,\mathbf x') = \sum_{\mathbf s} w_{\mathbf t}(\mathbf s)\,
k(\mathbf x, G^{\mathbf s}\mathbf x')` and :math:`\sum_{\mathbf t} k_{\mathbf t} = k` (the t = 0 row
sums every other column to zero). For J-way negation W is the Walsh–Hadamard matrix over :math:`\tilde T`.

Every group here is a frozen dataclass of hashable fields, so it can live in a
:class:`~ppl_sparsegp.parameters.Module`'s ``_static`` fields and pass through ``jax.jit``. Multi-index
orders are C order (the first way varies slowest), matching ``numpy.kron`` of the per-way weights.

Ways:

* :class:`Negation`: :math:`\mathbf x\mapsto-\mathbf x`, or the reflection :math:`\mathbf x\mapsto
  \mathbf x - 2UU^\top\mathbf x` through the span of orthonormal directions U (T = 2);
  :func:`multi_negation`, :func:`coordinate_negation`, :func:`principal_axes_negation` build J-way
  products (:math:`2^J` sub-kernels);
* :class:`Rotation`: rotation by :math:`2\pi/T` in a 2-D plane;
* :class:`ImageFlip`, :class:`ImageShift`: flips and cyclic pixel shifts of flattened
  ``h×w×c`` images (permutations of the input coordinates);
* :class:`LongitudeRotation`: :math:`(\lambda, \varphi)\mapsto(\lambda + 360°/T, \varphi)` for
  (lon, lat) inputs in degrees; use a kernel of the embedded points, :class:`SphereEmbedded`.

``a * b`` is the product of commuting groups (:class:`ProductGroup`).

References:
    1. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Annotated, Any

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .kernels import check_inputs
from .validation import (
    AnyOf,
    ArrayOf,
    Count,
    Flag,
    InstanceOf,
    Integer,
    NonNegativeInt,
    OneOf,
    OrNone,
    Positive,
    SequenceOf,
    validated,
)

__all__ = ["Group", "Transformation", "ProductGroup", "Negation", "Rotation", "ImageFlip", "ImageShift",
           "LongitudeRotation", "multi_negation", "coordinate_negation",
           "principal_axes_negation", "real_dft_weights"]


#: the declared hints of the ways' fields (module docstring: the orders, image shapes, axes)
_ORDER = Annotated[int, Integer(2)]
_SHAPE = Annotated[Any, SequenceOf(Integer(1), min_len=2)]
_IMAGE_AXIS = Annotated[int, OneOf(0, 1)]
_FRAME = ArrayOf(rank=(1, 2))
#: inputs (..., D) of a group's action: numbers, read for their shape only (a device array is not copied)
_POINTS = Annotated[Any, ArrayOf(read=False)]


@validated
def real_dft_weights(order: Annotated[int, Integer(1)]) -> np.ndarray:
    r"""Real-paired DFT weights of one T-cyclic way, shape (⌊T/2⌋+1, T).

    :math:`w_t(s) = c_t\cos(2\pi t s/T)/T` with :math:`c_t = 1` for t = 0 or t = T/2, else 2 [1, §3.4].

    :param order: T >= 1, the order of the way (an integer).
    :returns: W, a float64 array (⌊T/2⌋+1, T): row t holds :math:`w_t(s)` for s = 0..T−1.
    """
    T = int(order)
    t = np.arange(T // 2 + 1)[:, None]
    s = np.arange(T)[None, :]
    c = np.where((t == 0) | (2 * t == T), 1.0, 2.0)
    return c * np.cos(2.0 * np.pi * t * s / T) / T  # Eq. (§3.4) [1]


def _as_frame(directions, name):
    """Orthonormal columns as a hashable tuple of tuples (rows of the (D, k) matrix)."""
    U = np.asarray(directions, dtype=np.float64)
    if U.ndim == 1:
        U = U[:, None]
    if U.ndim != 2 or U.shape[1] < 1 or U.shape[1] > U.shape[0]:
        raise ValueError(f"{name} must be a (D,) vector or a (D, k) matrix with 1 <= k <= D, got shape "
                         f"{U.shape}")
    if not np.all(np.isfinite(U)):
        raise ValueError(f"{name} contains NaN or inf")
    if not np.allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-6):
        raise ValueError(f"{name} must have orthonormal columns (UᵀU = I)")
    return tuple(tuple(float(v) for v in row) for row in U)


def _xp(X):
    """NumPy for NumPy inputs (no compilation for concrete probes and tests), else jax.numpy."""
    return np if isinstance(X, (np.ndarray, float, int)) else jnp


def _float_dtype(X):
    """X's dtype when it is floating (float32 stays float32), else the default float."""
    return X.dtype if np.issubdtype(X.dtype, np.floating) else np.result_type(float)


class Group:
    """A product of commuting cyclic ways; subclasses are single ways or :class:`ProductGroup`."""

    @property
    def ways(self) -> tuple:
        """The single cyclic transformations, in multi-index order."""
        raise NotImplementedError

    @property
    def orders(self) -> tuple:
        """:math:`(T_1, \\dots, T_J)`."""
        return tuple(w.order for w in self.ways)

    @property
    def orbit_size(self) -> int:
        """:math:`\\tilde T = \\prod_j T_j`, the number of group elements."""
        return math.prod(self.orders)

    @property
    def num_subkernels(self) -> int:
        """The number T of real sub-kernels, :math:`\\prod_j(\\lfloor T_j/2\\rfloor + 1)`."""
        return math.prod(T // 2 + 1 for T in self.orders)

    def weights(self) -> np.ndarray:
        """W of shape (T, T̃): :math:`W_{\\mathbf t,\\mathbf s} = \\prod_j w^{(j)}_{t_j}(s_j)` [1, §3.5]."""
        W = np.ones((1, 1))
        for T in self.orders:
            W = np.kron(W, real_dft_weights(T))
        return W

    def multi_indices(self) -> list:
        """The multi-indices s of the group elements, in C order."""
        return list(itertools.product(*[range(T) for T in self.orders]))

    @validated
    def apply(self, X: _POINTS, s: Annotated[Any, SequenceOf(Integer(), min_len=0)]):
        """:math:`G^{\\mathbf s}\\mathbf x` for a multi-index s (one int per way), X of shape (..., D).

        :raises ValueError: when s does not have one entry per way."""
        if len(s) != len(self.ways):
            raise ValueError(f"s must have {len(self.ways)} entries, got {s!r}")
        for way, sj in zip(self.ways, s):
            X = way.power(X, int(sj))
        return X

    @validated
    def orbit(self, X: _POINTS):
        """All :math:`G^{\\mathbf s}X`, stacked: shape ``(T̃, *X.shape)``, s in C order."""
        xp = _xp(X)
        X = xp.asarray(X)
        out = X[None]
        for way in self.ways:  # C order: after way j, index = s_1 ... s_j with s_j fastest
            out = xp.stack([way.power(out, s) for s in range(way.order)], axis=1)
            out = out.reshape((-1,) + X.shape)
        return out

    @validated
    def check(self, input_dim: Count, scale: Positive = 1.0):
        r"""Check on a random probe that every way acts on D inputs and is cyclic of its order, that the
        ways commute, and that the T̃ elements :math:`G^{\mathbf s}` are distinct (no way repeats another,
        every order is minimal); raise ``ValueError`` otherwise."""
        for way in self.ways:
            way.check_dim(input_dim)
        rng = np.random.default_rng(0)
        x = _probe(self.ways, input_dim, scale, rng)
        for s in self.multi_indices()[1:]:
            if np.allclose(np.asarray(self.apply(x, s)), x):
                raise ValueError(f"G^{s} is the identity on a random probe: the orders are not minimal or the "
                                 "ways are not independent (a repeated way gives zero sub-kernels)")
        for j, way in enumerate(self.ways):
            back = np.asarray(way.power(way.power(x, way.order - 1), 1))
            if not np.allclose(back, x, atol=1e-8 * max(scale, 1.0)):
                raise ValueError(f"{way!r} is not {way.order}-cyclic on this input (G^T x != x)")
            for other in self.ways[j + 1:]:
                a = np.asarray(way.power(other.power(x, 1), 1))
                b = np.asarray(other.power(way.power(x, 1), 1))
                if not np.allclose(a, b, atol=1e-8 * max(scale, 1.0)):
                    raise ValueError(f"the ways {way!r} and {other!r} do not commute")

    @validated
    def coordinate_sign_flips(self, input_dim: Count) -> bool:
        r"""True when every way only flips the signs of some input coordinates (:math:`G = \mathrm{diag}(\pm
        1)` on D inputs), checked on a random probe.

        These are the only groups under which a stationary kernel with one lengthscale per input dimension
        (ARD, or a sum or product of 1-D kernels) stays invariant *whatever* the lengthscales: for an
        orthogonal G, :math:`\|\Lambda^{-1}G\mathbf r\| = \|\Lambda^{-1}\mathbf r\|` for every diagonal
        :math:`\Lambda` iff :math:`\Lambda^{-1}G\Lambda` is orthogonal for every :math:`\Lambda`, i.e. G is
        diagonal. Rotations, reflections off the coordinate axes, pixel permutations and non-linear ways
        (longitude rotations) are not.
        """
        return all(_flips_coordinates(way, int(input_dim)) for way in self.ways)

    def __mul__(self, other):
        if not isinstance(other, Group):
            return NotImplemented
        return ProductGroup(self.ways + other.ways)


@functools.lru_cache(maxsize=256)
def _flips_coordinates(way, D: int) -> bool:
    """Whether ``way`` acts on D inputs as a linear map with a diagonal ±1 matrix (cached: ways are hashable)."""
    try:
        way.check_dim(D)
    except ValueError:
        return False
    G = np.asarray(way.power(np.eye(D), 1), dtype=np.float64)  # rows: G e_i, i.e. Gᵀ
    x = _probe((way,), D, 1.0, np.random.default_rng(0))
    linear = np.allclose(np.asarray(way.power(x, 1), dtype=np.float64), x @ G, atol=1e-10)
    diagonal = np.allclose(G, np.diag(np.diagonal(G)), atol=1e-12)
    return bool(linear and diagonal and np.allclose(np.abs(np.diagonal(G)), 1.0, atol=1e-12))


def _probe(ways, D, scale, rng):
    """A probe input inside the ways' domain (longitudes within [-180, 180), latitudes in (-90, 90))."""
    x = scale * rng.normal(size=(5, D))
    for way in ways:
        x = way.to_domain(x)
    return x


class Transformation(Group):
    """One T-cyclic way. Subclasses set ``order`` and implement :meth:`power` (:math:`G^s`)."""

    order: int

    @property
    def ways(self):
        return (self,)

    def power(self, X: ArrayLike, s: int):
        """:math:`G^s X` for X of shape (..., D)."""
        raise NotImplementedError

    def check_dim(self, D: int):
        """Raise ``ValueError`` if this way cannot act on D-dimensional inputs."""

    def to_domain(self, x: ArrayLike):
        """Map a random probe x (..., D) into the way's domain (identity for linear ways)."""
        return x

    def _check_order(self):
        if isinstance(self.order, bool) or not isinstance(self.order, (int, np.integer)) or self.order < 2:
            raise ValueError(f"{type(self).__name__}: order must be an int >= 2, got {self.order!r}")
        object.__setattr__(self, "order", int(self.order))


@validated
@dataclass(frozen=True)
class ProductGroup(Group):
    """The product of commuting ways; ``ways`` is a tuple of :class:`Transformation`.

    Usually built as ``a * b`` or by :func:`multi_negation` and the other builders. The ways are not checked
    to commute here: :meth:`~Group.check` does that on a probe.

    :param members: a tuple of :class:`Group` (single ways or products); products are flattened, so after
        construction ``members`` (and ``ways``) holds the single ways, in multi-index order.
    :raises ValueError: when a member is not a :class:`Group`, or there is no way at all.
    """

    members: Annotated[tuple, SequenceOf(InstanceOf(Group, what="a group (a way or a product)"))]

    def __post_init__(self):
        flat = []
        for g in self.members:
            if not isinstance(g, Group):
                raise ValueError(f"ProductGroup members must be groups, got {type(g).__name__}")
            flat.extend(g.ways)
        if not flat:
            raise ValueError("ProductGroup needs at least one way")
        object.__setattr__(self, "members", tuple(flat))

    @property
    def ways(self):
        return self.members


@validated
@dataclass(frozen=True)
class Negation(Transformation):
    r"""Negation (T = 2): :math:`\mathbf x\mapsto-\mathbf x`, or, with orthonormal ``directions`` U
    (D, k), the reflection :math:`\mathbf x\mapsto\mathbf x - 2UU^\top\mathbf x` that negates the
    components in span(U). Every isotropic stationary kernel is invariant [1, §3.3]; an ARD kernel only
    under coordinate-axis reflections.

    :param directions: None, a (D,) unit vector or a (D, k) array with orthonormal columns.
    :param order: T, always 2 (a field so that every way has one; another value raises).
    :raises ValueError: for ``order`` other than 2, or ``directions`` that are not orthonormal, finite,
        (D,) or (D, k) with 1 <= k <= D.
    """

    directions: Annotated[tuple | None, OrNone(_FRAME)] = None
    order: Annotated[int, OneOf(2)] = 2

    def __post_init__(self):
        if self.order != 2:
            raise ValueError(f"Negation has order 2, got {self.order!r}")
        if self.directions is not None:
            object.__setattr__(self, "directions", _as_frame(self.directions, "directions"))

    @property
    def matrix_U(self):
        return None if self.directions is None else np.asarray(self.directions)

    def check_dim(self, D: int) -> None:
        if self.directions is not None and len(self.directions) != D:
            raise ValueError(f"Negation directions have dimension {len(self.directions)}, inputs have {D}")

    def power(self, X: ArrayLike, s: int):
        if s % 2 == 0:
            return X
        if self.directions is None:
            return -X
        xp = _xp(X)
        U = xp.asarray(self.matrix_U, dtype=_float_dtype(X))
        return X - 2.0 * (X @ U) @ U.T

    def __repr__(self):
        k = "all" if self.directions is None else len(self.directions[0])
        return f"Negation(directions={k})"


@validated
def multi_negation(directions: Annotated[Any, AnyOf(_FRAME, SequenceOf(ArrayOf(rank=2)))]) -> ProductGroup:
    """J-way negation along the orthonormal columns of ``directions`` (D, J), or along J subspaces given
    as a sequence of (D, k_j) blocks with mutually orthogonal columns: :math:`2^J` sub-kernels.

    :param directions: a (D,) or (D, J) array of orthonormal columns, or a list of (D, k_j) blocks.
    :returns: a :class:`ProductGroup` of J :class:`Negation` ways.
    :raises ValueError: for columns that are not orthonormal (the blocks together)."""
    if isinstance(directions, (list, tuple)) and len(directions) and np.ndim(directions[0]) == 2:
        blocks = [np.asarray(b, dtype=np.float64) for b in directions]
        _as_frame(np.concatenate(blocks, axis=1), "directions (all blocks together)")
    else:
        U = np.asarray(directions, dtype=np.float64)
        U = U[:, None] if U.ndim == 1 else U
        _as_frame(U, "directions")
        blocks = [U[:, j] for j in range(U.shape[1])]
    return ProductGroup(tuple(Negation(b) for b in blocks))


@validated
def coordinate_negation(input_dim: Count, axes: Annotated[Any, SequenceOf(NonNegativeInt())]) -> ProductGroup:
    """J-way negation of the coordinate axes ``axes`` (ints): :math:`x_a \\mapsto -x_a` separately.

    :param input_dim: D, the input dimension (the directions are columns of the D × D identity).
    :param axes: J distinct coordinate indices in ``0 .. D - 1``.
    :returns: a :class:`ProductGroup` of J :class:`Negation` ways (:math:`2^J` sub-kernels).
    :raises ValueError: for no axes, repeated axes or an axis outside ``0 .. D - 1``.
    """
    axes = tuple(int(a) for a in axes)
    if not axes or len(set(axes)) != len(axes) or not all(0 <= a < input_dim for a in axes):
        raise ValueError(f"axes must be distinct ints in [0, {input_dim}), got {axes!r}")
    return multi_negation(np.eye(input_dim)[:, list(axes)])


@validated
def principal_axes_negation(X: Annotated[Any, ArrayOf(rank=2)], num_ways: Count, *,
                            split: Flag = False) -> ProductGroup:
    """J-way negation along the principal axes of the (centred) inputs X (N, D).

    The principal directions are the eigenvectors of the sample covariance of X, by decreasing
    eigenvalue, each with a deterministic sign (its entry of largest magnitude positive).

    :param X: inputs (N, D).
    :param num_ways: J, the number of ways, an int in ``1 .. D``.
    :param split: False: one way per leading principal direction (the J largest); True: all D directions,
        dealt round-robin into J subspaces (as the authors' code does for the regression benchmarks).
    :returns: a :class:`ProductGroup` of J :class:`Negation` ways (:math:`2^J` sub-kernels).
    :raises ValueError: for a ``num_ways`` outside ``1 .. D``, or X not of shape (N, D) with finite entries.
    """
    X = np.asarray(check_inputs(X, "X"), dtype=np.float64)
    D = X.shape[1]
    if isinstance(num_ways, bool) or not isinstance(num_ways, (int, np.integer)) or not 1 <= num_ways <= D:
        raise ValueError(f"num_ways must be an int in [1, {D}], got {num_ways!r}")
    evals, evecs = np.linalg.eigh(np.cov(X, rowvar=False).reshape(D, D))
    U = evecs[:, np.argsort(evals)[::-1]]
    U = U * np.where(U[np.argmax(np.abs(U), axis=0), np.arange(D)] < 0, -1.0, 1.0)  # deterministic sign
    if not split:
        return multi_negation(U[:, :num_ways])
    return multi_negation([U[:, j::num_ways] for j in range(num_ways)])


@validated
@dataclass(frozen=True)
class Rotation(Transformation):
    r"""Rotation by :math:`2\pi/T` in the plane of two orthonormal directions (u, v):
    :math:`a = u^\top x,\ b = v^\top x,\ G^s x = x + (a\cos\theta_s - b\sin\theta_s - a)u +
    (a\sin\theta_s + b\cos\theta_s - b)v`, :math:`\theta_s = 2\pi s/T`.

    :param order: T >= 2.
    :param plane: a pair of coordinate indices (i, j), or a (D, 2) array with orthonormal columns.
    """

    order: _ORDER
    plane: Annotated[tuple, AnyOf(SequenceOf(NonNegativeInt(), length=2), _FRAME)] = (0, 1)

    def __post_init__(self):
        self._check_order()
        p = self.plane
        if np.ndim(p) == 1 and len(p) == 2 and all(isinstance(i, (int, np.integer)) for i in p):
            if p[0] == p[1] or min(p) < 0:
                raise ValueError(f"plane must be two distinct non-negative coordinate indices, got {p!r}")
            object.__setattr__(self, "plane", (int(p[0]), int(p[1])))
        else:
            frame = _as_frame(p, "plane")
            if len(frame[0]) != 2:
                raise ValueError("plane must be (i, j) or a (D, 2) array of orthonormal columns")
            object.__setattr__(self, "plane", frame)

    def _frame(self, D, dtype):
        if isinstance(self.plane[0], int):
            return np.eye(D, dtype=dtype)[:, list(self.plane)]
        return np.asarray(self.plane, dtype=dtype)

    def check_dim(self, D: int) -> None:
        if isinstance(self.plane[0], int):
            if max(self.plane) >= D:
                raise ValueError(f"Rotation plane {self.plane} needs at least {max(self.plane) + 1} inputs, "
                                 f"got {D}")
        elif len(self.plane) != D:
            raise ValueError(f"Rotation plane has dimension {len(self.plane)}, inputs have {D}")

    def power(self, X: ArrayLike, s: int):
        s = s % self.order
        if s == 0:
            return X
        xp = _xp(X)
        X = xp.asarray(X)
        P = xp.asarray(self._frame(X.shape[-1], _float_dtype(X)))
        th = 2.0 * math.pi * s / self.order
        c, sn = math.cos(th), math.sin(th)
        ab = X @ P  # (..., 2): coordinates in the plane
        a, b = ab[..., :1], ab[..., 1:]
        new = xp.concatenate([c * a - sn * b, sn * a + c * b], axis=-1)
        return X + (new - ab) @ P.T


class _Permutation(Transformation):
    """A way that permutes input coordinates: subclasses give ``shape`` and the index map of G."""

    def index_map(self) -> np.ndarray:
        raise NotImplementedError

    def power(self, X: ArrayLike, s: int):
        s = s % self.order
        if s == 0:
            return X
        idx = np.arange(self.size)
        perm = self.index_map()
        for _ in range(s):
            idx = idx[perm]
        return _xp(X).asarray(X)[..., idx]

    @property
    def size(self):
        return math.prod(self.shape)

    def check_dim(self, D: int) -> None:
        if D != self.size:
            raise ValueError(f"{type(self).__name__} acts on images of shape {self.shape} ({self.size} "
                             f"inputs), got {D} inputs")


def _check_shape(shape):
    shape = tuple(int(n) for n in shape)
    if len(shape) == 2:
        shape = shape + (1,)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"shape must be (h, w) or (h, w, c) with positive sizes, got {shape!r}")
    return shape


@validated
@dataclass(frozen=True)
class ImageFlip(_Permutation):
    """Flip of flattened ``h×w×c`` images (C order): ``axis=0`` up–down, ``axis=1`` left–right (T = 2).

    :param shape: (h, w) or (h, w, c).
    :param axis: 0 or 1.
    """

    shape: _SHAPE
    axis: _IMAGE_AXIS = 1
    order: Annotated[int, OneOf(2)] = 2

    def __post_init__(self):
        object.__setattr__(self, "shape", _check_shape(self.shape))
        if self.axis not in (0, 1):
            raise ValueError(f"ImageFlip: axis must be 0 (up-down) or 1 (left-right), got {self.axis!r}")
        if self.order != 2:
            raise ValueError("ImageFlip has order 2")

    def index_map(self):
        return np.flip(np.arange(math.prod(self.shape)).reshape(self.shape), axis=self.axis).ravel()


@validated
@dataclass(frozen=True)
class ImageShift(_Permutation):
    """Cyclic shift of flattened ``h×w×c`` images by ``step`` pixels along ``axis`` (0: down, 1: right),
    as ``numpy.roll``; T = n / gcd(n, step) for n the image size along the axis.

    :param shape: (h, w) or (h, w, c).
    :param axis: 0 or 1.
    :param step: pixels per application (not a multiple of the axis length).
    :param order: ignored: T is computed from ``shape``, ``axis`` and ``step`` as above (a field so that
        every way has one).
    :raises ValueError: for a bad ``shape``, an ``axis`` other than 0 or 1, or a ``step`` that is not an
        int or is a multiple of the axis length.
    """

    shape: _SHAPE
    axis: _IMAGE_AXIS = 1
    step: Annotated[int, Integer()] = 1
    order: Annotated[int, Integer(0)] = 0

    def __post_init__(self):
        object.__setattr__(self, "shape", _check_shape(self.shape))
        if self.axis not in (0, 1):
            raise ValueError(f"ImageShift: axis must be 0 or 1, got {self.axis!r}")
        n = self.shape[self.axis]
        if not isinstance(self.step, (int, np.integer)) or self.step % n == 0:
            raise ValueError(f"ImageShift: step must be an int that is not a multiple of {n}, got {self.step!r}")
        object.__setattr__(self, "order", n // math.gcd(n, int(self.step) % n))

    def index_map(self):
        return np.roll(np.arange(math.prod(self.shape)).reshape(self.shape), self.step, axis=self.axis).ravel()


@validated
@dataclass(frozen=True)
class LongitudeRotation(Transformation):
    r"""Rotation in longitude: :math:`(\lambda,\varphi)\mapsto(\lambda + 360°/T,\ \varphi)`, wrapped to
    [-180, 180). Inputs are (lon, lat) in degrees (columns ``lon_index``, ``lon_index + 1``). A kernel is
    invariant when it depends on the points of the sphere only, e.g. :class:`SphereEmbedded` [1, §6.1].

    :param order: T >= 2.
    :param lon_index: the column holding the longitude (the latitude is the next one).
    """

    order: _ORDER
    lon_index: Annotated[int, NonNegativeInt()] = 0

    def __post_init__(self):
        self._check_order()

    def check_dim(self, D: int) -> None:
        if not 0 <= self.lon_index < D - 1:
            raise ValueError(f"LongitudeRotation: lon_index {self.lon_index} needs a latitude column after it; "
                             f"inputs have {D} columns")

    def power(self, X: ArrayLike, s: int):
        s = s % self.order
        if s == 0:
            return X
        xp = _xp(X)
        X = xp.asarray(X)
        i = self.lon_index
        lon = xp.mod(X[..., i] + 360.0 * s / self.order + 180.0, 360.0) - 180.0
        return xp.concatenate([X[..., :i], lon[..., None], X[..., i + 1:]], axis=-1)

    def to_domain(self, x: ArrayLike):
        x = np.array(x)
        i = self.lon_index
        x[:, i] = np.mod(x[:, i] * 90.0, 360.0) - 180.0
        x[:, i + 1] = 80.0 * np.tanh(x[:, i + 1])
        return x
