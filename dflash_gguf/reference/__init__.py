"""Torch reference of the DFlash / DSpark drafter, its target and the draft → verify loop.

Ground truth is z-lab's PyPI ``dflash`` 0.1.0 (``dflash/model.py``) on transformers 5.15; this
package reproduces it without needing ``transformers`` at run time. What z-lab does not define
(attention sinks, value scale, partial/interleaved RoPE, use_swa, DSpark's heads) follows vLLM
and mlx-dspark (``rules``, ``dspark``; docs/parity.md says which applies where). Importing it imports torch,
so the rest of dflash_gguf imports it lazily.
"""
from __future__ import annotations

from .drafter import DFlashDrafter
from .load import drafter_from_gguf, load_drafter, load_target, resolve_device, resolve_dtype, target_from_gguf
from .loop import GenerationResult, Step, Workspace, generate, greedy_decode
from .replay import StepInputs, StepLogits, TeacherForcedResult, step_inputs, teacher_forced
from .target import Target, TargetSpec

__all__ = [
    "DFlashDrafter", "Target", "TargetSpec", "load_drafter", "load_target", "drafter_from_gguf", "target_from_gguf",
    "resolve_device", "resolve_dtype",
    "generate", "greedy_decode", "teacher_forced", "step_inputs", "Workspace",
    "GenerationResult", "Step", "StepInputs", "StepLogits", "TeacherForcedResult",
]
