"""``bench``: measure drafters in a real runtime (llama-server, or a running vLLM / SGLang
endpoint): acceptance as the server counted it, speed against a no-draft baseline, mean ± sd
over runs. One module per concern: ``server`` (launch and stop), ``client`` (HTTP per engine),
``trace`` (llama-server's per-step log), ``suites`` (prompts), ``memory`` (the guard), ``run``
(the matrix), ``report`` (numbers and JSON), ``plots`` (PNGs)."""
from .report import BenchReport, build_report  # noqa: F401
from .run import BenchOptions, BenchResult, run_bench  # noqa: F401
