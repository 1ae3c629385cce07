"""The ``--outtype`` choices, apart from the planner so the CLI can list them in its help
without importing the converter. ``auto``/``f32``/``f16``/``bf16`` are the converter's own (norms and
1-D tensors stay F32, as mainline's converter writes them); every other llama-quantize file type
means "convert with auto, then quantize" (quants/layout.py): the same bytes as the two steps."""

FLOAT_OUTTYPES = ("auto", "f32", "f16", "bf16")
# quants/ftypes.py FTYPE_IDS, less the float files and COPY (which the converter's own outtypes are)
QUANT_OUTTYPES = ("q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0", "q4_k_m", "q4_k_s", "q4_1", "q4_0",
                  "q3_k_l", "q3_k_m", "q3_k_s", "q2_k", "iq4_xs", "iq4_nl")
OUTTYPES = FLOAT_OUTTYPES + QUANT_OUTTYPES
