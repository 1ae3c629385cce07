"""convert/outtypes.py: the quantized outtypes are exactly quantize's file types (less the float
ones and COPY, which the converter's own outtypes are)."""
from dflash_gguf.convert.outtypes import FLOAT_OUTTYPES, QUANT_OUTTYPES
from dflash_gguf.quants.ftypes import FTYPE_IDS


def test_the_quantized_outtypes_are_quantizes_file_types():
    assert set(QUANT_OUTTYPES) == {t.lower() for t in FTYPE_IDS} - {"f32", "f16", "bf16", "copy"}
    assert set(FLOAT_OUTTYPES) == {"auto", "f32", "f16", "bf16"}
