"""The ``--outtype`` choices, apart from the planner so the CLI can list them in its help
without importing the converter."""

OUTTYPES = ("auto", "f32", "f16", "bf16", "q8_0", "q4_k_m")
