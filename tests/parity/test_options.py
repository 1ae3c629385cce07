"""ParityOptions refuses flag values that would size buffers absurdly or mean nothing (exit 2)."""
import math

import pytest

from dflash_gguf.errors import UsageError
from dflash_gguf.parity.options import ParityOptions


@pytest.mark.parametrize("kw, flag", [
    (dict(block_size=2**31 - 1), "--block-size"), (dict(block_size=1), "--block-size"),
    (dict(max_new_tokens=0), "--max-new-tokens"), (dict(runs=0), "--runs"), (dict(jobs=-1), "--jobs"),
    (dict(top_k=-1), "--top-k"), (dict(temperature=math.nan), "--temperature"),
    (dict(temperature=-0.5), "--temperature"), (dict(top_p=0.0), "--top-p"), (dict(top_p=math.inf), "--top-p"),
    (dict(draft_context=0), "--draft-context"),
])
def test_out_of_range_values_are_usage_errors(kw, flag):
    with pytest.raises(UsageError, match=f"^{flag} .*: out of range"):
        ParityOptions(**kw)


def test_the_defaults_and_real_values_are_accepted():
    ParityOptions()
    ParityOptions(block_size=16, max_new_tokens=4096, runs=5, temperature=0.8, top_p=0.95, top_k=20, draft_context=512)
