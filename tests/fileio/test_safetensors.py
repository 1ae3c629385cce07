import json
import os
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from dflash_gguf.errors import InputError, WeightsError
from dflash_gguf.fileio.safetensors import SourceTensor, iter_raw, read_header, read_inventory, read_raw, to_f32

from tests.conftest import BROKEN, DRAFTERS


def test_inventory_of_fixture():
    inv = read_inventory(DRAFTERS / "qwen3-flat")
    assert len(inv) == 11 * 2 + 3
    assert [t.name for t in inv] == sorted(t.name for t in inv)
    fc = next(t for t in inv if t.name == "fc.weight")
    assert fc.dtype == "BF16" and fc.shape == (64, 256)


def test_bf16_to_f32_is_exact():
    pytest.importorskip("torch", reason="torch's bf16 → f32 is the reference here")
    from safetensors.torch import load_file

    ref = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")["fc.weight"].float().numpy()
    t = next(t for t in read_inventory(DRAFTERS / "qwen3-flat") if t.name == "fc.weight")
    assert np.array_equal(to_f32(t), ref)


def test_truncated_file_names_tensor_and_offset():
    with pytest.raises(WeightsError, match=r"needs bytes up to [\d,]+ but the file ends at [\d,]+"):
        read_inventory(BROKEN / "truncated")


def raw_file(path, header: bytes, payload: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)
    return path


@pytest.mark.parametrize("blob,needle", [
    (b"\x01\x02", "too short"),
])
def test_too_short(tmp_path, blob, needle):
    p = tmp_path / "model.safetensors"
    p.write_bytes(blob)
    with pytest.raises(WeightsError, match=needle):
        read_header(p)


def test_bad_json_and_huge_length(tmp_path):
    with pytest.raises(WeightsError, match="not valid JSON"):
        read_header(raw_file(tmp_path / "a.safetensors", b"{not json}"))
    p = tmp_path / "b.safetensors"
    p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(WeightsError, match="exceeds"):
        read_header(p)
    p.write_bytes(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(WeightsError, match="header needs bytes up to 108"):
        read_header(p)


def test_span_and_gap_checks(tmp_path):
    h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}).encode()
    with pytest.raises(WeightsError, match="needs 8"):
        read_header(raw_file(tmp_path / "c.safetensors", h, b"\0" * 12))
    h = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}).encode()
    with pytest.raises(WeightsError, match="overlap or gap"):
        read_header(raw_file(tmp_path / "d.safetensors", h, b"\0" * 8))


def test_sharded_index(tmp_path):
    save_file({"a": np.ones(4, np.float32)}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({"b": np.arange(3, dtype=np.float32)}, tmp_path / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    inv = read_inventory(tmp_path)
    assert [t.name for t in inv] == ["a", "b"]
    assert read_raw(inv[1]).tolist() == [0, 1, 2]
    index["weight_map"]["c"] = "model-00003-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="not found"):
        read_inventory(tmp_path)


# --- header entries of the wrong type: each must be refused, not a TypeError or accepted ----------
def entry(**over):
    return {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], **over}}


@pytest.mark.parametrize("over,needle", [
    ({"dtype": ["BF16"]}, r"tensor a has unknown dtype \['BF16'\]"),  # was TypeError: unhashable type
    ({"dtype": {"F32": 1}}, "tensor a has unknown dtype {'F32': 1}"),
    ({"dtype": "bf16"}, "tensor a has unknown dtype 'bf16'"),
    ({"shape": 2}, "tensor a has shape 2; expected a list of non-negative integers"),
    ({"shape": [2.0]}, r"tensor a has shape \[2.0\]; expected"),
    ({"shape": ["2"]}, r"tensor a has shape \['2'\]; expected"),
    ({"shape": [True, True]}, r"tensor a has shape \[True, True\]; expected"),
    ({"shape": [-2]}, r"tensor a has shape \[-2\]; expected"),
    ({"data_offsets": [0, 8, 16]}, r"tensor a has data_offsets \[0, 8, 16\]; expected \[start, end\]"),
    ({"data_offsets": [False, 8]}, r"tensor a has data_offsets \[False, 8\]; expected"),
    ({"data_offsets": {"0": 8}}, "tensor a has data_offsets {'0': 8}; expected"),
    ({"data_offsets": [8, 0]}, "tensor a spans bytes 8..0"),
])
def test_malformed_entries(tmp_path, over, needle):
    h = json.dumps(entry(**over)).encode()
    with pytest.raises(WeightsError, match=needle):
        read_header(raw_file(tmp_path / "e.safetensors", h, b"\0" * 8))


@pytest.mark.parametrize("header,needle", [
    ({"a": ["F32", [2], [0, 8]]}, "tensor a has a malformed header entry"),
    ({"a": {"dtype": "F32", "shape": [2]}}, "tensor a has a malformed header entry"),
    ({**entry(), "__metadata__": ["pt"]}, r"__metadata__ must map strings to strings, got \['pt'\]"),
    ({**entry(), "__metadata__": {"format": 1}}, "__metadata__ must map strings to strings"),
    ({"a\nb": entry()["a"]}, r"tensor name 'a\\nb' has control characters"),  # one-line messages only
])
def test_malformed_headers(tmp_path, header, needle):
    with pytest.raises(WeightsError, match=needle):
        read_header(raw_file(tmp_path / "m.safetensors", json.dumps(header).encode(), b"\0" * 8))


def test_overlap_and_trailing_bytes(tmp_path):
    h = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    base = 8 + len(json.dumps(h).encode())  # offsets in messages are absolute file offsets
    with pytest.raises(WeightsError, match=f"tensor b starts at byte {base + 4}, expected {base + 8} \\(overlap or gap\\)"):
        read_header(raw_file(tmp_path / "o.safetensors", json.dumps(h).encode(), b"\0" * 8))
    h = json.dumps(entry()).encode()
    with pytest.raises(WeightsError, match="3 bytes after the last tensor"):  # safetensors refuses these too
        read_header(raw_file(tmp_path / "t.safetensors", h, b"\0" * 11))


@pytest.mark.parametrize("blob", [b"[" * 100_000, b'{"a": ' + b"9" * 5000 + b"}"], ids=["deep-nesting", "5000-digit-int"])
def test_unparseable_header_json(tmp_path, blob):  # RecursionError / ValueError before
    with pytest.raises(WeightsError, match="header is not valid JSON"):
        read_header(raw_file(tmp_path / "j.safetensors", blob))


def test_unreadable_file_is_an_input_error(tmp_path):
    (tmp_path / "model.safetensors").mkdir()  # was IsADirectoryError
    with pytest.raises(InputError, match="cannot read"):
        read_header(tmp_path / "model.safetensors")
    with pytest.raises(InputError, match="no model.safetensors"):
        read_inventory(tmp_path)


@pytest.mark.parametrize("index,needle", [
    ([], "needs a weight_map object"),  # was TypeError, caught only by a broad except
    ({"weight_map": None}, "needs a weight_map object"),  # was AttributeError
    ({"weight_map": ["a"]}, "needs a weight_map object"),
    ({"weight_map": {"a": None, "b": "s.safetensors"}}, r"weight_map\['a'\] = None is not a shard file name"),  # sort TypeError
    ({"weight_map": {"a": 1.5}}, r"weight_map\['a'\] = 1.5 is not a shard file name"),  # Path / float TypeError
    ({"weight_map": {"a": "../other/model.safetensors"}}, "is not a shard file name beside the index"),
    ({"weight_map": {"a": "/etc/passwd"}}, "is not a shard file name beside the index"),
    ({"weight_map": {"a\rb": "s.safetensors"}}, "tensor name 'a\\\\rb' has control characters"),
    ({"weight_map": {"a": "s\n.safetensors"}}, r"weight_map\['a'\] = 's\\n.safetensors' is not a shard file name"),
])
def test_malformed_index(tmp_path, index, needle):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match=needle):
        read_inventory(tmp_path)


def test_unparseable_index(tmp_path):  # RecursionError before
    (tmp_path / "model.safetensors.index.json").write_bytes(b"[" * 100_000)
    with pytest.raises(WeightsError, match="not a valid safetensors index"):
        read_inventory(tmp_path)


def sparse_checkpoint(path, *, sparse: bool):
    """Three f32 tensors: ``a`` dense, ``z`` (4 MiB of zeros) and ``c`` dense. With ``sparse`` the
    zeros are never written (a hole, as in the sparse test corpus); otherwise they are bytes."""
    rng = np.random.default_rng(0)
    a, c = rng.standard_normal((3, 1000), dtype=np.float32), rng.standard_normal((5, 77), dtype=np.float32)
    z = np.zeros((1024, 1024), np.float32)
    header, off = {}, 0
    for name, arr in (("a", a), ("c", c), ("z", z)):  # safetensors order: by name
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    blob = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + a.tobytes() + c.tobytes())
        if sparse:
            f.truncate(f.tell() + z.nbytes)
        else:
            f.write(z.tobytes())
    return {"a": a, "c": c, "z": z}


@pytest.mark.parametrize("chunk", [1000, 1 << 20, 64 << 20])
def test_holes_read_as_the_zeros_they_hold(tmp_path, chunk):
    (tmp_path / "s").mkdir()
    (tmp_path / "d").mkdir()
    want = sparse_checkpoint(tmp_path / "s" / "model.safetensors", sparse=True)
    sparse_checkpoint(tmp_path / "d" / "model.safetensors", sparse=False)
    for s_t, d_t in zip(read_inventory(tmp_path / "s"), read_inventory(tmp_path / "d")):
        got_s = np.concatenate(list(iter_raw(s_t, chunk_bytes=chunk)))
        got_d = np.concatenate(list(iter_raw(d_t, chunk_bytes=chunk)))
        assert got_s.tobytes() == got_d.tobytes() == want[s_t.name].tobytes(), s_t.name
        assert read_raw(s_t).flags.writeable  # callers may write into a whole-tensor read


def test_hole_chunks_are_shared_read_only_zeros(tmp_path):
    (tmp_path / "s").mkdir()
    sparse_checkpoint(tmp_path / "s" / "model.safetensors", sparse=True)
    if os.stat(tmp_path / "s" / "model.safetensors").st_blocks * 512 >= 4 << 20:
        pytest.skip("this filesystem stores holes as data")
    z = next(t for t in read_inventory(tmp_path / "s") if t.name == "z")
    chunks = list(iter_raw(z, chunk_bytes=1 << 20))
    # 4 MiB from an offset that is not block-aligned: whole-hole chunks are not read at all ...
    assert sum(not c.flags.writeable for c in chunks) >= 2
    with pytest.raises(ValueError):
        next(c for c in chunks if not c.flags.writeable)[0, 0] = 1.0  # ... and cannot be corrupted
    assert not any(np.count_nonzero(c) for c in chunks)


def test_range_past_the_end_of_a_sparse_file_is_still_a_short_read(tmp_path):
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as f:
        f.truncate(8 << 20)  # all hole
    t = SourceTensor("w", "F32", (4 << 20,), path, offset=0, nbytes=16 << 20)
    with pytest.raises(WeightsError, match="ends early"):
        list(iter_raw(t))


def test_e8m0_scales_decode_as_torchs_float8_e8m0fnu():
    """F8_E8M0 (MX block scales, DeepSeek-V4's): 2^(b - 127), 0xFF NaN, every byte as torch decodes it."""
    torch = pytest.importorskip("torch")
    from dflash_gguf.fileio.safetensors import fp8_table

    want = torch.arange(256, dtype=torch.uint8).view(torch.float8_e8m0fnu).float().numpy()
    assert fp8_table("F8_E8M0").view(np.uint32).tobytes() == want.view(np.uint32).tobytes()


def test_is_hole_tells_a_sparse_tensor_from_written_bytes(tmp_path):
    """A tensor whose bytes all lie in a hole of a sparse file reads as zeros without being read."""
    from dflash_gguf.fileio.safetensors import is_hole

    # pads of 8 KiB keep a's bytes clear of the header's and b's filesystem blocks
    spans = {"pad0": 2048, "a": 1 << 18, "pad1": 2048, "b": 4}
    entries, at = {}, 0
    for name, n in spans.items():
        entries[name] = {"dtype": "F32", "shape": [n], "data_offsets": [at, at + 4 * n]}
        at += 4 * n
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + at)  # every tensor byte a hole
    t = {x.name: x for x in read_header(path)}
    a, b = t["a"], t["b"]
    if not is_hole(a):
        pytest.skip("this filesystem stores holes as data")
    assert is_hole(b)
    with open(path, "r+b") as f:  # b written: no longer a hole
        f.seek(b.offset)
        f.write(np.ones(4, np.float32).tobytes())
    assert not is_hole(b) and is_hole(a)
