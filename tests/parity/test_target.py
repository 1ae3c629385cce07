"""The target as parity loads it: HF dir, GGUF, or through transformers."""
import pytest

pytest.importorskip("torch")

from tests.conftest import TARGETS  # noqa: E402
from tests.parity.conftest import parity  # noqa: E402


def test_llama_target_gguf_and_gemma_style_drafter(cli, tmp_path):
    code, rep, _, se = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny.gguf", n=12)
    assert code == 0, se
    assert rep["reference"]["lossless"] is True


def test_same_report_from_hf_target_and_its_gguf(cli, tmp_path):
    """llama-tiny as HF dir and as GGUF (Q/K permuted by llama.cpp's convention) decode alike."""
    a = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny", n=12)[1]
    b = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny.gguf", n=12)[1]
    assert a["reference"]["new_ids"] == b["reference"]["new_ids"]


@pytest.mark.slow
def test_transformers_backend_gives_the_same_report(cli, tmp_path):
    pytest.importorskip("transformers")
    native = parity(cli, tmp_path, n=12)[1]
    code, hf, _, se = parity(cli, tmp_path, "--target-backend", "transformers", n=12)
    assert code == 0, se
    assert hf["reference"]["new_ids"] == native["reference"]["new_ids"]
    assert hf["reference"]["acceptance_lengths"] == native["reference"]["acceptance_lengths"]
    code, _, _, se = parity(cli, tmp_path, "--target-backend", "transformers", target=TARGETS / "llama-tiny.gguf")
    assert code == 2 and "must be a Hugging Face directory" in se
