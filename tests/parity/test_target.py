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


@pytest.mark.slow
def test_a_device_mapped_transformers_target_gives_the_same_report(cli, tmp_path):
    """--device-map auto: accelerate places the target (here every layer on the CPU, the only
    device) and the loop runs it exactly as the unplaced model."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    plain = parity(cli, tmp_path, "--target-backend", "transformers", n=12)[1]
    code, mapped, _, se = parity(cli, tmp_path, "--target-backend", "transformers", "--device-map", "auto", n=12)
    assert code == 0, se
    assert mapped["reference"]["new_ids"] == plain["reference"]["new_ids"]
    assert mapped["reference"]["acceptance_lengths"] == plain["reference"]["acceptance_lengths"]
    assert mapped["settings"]["device_map"] == "auto"


@pytest.mark.parametrize("args, says", [
    (("--device-map", "auto"), "--device-map auto: it places a transformers target; add --target-backend transformers"),
    (("--target-backend", "transformers", "--device-map", "everywhere"), "--device-map 'everywhere': choose auto,"),
])
def test_device_map_values_are_checked_first(cli, tmp_path, args, says):
    code, _, _, se = parity(cli, tmp_path, *args, n=4)
    assert code == 2 and says in se and len(se.strip().splitlines()) == 1


def test_a_missing_accelerate_names_the_extra(monkeypatch):
    import builtins

    from dflash_gguf.errors import UsageError
    from dflash_gguf.reference.hf_target import load_hf_target

    pytest.importorskip("transformers")
    real = builtins.__import__

    def no_accelerate(name, *a, **k):
        if name == "accelerate":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_accelerate)
    with pytest.raises(UsageError, match=r"--device-map auto needs the 'accelerate' package: pip install 'dflash-gguf\[hf\]'"):
        load_hf_target(TARGETS / "llama-tiny", device_map="auto")
