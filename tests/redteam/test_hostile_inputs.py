"""Hostile drafter and target inputs, as a user's shell would bring them: whole processes, each
asserting a documented exit code on one line, bounded memory and time, nothing of the user's
modified, no output and no temp file left behind.

* ``mask_embedding.pt`` (MiMo's side file) is a pickle: ``torch.load(weights_only=True)`` runs no
  code but hands back any plain containers it describes — a 2 kB "billion laughs" of lists that
  share themselves (formatting it never ends), tensors on the meta device, sparse, of the wrong
  dtype or shape, declared 2**31 long over one stored value, NaN.
* config.json values that size allocations (the target's vocab_size: the ``[PAD…]`` token list;
  layer counts; head dims; block sizes) are checked before anything is built from them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_gguf.errors import ConfigError, TargetError, WeightsError
from tests.conftest import FIXTURES
from tests.redteam.harness import assert_bounded, assert_one_line_error, fingerprint, leftovers, run_cli

DRAFTER = FIXTURES / "drafters" / "qwen3-flat"  # mask_token_id 500, hidden 64, 4 taps
TARGET_DIR = FIXTURES / "targets" / "qwen3-tiny"  # 5 layers, tied: its embedding table is the head
SPM_TARGET_DIR = FIXTURES / "targets" / "llama-tiny"
HIDDEN, MASK_ID = 64, 500
EXIT_CONFIG, EXIT_WEIGHTS, EXIT_TARGET = ConfigError.exit_code, WeightsError.exit_code, TargetError.exit_code
# torch's import alone is ~300 MiB of RSS; the mask-file bomb passed 1 GiB within 30 s before the fix
TORCH_RSS_MIB, TORCH_WALL_S = 900, 45


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*"))


def _mimo_drafter(tmp_path: Path, payload) -> Path:
    """qwen3-flat with a ``mask_embedding.pt`` holding ``payload`` (saved by torch.save)."""
    torch = pytest.importorskip("torch")
    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    torch.save(payload, d / "mask_embedding.pt")
    return d


def _laughs(depth: int = 40) -> list:
    """A list of 2**depth leaves in a few hundred pickle bytes: every level is the previous one twice."""
    a: list = []
    for _ in range(depth):
        a = [a, a]
    return a


def _payloads():
    torch = pytest.importorskip("torch")
    z = torch.zeros(HIDDEN)
    return {
        "laughs-as-file": (_laughs(), "expected a dict with mask_token_id and embedding"),
        "laughs-as-id": ({"mask_token_id": _laughs(), "embedding": z}, "mask_token_id is a list of 2 item(s)"),
        "laughs-as-embedding": ({"mask_token_id": MASK_ID, "embedding": _laughs()}, "embedding is a list"),
        "two-element-id": ({"mask_token_id": torch.tensor([MASK_ID, MASK_ID]), "embedding": z},
                           "expected one integer"),
        "meta-id": ({"mask_token_id": torch.zeros(1, device="meta"), "embedding": z}, "meta device"),
        "meta": ({"mask_token_id": MASK_ID, "embedding": torch.zeros(HIDDEN, device="meta")}, "meta device"),
        "sparse": ({"mask_token_id": MASK_ID, "embedding": z.to_sparse()}, "sparse_coo tensor"),
        "int-dtype": ({"mask_token_id": MASK_ID, "embedding": z.int()}, "dtype torch.int32"),
        "complex": ({"mask_token_id": MASK_ID, "embedding": z.to(torch.complex64)}, "dtype torch.complex64"),
        "wrong-shape": ({"mask_token_id": MASK_ID, "embedding": torch.zeros(2, HIDDEN)}, "expected [64]"),
        # 2**31 - 1 values declared over one stored float (stride 0): any data op would touch them all
        "huge-declared-shape": ({"mask_token_id": MASK_ID, "embedding": torch.zeros(1).expand(2**31 - 1)},
                                "shape [2147483647], expected [64]"),
        "nan": ({"mask_token_id": MASK_ID, "embedding": z.index_fill(0, torch.tensor([7]), float("nan"))},
                "value 7 is nan"),
        "inf": ({"mask_token_id": MASK_ID, "embedding": torch.full((HIDDEN,), float("-inf"))}, "NaN/inf"),
        "wrong-id": ({"mask_token_id": 7, "embedding": z}, "does not match dflash_config's 500"),
        "huge-id": ({"mask_token_id": 1 << 70, "embedding": z}, "not a token id"),
    }


# Whole processes for a representative few (each imports torch: ~3 s); every payload is also
# checked in-process against both loaders in tests/convert/test_mask_embedding.py.
MASK_CASES = ["laughs-as-file", "laughs-as-id", "laughs-as-embedding", "two-element-id", "meta", "sparse",
              "huge-declared-shape", "nan"]


def _convert(d: Path, out: Path, *extra) -> list:
    return ["convert", d, "--target-dir", TARGET_DIR, "-o", out, *extra]


def _parity(d: Path) -> list:
    return ["parity", "--target", TARGET_DIR, "--drafter", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
            "--device", "cpu"]


def _assert_refused(run, d: Path, before: dict, out: Path | None, code: int, needle: str) -> None:
    assert_one_line_error(run, code)
    assert needle in run.stderr, str(run)
    assert fingerprint(_files(d)) == before, "the drafter dir was modified"
    if out is not None:
        assert not out.exists() and leftovers(out.parent) == [], str(run)


@pytest.mark.parametrize("case", MASK_CASES)
def test_hostile_mask_embedding_convert(tmp_path, case):
    payload, needle = _payloads()[case]
    d = _mimo_drafter(tmp_path, payload)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "d.gguf"
    before = fingerprint(_files(d))
    run = run_cli(_convert(d, out), timeout=90)
    _assert_refused(run, d, before, out, EXIT_WEIGHTS, needle)
    assert "mask_embedding.pt" in run.stderr, str(run)
    assert_bounded(run, rss_mib=TORCH_RSS_MIB, wall_s=TORCH_WALL_S)


@pytest.mark.parametrize("case", ["laughs-as-id", "meta", "nan"])
def test_hostile_mask_embedding_parity(tmp_path, case):
    """parity's reference loads the side file too (``reference.load.read_mask_embedding``)."""
    payload, needle = _payloads()[case]
    d = _mimo_drafter(tmp_path, payload)
    before = fingerprint(_files(d))
    run = run_cli(_parity(d), timeout=90)
    _assert_refused(run, d, before, None, EXIT_WEIGHTS, needle)
    assert_bounded(run, rss_mib=TORCH_RSS_MIB, wall_s=TORCH_WALL_S)


def test_a_mask_file_too_large_to_be_one_is_not_read(tmp_path):
    """A sparse 64 MiB file is refused by its size, before torch reads a byte of it."""
    torch = pytest.importorskip("torch")
    d = _mimo_drafter(tmp_path, {"mask_token_id": MASK_ID, "embedding": torch.zeros(HIDDEN)})
    with open(d / "mask_embedding.pt", "r+b") as f:
        f.truncate(1 << 26)
    out = tmp_path / "d.gguf"
    before = fingerprint(_files(d))
    run = run_cli(_convert(d, out), timeout=90)
    _assert_refused(run, d, before, out, EXIT_WEIGHTS, "67,108,864 bytes is not a mask embedding")
    assert_bounded(run, rss_mib=TORCH_RSS_MIB, wall_s=TORCH_WALL_S)


def test_valid_mask_embeddings_still_convert(tmp_path):
    """The published layout (a bf16 vector), and what mainline's converter accepts besides: a
    float64 or non-contiguous vector, a one-element id tensor."""
    torch = pytest.importorskip("torch")
    for i, payload in enumerate([
        {"mask_token_id": MASK_ID, "embedding": torch.randn(HIDDEN).to(torch.bfloat16)},
        {"mask_token_id": torch.tensor([MASK_ID]), "embedding": torch.randn(2 * HIDDEN, dtype=torch.float64)[::2]},
    ]):
        d = _mimo_drafter(tmp_path / str(i), payload)
        out = tmp_path / f"{i}.gguf"
        run = run_cli(_convert(d, out), timeout=90)
        assert run.code == 0 and out.is_file(), str(run)


# --- config.json values that size allocations -------------------------------------------------

def _target(tmp_path: Path, src: Path = TARGET_DIR, **values) -> Path:
    t = tmp_path / "target"
    shutil.copytree(src, t)
    cfg = json.loads((t / "config.json").read_text())
    cfg.update(values)
    (t / "config.json").write_text(json.dumps(cfg))
    return t


@pytest.mark.parametrize("src,vocab", [(TARGET_DIR, 2**31 - 1), (TARGET_DIR, 10**7), (SPM_TARGET_DIR, 10**7)])
def test_target_vocab_size_far_past_its_tokenizer(tmp_path, src, vocab):
    """vocab_size sizes the ``[PAD{i}]`` list of a rebuilt vocabulary: unbounded, 2**31 - 1 would build it
    (MemoryError after 30 s and 6 GB; 10**7: ~1 GB). The drafter claims the same size, so the
    drafter-vs-target check (made first) passes and the tokenizer's own bound must hold."""
    pytest.importorskip("tokenizers" if src == TARGET_DIR else "sentencepiece")
    t = _target(tmp_path, src, vocab_size=vocab)
    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "vocab_size": vocab}))
    out = tmp_path / "d.gguf"
    before = fingerprint(_files(t))
    run = run_cli(["convert", d, "--target-dir", t, "-o", out], timeout=60, address_space_mib=3072)
    assert_one_line_error(run, EXIT_TARGET)
    assert f"config.json vocab_size is {vocab:,}" in run.stderr and "fix vocab_size" in run.stderr, str(run)
    assert fingerprint(_files(t)) == before and not out.exists()
    assert_bounded(run, rss_mib=400, wall_s=20)


def test_a_target_that_does_not_fit_the_drafter_is_refused_before_its_vocabulary_is_built(tmp_path):
    """The drafter's vocab_size differs from the target's: refused from the two configs alone."""
    pytest.importorskip("tokenizers")
    t = _target(tmp_path, vocab_size=2**31 - 1)
    run = run_cli(["convert", DRAFTER, "--target-dir", t, "-o", tmp_path / "d.gguf"], timeout=60, address_space_mib=3072)
    assert_one_line_error(run, EXIT_TARGET)
    assert "does not fit the target: vocab_size 512 (drafter) != 2147483647" in run.stderr, str(run)
    assert_bounded(run, rss_mib=400, wall_s=20)


def test_target_vocab_checked_against_the_drafter_before_its_tokenizer(tmp_path):
    """``load_target(..., drafter=cfg)``: a target whose config.json disagrees with the drafter's
    vocab_size is refused before its tokenizer is read (here: no tokenizer file at all)."""
    from dflash_gguf.config import load_config
    from dflash_gguf.target import load_target

    t = _target(tmp_path, vocab_size=600)
    (t / "tokenizer.json").unlink()
    with pytest.raises(TargetError, match=r"vocab_size 512 \(drafter\) != 600"):
        load_target(target_dir=t, drafter=load_config(DRAFTER))


def test_target_layer_count_is_bounded(tmp_path):
    """parity's reference target builds per-layer lists from num_hidden_layers: 2**31 - 1 was a
    16 GB list (killed by the OOM killer without a limit)."""
    pytest.importorskip("torch")
    t = _target(tmp_path, num_hidden_layers=2**31 - 1)
    run = run_cli(["parity", "--target", t, "--drafter", DRAFTER, "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                   "--device", "cpu"], timeout=90)
    assert_one_line_error(run, EXIT_CONFIG)
    assert "num_hidden_layers = 2147483647 is out of range" in run.stderr, str(run)
    assert_bounded(run, rss_mib=TORCH_RSS_MIB, wall_s=TORCH_WALL_S)


def test_drafter_sizes_no_model_can_have(tmp_path):
    """hidden_size 2**31 - 1: torch overflowed multiplying out the fused width (a RuntimeError
    traceback from parity)."""
    pytest.importorskip("torch")
    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"] = 2**31 - 1
    (d / "config.json").write_text(json.dumps(cfg))
    run = run_cli(_parity(d), timeout=90)
    assert_one_line_error(run, EXIT_CONFIG)
    assert "make no buildable model" in run.stderr, str(run)
    assert_bounded(run, rss_mib=TORCH_RSS_MIB, wall_s=TORCH_WALL_S)


@pytest.mark.parametrize("key,value,needle", [
    ("block_size", 2**31 - 1, "block_size=2147483647 is out of range (2..4,096)"),
    ("head_dim", 2**31 - 1, "head_dim = 2147483647 is out of range (1..65,536)"),
])
def test_drafter_sizes_are_bounded(tmp_path, key, value, needle):
    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg[key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    run = run_cli(["convert", d, "--format", "lucebox", "--dry-run"], timeout=60, address_space_mib=2048)
    assert_one_line_error(run, EXIT_CONFIG)
    assert needle in run.stderr, str(run)
    assert_bounded(run, rss_mib=300, wall_s=20)


def test_gemma4_dspark_layer_count_is_not_multiplied_out(tmp_path):
    """Mainline's "uniform full_attention layer types" check, as ours wrote it, built
    ``["full_attention"] * num_hidden_layers`` (16 GB for 2**31 - 1) before comparing."""
    from tests.convert.published import sparse_checkpoint

    d = tmp_path / "gemma4"
    sparse_checkpoint("deepseek-dspark-gemma4-12b-block7", d, side_files=False)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 2**31 - 1
    (d / "config.json").write_text(json.dumps(cfg))
    run = run_cli(["convert", d, "--format", "lucebox", "--dry-run"], timeout=60, address_space_mib=2048)
    assert_one_line_error(run, EXIT_CONFIG)
    assert "uniform full_attention layer types" in run.stderr, str(run)
    assert_bounded(run, rss_mib=300, wall_s=20)
