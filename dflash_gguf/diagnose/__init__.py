"""diagnose: where is acceptance lost — the converter, the quantization, the target or the runtime?

One prompt set (token ids) runs through a chain of stages, each changing one thing from the one
before (``report.STAGES``): the checkpoint with the full-precision target, each GGUF drafter,
the target quantized, the runtime's rules emulated, the real runtime. One concern per module:
``options`` (the settings and their checks), ``suites`` (bench's suites as prompt sets),
``target`` (stage 3's target: round-tripped or as served), ``stages`` (stages 1-4 through
``parity``), ``runtime`` (stage 5 through ``bench``), ``report`` (the numbers and the changes
between stages, JSON), ``verdict`` (the stage that loses, the recommendation), ``plots`` (PNGs).
"""
from .options import DiagnoseOptions, check_file_type  # noqa: F401
from .report import STAGES, DiagnoseReport, Lane, StageRun, StageValue  # noqa: F401
from .stages import run_diagnose, run_suites  # noqa: F401
from .suites import suite_prompts  # noqa: F401
from .verdict import Recommendation, Verdict  # noqa: F401
