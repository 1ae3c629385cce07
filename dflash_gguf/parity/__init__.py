"""parity: the torch reference vs GGUF drafters/targets; logit parity and acceptance.

One concern per module: ``run`` (run_parity), ``options``, ``report`` (summaries, mean ± sd,
JSON), ``logits`` (teacher-forced parity), ``target`` (loading, --target-quant), ``emulate``,
``dumps`` (--dump/--against), ``prompts`` (tokenization, prompts files).
"""
from .dumps import DUMP_VERSION, compare_dumps  # noqa: F401  (the package's public API)
from .emulate import EMULATIONS, LLAMA_CPP_DRAFT_CONTEXT, emulated_config  # noqa: F401
from .logits import logit_parity  # noqa: F401
from .options import ParityOptions  # noqa: F401
from .prompts import read_prompts_file, tokenize  # noqa: F401
from .report import ParityReport, PromptReport, RunSummary, Stat  # noqa: F401
from ..errors import ParityFailure  # noqa: F401  (raised by the CLI when the lossless check fails)
from .run import check_drafter_dir, require_torch, run_parity  # noqa: F401
from .target import quantize_target_weights  # noqa: F401
