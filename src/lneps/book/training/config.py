"""A run's configuration and its name: what the grid lists, the runs store and the tests re-run.

NumPy-free and torch-free: pure data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

__all__ = ["RunConfig", "run_id", "from_dict"]


def _eps_text(eps: float | None) -> str:
    return "none" if eps is None else ("0" if eps == 0 else f"{eps:.0e}")


@dataclass(frozen=True)
class RunConfig:
    """One training run: the model's choices, the precision mode, the seed, the steps; for a
    fine-tuning run also what is swapped after pre-training (``ft_eps``, ``ft_precision``)."""

    norm: str = "LayerNorm"
    placement: str = "pre"
    init: str = "normal"
    eps: float = 1e-5
    precision: str = "fp32"
    seed: int = 0
    steps: int = 300
    ft_eps: float | None = None
    ft_precision: str | None = None
    ft_steps: int = 0
    #: The peak learning rate when it is not the recipe's (:data:`.recipe.RECIPE`); ``None``: the
    #: recipe's. Only the ``lr`` slice sets it, so the other runs keep their names.
    lr: float | None = None
    #: The model's depth and width, and the warm-up steps, when not the recipe's (2 blocks of
    #: width 64, :data:`.recipe.RECIPE`'s warm-up); ``None``: the recipe's (the name stays).
    layers: int | None = None
    width: int | None = None
    warmup: int | None = None

    @property
    def is_finetune(self) -> bool:
        return self.ft_steps > 0

    def base(self) -> "RunConfig":
        """The pre-training run a fine-tuning run starts from (itself for a plain run)."""
        return replace(self, ft_eps=None, ft_precision=None, ft_steps=0)

    def as_dict(self) -> dict:
        return asdict(self)

    def key(self, drop_seed: bool = True) -> tuple:
        """The configuration without its seed: the runs that are one configuration's seeds."""
        d = asdict(self)
        if drop_seed:
            d.pop("seed")
        return tuple(d.values())


def run_id(c: RunConfig) -> str:
    """A readable unique name, e.g. ``LayerNorm-pre-normal-eps1e-05-fp32-s0-n300`` (``-lr1e-02``
    appended when the learning rate is not the recipe's, ``-L8``, ``-w128``, ``-wu0`` when the
    depth, width or warm-up is not).

    >>> run_id(RunConfig(placement="none", eps=None, lr=1e-2, seed=3))
    'LayerNorm-none-normal-epsnone-fp32-s3-n300-lr1e-02'
    """
    s = f"{c.norm}-{c.placement}-{c.init}-eps{_eps_text(c.eps)}-{c.precision}-s{c.seed}-n{c.steps}"
    if c.lr is not None:
        s += f"-lr{c.lr:.0e}"
    if c.layers is not None:
        s += f"-L{c.layers}"
    if c.width is not None:
        s += f"-w{c.width}"
    if c.warmup is not None:
        s += f"-wu{c.warmup}"
    if c.is_finetune:
        s += f"-ft{c.ft_steps}-eps{_eps_text(c.ft_eps)}-{c.ft_precision}"
    return s


def from_dict(d: dict) -> RunConfig:
    names = {f.name for f in fields(RunConfig)}
    return RunConfig(**{k: v for k, v in d.items() if k in names})
