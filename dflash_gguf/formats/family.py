"""The one seam through which a drafter family changes how a GGUF is read and checked.

The shared rules (``Format``: names, keys, required tensors) describe a DFlash1 / DFlash2
drafter. A family whose files carry more (DSpark: ``markov_w1.weight``, ``d2t``, Gemma4's own
layer names) is one ``FileFamily`` subclass in its own module, chosen in
``formats.file_family``; ``check`` and ``inspect`` ask the family, never the family's module.
The conversion side of the same family is ``convert.family.PlanExtension``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    from .meta import Format


class FileFamily:
    """A plain DFlash drafter file: the shared rules decide everything."""

    name = "dflash"

    def claims_tensor(self, fmt: "Format", gguf_name: str) -> bool:
        """A tensor the shared tables do not know but this family's files legitimately carry."""
        return False

    def optional_tensor(self, fmt: "Format", gguf_name: str, tensor_names: Iterable[str]) -> bool:
        """A tensor the shared rules require that this family's files may leave out."""
        return False

    def summary(self, kvs: Mapping, tensors: Mapping[str, tuple[int, ...]], arch: str) -> dict | None:
        """What ``inspect`` reports about the family's own parts (None: nothing to add)."""
        return None

    def required_hparams(self, fmt: "Format") -> tuple[str, ...]:
        """``<arch>.`` suffixes the loader reads without a default."""
        return fmt.required_hparams

    def required_tensors(self, fmt: "Format", n_layers: int) -> list[str]:
        """GGUF names the loader needs for an ``n_layers`` drafter."""
        return fmt.required_tensors(n_layers)

    def problems(self, kvs: Mapping, arch: str) -> list[tuple[str, str]]:
        """(key, why) for each value the loader refuses outright."""
        return []

    # mainline writes no <arch>.sample_from_anchor for this family's DSpark files: the runtime's
    # default (sample the anchor slot) is the one its drafts are trained for
    anchor_default_is_right = False
    # every layer attends over the sliding window (no per-layer pattern to write or check)
    all_layers_swa = False


DFLASH = FileFamily()
