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
    """A readable unique name, e.g. ``LayerNorm-pre-normal-eps1e-05-fp32-s0-n300``."""
    s = f"{c.norm}-{c.placement}-{c.init}-eps{_eps_text(c.eps)}-{c.precision}-s{c.seed}-n{c.steps}"
    if c.is_finetune:
        s += f"-ft{c.ft_steps}-eps{_eps_text(c.ft_eps)}-{c.ft_precision}"
    return s


def from_dict(d: dict) -> RunConfig:
    names = {f.name for f in fields(RunConfig)}
    return RunConfig(**{k: v for k, v in d.items() if k in names})
