"""What the verdict commands (check, check-instruct, compare-weights, parity, gate) report, in one
shape: ``Finding`` (a rule broken, where, with a stable fingerprint), the ``Envelope`` around a
command's result, and its renderings for CI systems (JSON, GitHub workflow commands, JUnit XML,
SARIF 2.1.0). The library renders to strings; ``cli/`` writes them."""
from .envelope import SCHEMA_VERSION, Envelope
from .findings import ERROR, INFO, SEVERITIES, WARNING, Finding

__all__ = ["ERROR", "INFO", "SEVERITIES", "SCHEMA_VERSION", "WARNING", "Envelope", "Finding"]
