"""formats/legacy_dspark.py and its migration through retarget: a legacy DSpark GGUF (the fork's
``dspark`` layout) becomes the file our own mainline conversion of the same checkpoint is,
byte for byte, and real llama.cpp loads it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.convert import retarget
from dflash_gguf.convert.describe import inspect_gguf
from dflash_gguf.errors import GGUFFormatError, TargetError, UsageError
from dflash_gguf.fileio.gguf_constants import GGUFValueType as T
from dflash_gguf.fileio.gguf_reader import read_gguf
from dflash_gguf.formats.legacy_dspark import (KEY_RENAMES, SHARED_TENSORS, TENSOR_RENAMES, is_legacy_dspark,
                                               migrate_header)
from tests.conftest import FIXTURES
from tests.formats.legacy_dspark_files import DONOR, llama_cpp_available, mainline_drafter, to_legacy


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy-dspark")
    mainline = mainline_drafter(root)
    return {"root": root, "mainline": mainline, "legacy": to_legacy(mainline, root / "legacy.gguf")}


def _kvs(path: Path) -> list[tuple]:
    return [(kv.key, kv.type, kv.sub_type, tuple(kv.value) if kv.type == T.ARRAY else kv.value)
            for kv in read_gguf(path).kvs.values()]


def _tensors(path: Path) -> dict[str, tuple]:
    f = read_gguf(path)
    with open(path, "rb") as fh:
        def data(t):
            fh.seek(t.offset_abs)
            return fh.read(t.nbytes)
        return {t.name: (t.shape, t.ggml_type, data(t)) for t in f.tensors}


def test_a_legacy_file_is_recognised_by_its_architecture(files):
    f = read_gguf(files["legacy"])
    assert is_legacy_dspark(f.arch) and not is_legacy_dspark(read_gguf(files["mainline"]).arch)
    info = inspect_gguf(files["legacy"])
    assert info.format is None and info.problem is None
    assert info.legacy_dspark == "dflash-gguf retarget legacy.gguf --target-gguf DONOR.gguf -o OUT.gguf"
    assert info.taps_zlab == info.taps_stored == (0, 1, 2)  # legacy files store the z-lab ids
    assert info.to_json()["legacy_dspark"] == {"migrate": info.legacy_dspark}


def test_the_header_is_respelled_by_the_mapping(files):
    f = read_gguf(files["legacy"])
    mig = migrate_header(f.kvs, f.shapes(), files["legacy"])
    assert mig.kvs["general.architecture"].value == "dflash"
    assert list(mig.kvs["dflash.target_layers"].value) == [1, 2, 3]  # taps +1
    assert mig.kvs["tokenizer.ggml.mask_token_id"].value == 500
    assert mig.kvs["dflash.block_size"].value == 7 and mig.kvs["dflash.embedding_length"].value == 64
    assert mig.kvs["dflash.sample_from_anchor"].value is True and mig.kvs["dflash.has_confidence_head"].value is True
    assert not any(k.startswith("dspark.") or k == "tokenizer.ggml.model" for k in mig.kvs)
    assert not any(k.removeprefix("dflash.") in ("markov_rank", "confidence_head", "vocab_size") for k in mig.kvs)
    assert {mig.renames[a] for a in TENSOR_RENAMES} == set(TENSOR_RENAMES.values())
    assert mig.renames["blk.0.attn_q.weight"] == "blk.0.attn_q.weight" and mig.vocab_size == 512
    assert KEY_RENAMES["target_layers"] == "dflash.target_layers"


def test_other_dspark_keys_keep_their_values_under_dflash(files, tmp_path):
    odd = to_legacy(files["mainline"], tmp_path / "odd.gguf", add={
        "dspark.dspark.sample_from_anchor": (False, T.BOOL, None), "dspark.dspark.future_key": (3, T.UINT32, None)})
    f = read_gguf(odd)
    mig = migrate_header(f.kvs, f.shapes(), odd)
    assert mig.kvs["dflash.sample_from_anchor"].value is False and mig.kvs["dflash.future_key"].value == 3


def test_retarget_writes_our_own_mainline_conversion_byte_for_byte(files, tmp_path):
    out = tmp_path / "migrated.gguf"
    r = retarget(files["legacy"], out, format="llama.cpp", target_gguf=DONOR, drop_shared=True)
    assert r.source_format == "legacy-dspark" and r.arch == "dflash" and r.dropped == SHARED_TENSORS
    assert _kvs(out) == _kvs(files["mainline"])  # every key, type and value, in order
    assert _tensors(out) == _tensors(files["mainline"])  # every tensor: name, shape, type, bytes
    assert out.read_bytes() == files["mainline"].read_bytes()


def test_without_drop_shared_tensors_the_shared_tensors_are_kept_unchanged(files, tmp_path):
    out = tmp_path / "kept.gguf"
    r = retarget(files["legacy"], out, format="llama.cpp", target_gguf=DONOR)
    assert r.dropped == ()
    ours, mainline, legacy = _tensors(out), _tensors(files["mainline"]), _tensors(files["legacy"])
    assert set(ours) - set(mainline) == set(SHARED_TENSORS) and set(mainline) <= set(ours)
    for name in SHARED_TENSORS:
        assert ours[name] == legacy[name]
    assert _kvs(out) == _kvs(files["mainline"])


def test_a_legacy_file_without_a_donor_is_refused_naming_the_option(files, tmp_path):
    with pytest.raises(UsageError, match="--target-gguf DONOR.gguf") as e:
        retarget(files["legacy"], tmp_path / "x.gguf", format="llama.cpp")
    assert "\n" not in str(e.value) and not (tmp_path / "x.gguf").exists()


def test_a_donor_of_another_vocabulary_is_refused(files, tmp_path):
    with pytest.raises(TargetError, match="drafter vocab 512 != target vocab 32") as e:
        retarget(files["legacy"], tmp_path / "x.gguf", format="llama.cpp",
                 target_gguf=FIXTURES / "guards" / "qwen3-8b.gguf")
    assert "\n" not in str(e.value)


def test_only_mainline_can_take_a_legacy_file(files, tmp_path):
    with pytest.raises(UsageError, match="use --format llama.cpp"):
        retarget(files["legacy"], tmp_path / "x.gguf", format="dflash-draft", target_gguf=DONOR)
    with pytest.raises(UsageError, match="--drop-shared-tensors is for --format llama.cpp"):
        retarget(files["legacy"], tmp_path / "x.gguf", format="dflash-draft", target_gguf=DONOR, drop_shared=True)


def test_log_snr_conditioning_has_no_mainline_file(files, tmp_path):
    snr = to_legacy(files["mainline"], tmp_path / "snr.gguf",
                    add_tensors={"dspark.log_snr_fc1.weight": np.zeros((64, 8), np.float32)})
    with pytest.raises(GGUFFormatError, match="log-SNR conditioning, which mainline llama.cpp does not implement"):
        retarget(snr, tmp_path / "x.gguf", format="llama.cpp", target_gguf=DONOR)
    flag = to_legacy(files["mainline"], tmp_path / "flag.gguf",
                     add={"dspark.dspark.log_snr_conditioning": (True, T.BOOL, None)})
    with pytest.raises(GGUFFormatError, match="log_snr_conditioning = true"):
        retarget(flag, tmp_path / "x.gguf", format="llama.cpp", target_gguf=DONOR)


def test_an_unmapped_legacy_tensor_is_refused(files, tmp_path):
    odd = to_legacy(files["mainline"], tmp_path / "odd.gguf", add_tensors={"dspark.mystery.weight": np.zeros(4, np.float32)})
    with pytest.raises(GGUFFormatError, match="not in the legacy DSpark mapping"):
        retarget(odd, tmp_path / "x.gguf", format="llama.cpp", target_gguf=DONOR)


def test_drop_shared_tensors_keeps_a_reduced_vocabulary_head(dspark, tmp_path):
    with pytest.raises(UsageError, match="reduced-vocabulary drafter"):
        retarget(dspark["gguf"]["qwen3-reduced"], tmp_path / "x.gguf", format="llama.cpp", drop_shared=True)


@pytest.mark.skipif(not llama_cpp_available(), reason="real llama.cpp not available (LLAMA_CPP_LIB_PATH, llama-cpp-python)")
def test_real_llama_cpp_loads_the_migrated_file_and_not_the_legacy_one(files, tmp_path):
    from tests.convert.llamacpp_reference import llama_load

    dropped, kept = tmp_path / "dropped.gguf", tmp_path / "kept.gguf"
    retarget(files["legacy"], dropped, format="llama.cpp", target_gguf=DONOR, drop_shared=True)
    retarget(files["legacy"], kept, format="llama.cpp", target_gguf=DONOR)
    assert llama_load(files["legacy"]) == "FAILED"  # unknown model architecture: 'dspark'
    assert llama_load(dropped) == "LOADED"
    assert llama_load(kept) == "LOADED"
    assert llama_load(dropped, cheap=False) == "LOADED"  # and with its tensor data read
