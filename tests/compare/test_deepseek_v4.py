"""compare-weights on a DeepSeek-V4 checkpoint's DSpark draft (compare/deepseek_v4.py): every
GGUF tensor paired with its source through convert's own plan, FP8 weights dequantized against
the GGUF's Q8_0, the stacked MXFP4 experts compared as blocks (byte for byte), the keys convert
writes compared with the file's; our conversion compares back bit for bit and a tampered weight,
key or tensor fails."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dflash_gguf.compare import compare_weights
from dflash_gguf.errors import EXIT_MISMATCH

from tests.conftest import TARGETS, rewrite_gguf

pytest.importorskip("torch")
pytest.importorskip("safetensors")
from tests.convert.dsv4_ckpt import write_dsv4_checkpoint  # noqa: E402

TARGET = TARGETS / "llama-tiny.gguf"  # any target GGUF: only its tokenizer keys go into the file
Q8 = "blk.1.attn_q_b.weight"  # an FP8 weight, written Q8_0
MX = "blk.2.ffn_up_exps.weight"  # a stage's routed experts, repacked into MXFP4
N_TENSORS = 81  # 3 stages × 24 tensors + 9 of the draft's own (dsv4_ckpt's table, as converted)


@pytest.fixture(scope="module")
def dsv4(tmp_path_factory):
    """The tiny checkpoint and our conversion of it."""
    from dflash_gguf.convert import convert

    tmp = tmp_path_factory.mktemp("dsv4-compare")
    ckpt = write_dsv4_checkpoint(tmp / "DeepSeek-V4-Tiny-DSpark")
    out = tmp / "draft.gguf"
    convert(ckpt, out, target_gguf=TARGET)
    return ckpt, out


def _tamper(src, dst, name: str, at: int, xor: int = 0x5A):
    """A copy of ``src`` with byte ``at`` of tensor ``name``'s data flipped (``xor``)."""
    from dflash_gguf.fileio.gguf_header import read_header

    shutil.copyfile(src, dst)
    e = next(t for t in read_header(dst).tensors if t.name == name)
    with open(dst, "r+b") as f:
        f.seek(e.offset_abs + at)
        b = f.read(1)[0]
        f.seek(e.offset_abs + at)
        f.write(bytes([b ^ xor]))
    return dst


def test_our_conversion_compares_bit_identical(dsv4):
    ckpt, gguf = dsv4
    r = compare_weights(ckpt, gguf)
    assert r.passed, [(t.name, t.status, t.detail) for t in r.tensors if not t.passed]
    assert r.counts["bit-identical"] == len(r.tensors) == N_TENSORS
    rows = {t.name: t for t in r.tensors}
    assert (rows[Q8].source, rows[Q8].source_type, rows[Q8].type) == ("mtp.1.attn.wq_b.weight", "F8_E4M3", "Q8_0")
    assert rows[Q8].rel_rms > 0  # Q8_0 of the dequantized FP8 values: ggml's own error, nothing more
    mx = rows[MX]
    assert (mx.source, mx.source_type, mx.type) == ("mtp.2.ffn.experts.{0..3}.w3.weight", "F4_E2M1", "MXFP4")
    assert mx.shape == (4, 64, 256) and mx.rel_rms == 0
    assert rows["blk.0.attn_norm.weight"].source_type == "BF16" and rows["blk.0.attn_norm.weight"].type == "F32"
    assert any("25 FP8 weights are compared as convert dequantizes them" in n for n in r.notes), r.notes
    assert any("36 routed-expert FP4 tensors" in n and "9 stacked MXFP4" in n for n in r.notes), r.notes


def test_the_keys_convert_writes_are_compared(dsv4):
    ckpt, gguf = dsv4
    consts = {c.key: c for c in compare_weights(ckpt, gguf).constants}
    assert all(c.passed for c in consts.values()), [c.detail for c in consts.values() if not c.passed]
    for key, value in {"dflash.block_count": 3, "dflash.block_size": 5, "dflash.target_layers": [2, 3, 4],
                       "tokenizer.ggml.mask_token_id": 128799, "dflash.rope.freq_base": 10000.0,
                       "dflash.rope.scaling.factor": 16.0, "dflash.expert_count": 4,
                       "dflash.expert_used_count": 2, "dflash.hyper_connection.count": 2,
                       "dflash.hyper_connection.sinkhorn_iterations": 20}.items():
        theirs = consts[key].theirs if key in consts else None
        assert (list(theirs) if isinstance(theirs, (list, tuple)) else theirs) == value, (key, consts.get(key))
    assert consts["dflash.hyper_connection.count"].source == "config.hc_mult"
    assert consts["tokenizer.ggml.mask_token_id"].source == "config.dspark_noise_token_id"


def test_cli_passes_on_our_conversion(dsv4, cli):
    ckpt, gguf = dsv4
    code, so, se = cli("compare-weights", ckpt, gguf)
    assert code == 0, so + se
    assert f"{N_TENSORS} tensors: {N_TENSORS} bit-identical" in so


def test_a_tampered_q8_0_and_mxfp4_tensor_fail(dsv4, tmp_path, cli):
    ckpt, gguf = dsv4
    bad = _tamper(gguf, tmp_path / "bad.gguf", Q8, 2 + 5)  # a Q8_0 block's sixth quant
    bad = _tamper(bad, tmp_path / "bad2.gguf", MX, 17 * 40 + 3)  # the codes of an MXFP4 block
    r = compare_weights(ckpt, bad)
    failed = {t.name: t for t in r.tensors if not t.passed}
    assert sorted(failed) == sorted([Q8, MX]), [(t.name, t.detail) for t in failed.values()]
    assert "bad-blocks" in failed[Q8].flags
    assert failed[MX].status == "out" and "1 byte(s) differ from the checkpoint's MXFP4 blocks" in failed[MX].detail
    code, so, se = cli("compare-weights", ckpt, bad)
    assert code == EXIT_MISMATCH, so + se
    assert Q8 in so and MX in so


def test_one_changed_mxfp4_scale_byte_fails(dsv4, tmp_path):
    """An E8M0 scale one step off doubles a block: lossless means not a byte may differ."""
    ckpt, gguf = dsv4
    bad = _tamper(gguf, tmp_path / "bad.gguf", MX, 17 * 7, xor=0x01)
    failed = [t.name for t in compare_weights(ckpt, bad).tensors if not t.passed]
    assert failed == [MX]


def test_a_changed_key_and_a_dropped_tensor_fail(dsv4, tmp_path, cli):
    ckpt, gguf = dsv4
    bad = rewrite_gguf(gguf, tmp_path / "bad.gguf", values={"dflash.hyper_connection.sinkhorn_iterations": 10},
                       drop_tensors=("blk.0.attn_sinks.weight",))
    r = compare_weights(ckpt, bad)
    assert [(t.name, t.status) for t in r.tensors if not t.passed] == [("blk.0.attn_sinks.weight", "missing")]
    assert [(c.key, c.ours, c.theirs) for c in r.constants_differing] == [
        ("dflash.hyper_connection.sinkhorn_iterations", 20, 10)]
    code, so, se = cli("compare-weights", ckpt, bad)
    assert code == EXIT_MISMATCH and "dflash.hyper_connection.sinkhorn_iterations" in so, so + se
    assert cli("compare-weights", ckpt, bad, "--no-constants")[0] == EXIT_MISMATCH  # the missing tensor still


def test_another_checkpoints_draft_fails_everywhere(dsv4, tmp_path):
    """The same config with other weights: every weight fails, the keys still match."""
    _, gguf = dsv4
    other = write_dsv4_checkpoint(tmp_path / "other", seed=1)
    r = compare_weights(other, gguf)
    assert not r.passed and not r.constants_differing
    mx = next(t for t in r.tensors if t.name == MX)
    assert mx.status == "out" and mx.bytes_differing > 0


def test_same_type_checkpoint_blocks_must_be_byte_identical():
    """A checkpoint side already in the GGUF's block type (NVFP4, MXFP4: repacked, not encoded)
    passes only bit-identical; between two GGUFs the same type keeps its band."""
    from gguf import GGMLQuantizationType as Q

    from dflash_gguf.compare.engine import make_pair, run_pairs
    from dflash_gguf.compare.report import BIT_IDENTICAL, OUT, WITHIN, TensorComparison
    from dflash_gguf.compare.sides import Side

    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (8, 4, 17), dtype=np.uint8)
    blocks[..., 0] = rng.integers(118, 125, (8, 4))  # E8M0 scales around 2^-6
    bumped = blocks.copy()
    bumped[3, 2, 5] ^= 0x10  # one code of one value

    def side(x: np.ndarray) -> Side:
        flat = x.reshape(8, -1)
        return Side("w", (8, 128), Q.MXFP4, flat.nbytes, lambda r0, r1: flat[r0:r1].reshape(-1))

    def status(b: np.ndarray, checkpoint: bool) -> tuple[str, str]:
        row = TensorComparison("w", "w", "MXFP4", (8, 128), OUT)
        run_pairs([make_pair(row, side(blocks), side(b), {}, True, checkpoint)], 1, None)
        return row.status, row.detail

    assert status(blocks, True)[0] == BIT_IDENTICAL
    st, detail = status(bumped, True)
    assert st == OUT and "1 byte(s) differ" in detail
    assert status(bumped, False)[0] == WITHIN  # two GGUFs: MXFP4's band (no measured one: the fallback)


def test_the_experts_side_reads_any_rows_as_the_gguf_holds_them(dsv4):
    """Row ranges inside one expert, across experts and repeated (the repacked experts kept
    for the next chunk) read the GGUF tensor's bytes."""
    from dflash_gguf.compare.deepseek_v4 import experts_side, plan_for
    from dflash_gguf.compare.sides import Files
    from dflash_gguf.config.deepseek_v4 import parse_dsv4_dspark
    from dflash_gguf.fileio.gguf_reader import read_gguf
    from dflash_gguf.fileio.safetensors import read_inventory

    ckpt, gguf = dsv4
    cfg = parse_dsv4_dspark(json.loads((ckpt / "config.json").read_text()), ckpt / "config.json")
    inventory = read_inventory(ckpt, prefix="mtp.")
    f = read_gguf(gguf)
    plan = plan_for(cfg, inventory, f)
    by_name = {t.name: t for t in inventory}
    side = experts_side(MX, (4, 64, 256), [by_name[n] for n in plan.stacked[MX]])
    with Files() as files:
        want = files.gguf_side(f, next(e for e in f.tensors if e.name == MX))
        for r0, r1 in [(0, 256), (3, 9), (60, 70), (60, 70), (0, 1), (63, 193), (255, 256), (10, 10)]:
            assert np.array_equal(side.read(r0, r1), want.read(r0, r1)), (r0, r1)
    assert side.nbytes == want.nbytes == 4 * 64 * 256 // 32 * 17
