"""GGUF → checkpoint-named float32 weights + the config the file implies (used by parity)."""
import numpy as np
import pytest
from safetensors.torch import load_file

from dflash_gguf.config import load_config
from dflash_gguf.formats import FORMATS
from dflash_gguf.reference.from_gguf import drafter_from_gguf, target_from_gguf, unpermute_rope

from tests.conftest import DRAFTERS, TARGETS

FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "rms_norm_eps", "rope_theta", "mask_token_id", "target_layer_ids", "block_size",
          "sliding_window", "swa_pattern", "is_causal", "final_logit_softcapping", "output_multiplier",
          "input_embedding_scale", "is_dflash2", "conv_kernel_size", "selector_rank", "vocab_size",
          "max_position_embeddings")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("drafter,target", [("qwen3-nested", ("--target-dir", TARGETS / "qwen3-tiny")),
                                            ("gemma-style", ("--target-gguf", TARGETS / "llama-tiny.gguf")),
                                            ("qwen3-dflash2", ("--target-dir", TARGETS / "qwen3-tiny"))])
def test_drafter_config_and_weights_round_trip(cli, tmp_path, drafter, target, fmt):
    out = tmp_path / "d.gguf"
    code, _, se = cli("convert", DRAFTERS / drafter, "--format", fmt, "-o", out, *target)
    if drafter == "qwen3-dflash2" and fmt != "llama.cpp":
        assert code == 2
        return
    assert code == 0, se
    cfg, weights, name = drafter_from_gguf(out)
    assert name == fmt
    ref = load_config(DRAFTERS / drafter)
    for f in FIELDS:
        got, want = getattr(cfg, f), getattr(ref, f)
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, f
    src = {k: v.float().numpy() for k, v in load_file(DRAFTERS / drafter / "model.safetensors").items()}
    assert set(weights) == set(src)
    for k in src:
        assert np.array_equal(weights[k], src[k]), k


def test_quantized_drafter_dequantizes_close(cli, tmp_path):
    out = tmp_path / "q.gguf"
    assert cli("convert", DRAFTERS / "qwen3-flat", "--format", "lucebox", "--outtype", "q8_0", "-o", out)[0] == 0
    _, weights, _ = drafter_from_gguf(out)
    src = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")
    w, r = weights["fc.weight"], src["fc.weight"].float().numpy()
    assert not np.array_equal(w, r)
    assert np.abs(w - r).max() < 0.01 * np.abs(r).max()


def test_llama_target_gguf_unpermutes_q_and_k():
    tc, w = target_from_gguf(TARGETS / "llama-tiny.gguf")
    ref = load_file(TARGETS / "llama-tiny" / "model.safetensors")
    assert tc.model_type == "llama" and tc.num_hidden_layers == 3 and tc.tie_word_embeddings
    for k, v in ref.items():
        assert np.array_equal(w[k], v.float().numpy()), k
    x = np.arange(4 * 8 * 3, dtype=np.float32).reshape(32, 3)
    permuted = x.reshape(4, 2, 4, 3).swapaxes(1, 2).reshape(32, 3)
    assert np.array_equal(unpermute_rope(permuted, 4), x)


def test_not_a_target(cli, tmp_path):
    from dflash_gguf.errors import GGUFFormatError

    out = tmp_path / "d.gguf"
    assert cli("convert", DRAFTERS / "qwen3-flat", "--format", "lucebox", "-o", out)[0] == 0
    with pytest.raises(GGUFFormatError, match="not a supported reference target"):
        target_from_gguf(out)
