"""The one seam through which a drafter family changes a conversion plan.

``build_plan`` applies the shared DFlash rules and asks the family's ``PlanExtension`` at five
points: which tensors it expects, what it does with a tensor the shared rules do not know, the
GGUF name of a tensor, the keys it adds, and the tensors it generates. This base class is the
plain DFlash1 / DFlash2 drafter: it changes nothing. A family (DSpark: ``convert/dspark.py``) is
one subclass, chosen in ``plan.plan_extension``; compare-weights reads the same answers through the
plan, so a family's pairing rules need no second home.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..fileio.safetensors import SourceTensor
from ..formats import Format
from ..formats.meta import DrafterMeta

if TYPE_CHECKING:
    import numpy as np

    from ..fileio.gguf_constants import GGMLQuantizationType

# A tensor with no checkpoint source of its own: (GGUF name, data, source dtype, ggml type, why)
Generated = tuple[str, "np.ndarray", str, "GGMLQuantizationType", str]


@dataclass
class PlanExtension:
    """What a family adds to the shared plan (checkpoint names without ``model.``)."""

    expected: dict[str, tuple[int, ...]]  # every required tensor and its shape
    by_name: dict[str, SourceTensor]  # the inventory, under the names the family reads them by
    optional: dict[str, tuple[int, ...]] = field(default_factory=dict)  # kept when present, with their shapes
    claimed: dict[str, str] = field(default_factory=dict)  # dropped by the family: name -> why

    def classify(self, name: str) -> str | None:
        """A checkpoint tensor outside ``expected``: "written" (from data the family prepared),
        "dropped" (reported with ``claimed[name]``), "optional", or None (the shared rules decide)."""
        if name in self.claimed:
            return "dropped"
        return "optional" if name in self.optional else None

    def gguf_name(self, fmt: Format, name: str) -> str | None:
        return fmt.gguf_name(name)

    def apply(self, meta: DrafterMeta) -> None:
        """Add or override the family's keys in ``meta``."""

    def generated(self) -> tuple[list[Generated], list[Generated]]:
        """(tensors written before the checkpoint's, tensors written after them)."""
        return [], []

    def written_from(self, gguf_name: str) -> str | None:
        """The checkpoint tensor a generated tensor is computed from (compare-weights pairs
        them), or None when it comes from config.json alone."""
        return None
