"""Teacher-forced logit parity: an exact GGUF scores 0, a corrupted one is flagged."""
import pytest

pytest.importorskip("torch")

from tests.conftest import rewrite_gguf  # noqa: E402
from tests.parity.conftest import gguf_of, parity  # noqa: E402


def test_bf16_gguf_is_exact_and_corrupted_gguf_is_flagged(cli, tmp_path):
    good = gguf_of(cli, tmp_path, outtype="auto", name="good.gguf")
    # corrupt: negate the final norm (what a sign bug in a converter would do)
    bad = rewrite_gguf(good, tmp_path / "bad.gguf", data={"output_norm.weight": lambda a: -a})
    code, rep, so, se = parity(cli, tmp_path, "--drafter-gguf", good, "--drafter-gguf", bad)
    assert code == 0, se  # still lossless: the target verifies every token
    exact, corrupt = rep["drafters"]
    assert exact["logit_parity"]["max_abs"] == 0.0 and exact["logit_parity"]["top1_agreement"] == 1.0
    assert corrupt["logit_parity"]["top1_agreement"] < 0.9
    assert corrupt["logit_parity"]["first_divergence"] is not None
    assert "FLAGGED" in so and "bad.gguf" in se
