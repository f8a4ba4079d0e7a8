r"""Measure :math:`q/\varepsilon` at every normalization of a PyTorch model: the first step of
choosing :math:`\varepsilon` (the frameworks extra; torch is imported on first use only).

:math:`q` is what a norm adds :math:`\varepsilon` to, per row: the biased variance over the
normalized dimensions for layer norm and group norm (over each group's channels and positions),
the mean square for RMS norm. In a format of :math:`p` significand bits, :math:`q + \varepsilon`
rounds to :math:`q` once :math:`q/\varepsilon \ge 2^{p-1}` (1024 for float16, 128 for bfloat16,
8,388,608 for float32): there :math:`\varepsilon` does nothing. :func:`probe` runs a model over a
batch and reports, per normalization site (:class:`Site`), the smallest and median :math:`q`,
and per format the share of rows where :math:`\varepsilon` still acts (:math:`q/\varepsilon <
2^{p-1}`). :class:`QMonitor` does the same during training, every ``every``-th forward pass.

Sites are found by type and by name: ``nn.LayerNorm``, ``nn.RMSNorm`` and ``nn.GroupNorm``, and
any module that follows Hugging Face's pattern, a ``weight`` parameter and an ``eps`` or
``variance_epsilon`` attribute in a class whose name contains ``Norm`` (``RMS`` in the name or
no ``bias``, as in ``T5LayerNorm``: an RMS norm; else a layer norm; both over the last
dimension). ``nn.RMSNorm`` with ``eps=None`` uses
``torch.finfo(input.dtype).eps``, as PyTorch does.

:math:`q` is computed in float64 from the values the norm receives, so it is exact to float64's
rounding (relative error below :math:`10^{-15}` for rows of fewer than :math:`10^6` elements);
the shares compare it with the thresholds exactly as stated. :func:`site_report` is the same
statistics on rows you already have (NumPy only).

>>> import numpy as np
>>> s = site_report("ln", "LayerNorm", 1e-5, np.array([1e-3, 4e-6, 1.0, 0.25]))
>>> s.q_min, s.share_acts["float32"], s.share_acts["bfloat16"], s.share_acts["float16"]
(4e-06, 1.0, 0.5, 0.5)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .formats import format_of

__all__ = ["FORMATS", "THRESHOLDS", "Site", "site_report", "norm_sites", "probe", "QMonitor"]

FORMATS = ("float16", "bfloat16", "float32")
#: :math:`2^{p-1}` per format: at or above it, :math:`q + \varepsilon` rounds to :math:`q`.
THRESHOLDS = {f: 2.0 ** (format_of(f).p - 1) for f in FORMATS}


@dataclass(frozen=True)
class Site:
    """One normalization's :math:`q` over a batch: ``rows`` rows, the smallest, median and
    largest q, the count of rows with q = 0, and per format the share of rows where epsilon acts
    (:math:`q/\\varepsilon` below the format's threshold; 0 for epsilon = 0)."""

    name: str
    kind: str
    eps: float
    rows: int
    q_min: float
    q_median: float
    q_max: float
    zero_rows: int
    share_acts: dict

    @property
    def q_over_eps_min(self) -> float:
        """The smallest :math:`q/\\varepsilon` (inf for epsilon = 0)."""
        return np.inf if self.eps == 0 else self.q_min / self.eps

    @property
    def q_over_eps_median(self) -> float:
        return np.inf if self.eps == 0 else self.q_median / self.eps

    def acts(self, fmt: str) -> bool:
        """Whether epsilon changes :math:`q + \\varepsilon` in ``fmt`` for any row."""
        return self.share_acts[fmt] > 0

    def as_dict(self) -> dict:
        return asdict(self)


def site_report(name: str, kind: str, eps: float, q) -> Site:
    """The :class:`Site` statistics of the rows' ``q`` (any array, float64 is used) for a norm
    with ``eps``. Non-finite q (rows that were not finite) raise a ``ValueError`` naming them."""
    q = np.asarray(q, dtype=np.float64).ravel()
    if q.size == 0:
        raise ValueError(f"{name}: no rows")
    bad = np.count_nonzero(~np.isfinite(q))
    if bad:
        raise ValueError(
            f"{name}: {bad} of {q.size} rows have a non-finite q (the input was not finite)"
        )
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"{name}: eps must be finite and >= 0; got {eps}")
    shares = {f: float(np.count_nonzero(q < t * eps)) / q.size for f, t in THRESHOLDS.items()}
    return Site(
        name,
        kind,
        float(eps),
        int(q.size),
        float(q.min()),
        float(np.median(q)),
        float(q.max()),
        int(np.count_nonzero(q == 0)),
        shares,
    )


# --- torch --------------------------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the slim install
        raise ImportError(
            "lneps.torch needs PyTorch (the frameworks extra: "
            "pip install -r requirements-frameworks.txt)"
        ) from e
    return torch


def _kind(module) -> tuple[str, str] | None:
    """(kind, name of the epsilon attribute) if ``module`` is a normalization, else None."""
    nn = _torch().nn
    if isinstance(module, nn.LayerNorm):
        return "LayerNorm", "eps"
    if isinstance(module, nn.RMSNorm):
        return "RMSNorm", "eps"
    if isinstance(module, nn.GroupNorm):
        return "GroupNorm", "eps"
    cls = type(module).__name__
    if "Norm" in cls and isinstance(getattr(module, "weight", None), nn.Parameter):
        for attr in ("variance_epsilon", "eps"):
            if isinstance(getattr(module, attr, None), (int, float)):
                # without a bias it centres nothing: T5LayerNorm and LlamaRMSNorm are RMS norms
                rms = "RMS" in cls.upper() or getattr(module, "bias", None) is None
                return ("RMSNorm" if rms else "LayerNorm"), attr
    return None


def norm_sites(model) -> dict[str, tuple[str, str]]:
    """Every normalization of ``model`` by its qualified name: ``{name: (kind, eps attribute)}``."""
    return {n: k for n, m in model.named_modules() if (k := _kind(m)) is not None}


def _q_rows(module, kind: str, x):
    """q per row of the norm's input ``x``, float64 (a torch tensor)."""
    torch = _torch()
    x = x.detach().to(torch.float64)
    if kind == "GroupNorm":
        g = module.num_groups
        x = x.reshape(x.shape[0], g, -1)
        return x.var(dim=-1, unbiased=False).reshape(-1)
    dims = len(getattr(module, "normalized_shape", (0,)))  # a Hugging Face norm: the last dimension
    x = x.reshape(-1, int(np.prod(x.shape[x.ndim - dims :])))
    if kind == "RMSNorm":
        return (x * x).mean(dim=-1)
    return x.var(dim=-1, unbiased=False)


def _eps(module, kind: str, attr: str, x) -> float:
    eps = getattr(module, attr)
    if eps is None:  # nn.RMSNorm's default: the input's machine epsilon
        return float(_torch().finfo(x.dtype).eps)
    return float(eps)


class _Hooks:
    """Forward pre-hooks on every site that hand (name, q, eps) to ``sink``."""

    def __init__(self, model, sink):
        self.sites = norm_sites(model)
        if not self.sites:
            raise ValueError(
                "the model has no normalization this probe recognizes "
                "(nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, or a *Norm with weight and eps)"
            )
        mods = dict(model.named_modules())
        self.handles = []
        for name, (kind, attr) in self.sites.items():
            m = mods[name]

            def hook(mod, args, name=name, kind=kind, attr=attr):
                x = args[0]
                sink(name, kind, _eps(mod, kind, attr, x), _q_rows(mod, kind, x))

            self.handles.append(m.register_forward_pre_hook(hook))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def probe(model, *inputs, **kwargs) -> dict[str, Site]:
    """Run ``model(*inputs, **kwargs)`` once without gradients and return, per normalization
    site (in the order they ran; a module called twice pools its rows), its :class:`Site`.
    Every row a norm receives counts, padding rows included: to measure real tokens only, pass
    unpadded inputs (as :mod:`lneps.book.minilm.torch_model` packs its sentences).

    >>> import torch
    >>> m = torch.nn.LayerNorm(2, eps=2.0 ** -16)
    >>> s = probe(m, torch.tensor([[1.0, -1.0], [0.0625, -0.0625]]))[""]
    >>> s.rows, s.q_min, s.q_over_eps_min, s.acts("bfloat16"), s.acts("float32")
    (2, 0.00390625, 256.0, False, True)
    """
    torch = _torch()
    got: dict[str, list] = {}

    def sink(name, kind, eps, q):
        got.setdefault(name, [kind, eps, []])[2].append(q)

    hooks = _Hooks(model, sink)
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        hooks.remove()
    return {n: site_report(n, k, e, torch.cat(qs).numpy()) for n, (k, e, qs) in got.items()}


class QMonitor:
    """A training callback: attached to ``model``, it records every site's :class:`Site` on
    every ``every``-th forward pass (the first included) into :attr:`history`, a list of
    ``(call, {name: Site})``. Use as a context manager, or call :meth:`close`.

    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    >>> with QMonitor(m, every=2) as mon:
    ...     for _ in range(3):
    ...         _ = m(torch.ones(2, 4))
    >>> [c for c, _ in mon.history]
    [0, 2]
    """

    def __init__(self, model, every: int = 1):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer; got {every!r}")
        self.every, self.history, self._calls = every, [], 0
        self._pending: dict = {}
        self._first = None
        self._hooks = _Hooks(model, self._sink)
        self._root = model.register_forward_hook(self._done)

    def _sink(self, name, kind, eps, q):
        if self._calls % self.every == 0:
            self._pending.setdefault(name, [kind, eps, []])[2].append(q.cpu())

    def _done(self, *_):
        if self._pending:
            torch = _torch()
            self.history.append((
                self._calls,
                {
                    n: site_report(n, k, e, torch.cat(qs).numpy())
                    for n, (k, e, qs) in self._pending.items()
                },
            ))
            self._pending = {}
        self._calls += 1

    def close(self):
        self._hooks.remove()
        self._root.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
