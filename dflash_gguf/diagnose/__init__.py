"""diagnose: where is acceptance lost — the converter, the quantization, the target or the runtime?

One prompt set (token ids) runs through a chain of stages, each changing one thing from the one
before (``report.STAGES``): the checkpoint with the full-precision target, each GGUF drafter,
the target quantized, the runtime's rules emulated, the real runtime. One concern per module:
``stages`` (running them through ``parity`` and ``bench``), ``report`` (the numbers, the changes
between stages, the verdict and the recommendation, JSON), ``plots`` (PNGs).
"""
from .report import STAGES, DiagnoseReport, Lane, Recommendation, StageRun, StageValue, Verdict  # noqa: F401
from .stages import DiagnoseOptions, check_file_type, run_diagnose  # noqa: F401
