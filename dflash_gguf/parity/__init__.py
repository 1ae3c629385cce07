"""parity: the torch reference vs GGUF drafters/targets; logit parity and acceptance."""
from .run import (  # noqa: F401  (the package's public API)
    DUMP_VERSION, EMULATIONS, LLAMA_CPP_DRAFT_CONTEXT, ParityFailure, ParityOptions, ParityReport,
    PromptReport, RunSummary, Stat, compare_dumps, emulated_config, logit_parity,
    quantize_target_weights, read_prompts_file, run_parity, tokenize,
)
