"""``gate``: one verdict for a drafter release (checks, pairing, weights and constants, parity)."""
from .policy import Policy, load_policy
from .report import GateReport, StageResult
from .run import GateInputs, run_gate

__all__ = ["GateInputs", "GateReport", "Policy", "StageResult", "load_policy", "run_gate"]
