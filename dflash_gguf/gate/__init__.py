"""``gate``: one verdict for a drafter release (checks, pairing, weights and constants, parity)."""
from .findings import GateFinding, GateReport, StageResult
from .policy import Policy, load_policy
from .run import GateInputs, run_gate

__all__ = ["GateFinding", "GateInputs", "GateReport", "Policy", "StageResult", "load_policy", "run_gate"]
