"""BitNet checkpoints (convert/prequant_bitnet.py): ternary weights packed four to a byte with an
inverted per-tensor scale, dequantized in place as llama.cpp's converter's ``dequant_bitnet`` does
(byte for byte against the vendored converter), and malformed ones refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.errors import WeightsError

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.convert.prequant_ckpt import (  # noqa: E402
    SOURCE, assert_converts_like_mainline, bitnet, shard,
)

TARGET_DIR = Path(__file__).parents[2] / "fixtures" / "targets" / "qwen3-tiny"


def test_dequantize_is_mainlines_dequant_bitnet(tmp_path):
    from dflash_gguf.config import load_config
    from dflash_gguf.convert.prequant import dequantize, split
    from dflash_gguf.fileio.safetensors import read_inventory

    d = bitnet(tmp_path / "b", scale_dtype=torch.bfloat16)
    inv = {t.name: t for t in read_inventory(d)}
    pre = split(load_config(d).quantization, inv, "x")
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    n = "layers.0.mlp.down_proj.weight"
    w, s = state[n].view(torch.uint8), state[n + "_scale"]
    # mainline's dequant_bitnet, restated
    shift = torch.tensor([0, 2, 4, 6], dtype=torch.uint8).reshape((4, 1, 1))
    data = ((w.unsqueeze(0).expand((4, *w.shape)) >> shift) & 3).float().sub(1).reshape((w.shape[0] * 4, w.shape[1]))
    want = (data / s.float()).numpy()
    got = dequantize(inv[n], pre.weights[n])
    assert got.dtype == np.float32 and got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    assert pre.replaced[n].shape == (w.shape[0] * 4, w.shape[1]) and n + "_scale" in pre.consumed


@pytest.mark.parametrize("fault, words", [
    ("orphan scale", "has no weight"),
    ("float weight", "is BF16"),
    ("bad scale shape", "does not broadcast"),
])
def test_malformed_bitnet_is_refused_in_one_line(tmp_path, cli, fault, words):
    d = bitnet(tmp_path / "b")
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    n = "layers.0.mlp.up_proj.weight"
    if fault == "orphan scale":
        del state[n]
    elif fault == "float weight":
        state[n] = torch.zeros(state[n].shape, dtype=torch.bfloat16)
    else:
        state[n + "_scale"] = torch.ones(3, 5)
    safetensors_torch.save_file(state, str(d / "model.safetensors"))
    out = tmp_path / "o.gguf"
    code, _, err = cli("convert", d, "--target-dir", TARGET_DIR, "-o", out)
    assert code == WeightsError.exit_code and words in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def _cases(tmp: Path):
    plain = bitnet(tmp / "bitnet")
    return [("bitnet-auto", plain, ("--outtype", "auto")),
            ("bitnet-f16", plain, ("--outtype", "f16")),
            ("bitnet-kept-bf16-scale", bitnet(tmp / "kept", keep=("fc.weight",), scale_dtype=torch.bfloat16),
             ("--outtype", "auto")),
            ("bitnet-sharded", shard(plain, tmp / "sharded", ("fc.", "hidden_norm", "layers.0.")), ("--outtype", "auto"))]


@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """Each case converted by the vendored mainline converter with --no-lazy: in its default lazy
    mode, dequant_bitnet mixes a CPU tensor into meta tensors and the converter fails (the lazy
    run of the first case shows it)."""
    from tests.convert.test_llamacpp_ground_truth import llama_src, spm_target
    from tests.llamacpp_converter import ConverterRun, log_tail, run_jobs

    tmp = tmp_path_factory.mktemp("prequant-bitnet")
    target = spm_target(tmp, json.loads((SOURCE / "config.json").read_text())["num_target_layers"])
    cases = _cases(tmp)
    runs = [ConverterRun((str(d), "--target-model-dir", str(target), "--outfile", str(tmp / f"{k}.ref.gguf"), *args,
                          "--no-lazy"), tmp / f"{k}.log") for k, d, args in cases]
    lazy = ConverterRun((str(cases[0][1]), "--target-model-dir", str(target), "--outfile", str(tmp / "lazy.gguf")),
                        tmp / "lazy.log")
    codes = run_jobs([*runs, lazy], llama_src(), parallel=2)
    refs = {k: (d, args, tmp / f"{k}.ref.gguf", code, log_tail(run)) for (k, d, args), run, code
            in zip(cases, runs, codes)}
    return refs, target, (codes[-1], log_tail(lazy))


# case -> (general.file_type, tensor types): mainline guesses auto from the stored tensors, before
# dequantization (U8 weights and F32 scales do not count): F16 with nothing else, BF16 with fc kept
EXPECTED = {
    "bitnet-auto": (1, {"F16": 15, "F32": 10}),
    "bitnet-f16": (1, {"F16": 15, "F32": 10}),
    "bitnet-kept-bf16-scale": (32, {"BF16": 15, "F32": 10}),
    "bitnet-sharded": (1, {"F16": 15, "F32": 10}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EXPECTED))
def test_matches_llama_cpp_converter_byte_for_byte(mainline, cli, tmp_path, case):
    ours, types = assert_converts_like_mainline(cli, tmp_path, mainline[:2], case, load=True)
    assert types == EXPECTED[case]


@pytest.mark.slow
def test_mainlines_default_lazy_mode_fails_on_bitnet(mainline):
    """Why the references run with --no-lazy: by default the vendored converter stops on BitNet."""
    code, log = mainline[2]
    assert code != 0 and "is not on the expected device meta" in log
