"""Corrupted GGUFs through every door that reads one: no traceback, no leftover, no hang.

Inputs are real files: drafters converted from the bundled fixtures in every output format
(plus a Q8_0 and a Q4_K_M one), the guard GGUFs and the tiny llama target. Each hypothesis
example takes one of them and applies one mutation:

* bytes: flipped bits anywhere in the header, a KV value's bytes overwritten (strings made
  invalid UTF-8, ``general.architecture`` first of all), a length / count / type / dimension /
  offset field set to a hostile value, a cut at a random point or a section boundary, NaN/inf
  written into the tensor data;
* semantic (re-written with gguf-py's ``GGUFWriter``, the tensor section by hand so that names
  may repeat): a known key given a value of the wrong type (a string where an int is
  expected, arrays of the wrong item type, negative / huge numbers, NaN, nested arrays), a
  key dropped, tensors renamed / dropped / duplicated, their shapes and types changed.

Then one door runs, in-process (``dflash_gguf.cli.main``; a few cases as a real subprocess):
``inspect [--json]``, ``quantize IN OUT q8_0|q4_k_m``, ``compare-weights DIR F`` and
``A.gguf B.gguf``, ``retarget IN -o OUT --format X``, ``check [--deep | --target T]``,
``check-instruct``, and parity's loaders (``reference.load.drafter_from_gguf`` /
``target_from_gguf``; skipped without torch). Every case must end with a documented exit code,
no "Traceback" and a one-line error on stderr, nothing in the output directory but the
expected output (nothing at all on failure, never a ``*.tmp``), within a per-case alarm.

Budget: ``DFLASH_FUZZ_EXAMPLES`` examples per door (default small for CI); an offline campaign
sets it to ~1000 and ``DFLASH_FUZZ_KEEP_GOING=1`` (record every failing case instead of
stopping at the first) with ``DFLASH_FUZZ_LOG=cases.jsonl``. See docs/fuzzing.md.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFValueType as V, GGUFWriter
from gguf.gguf_writer import GGUFValue
from hypothesis import HealthCheck, given, settings, strategies as st

from dflash_gguf.errors import DflashError
from dflash_gguf.fileio.gguf_header import parse_header_bytes
from dflash_gguf.fileio.string_array import StringArray
from tests.conftest import skip_if_missing_package
from tests.fuzz.limits import CaseTimeout, time_limit

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
DRAFTERS, TARGETS, GUARDS = FIXTURES / "drafters", FIXTURES / "targets", FIXTURES / "guards"
QWEN_DIR = TARGETS / "qwen3-tiny"

EXAMPLES = int(os.environ.get("DFLASH_FUZZ_EXAMPLES", "12"))
KEEP_GOING = os.environ.get("DFLASH_FUZZ_KEEP_GOING") == "1"
LOG = os.environ.get("DFLASH_FUZZ_LOG")
CASE_TIMEOUT_S = float(os.environ.get("DFLASH_FUZZ_CASE_TIMEOUT", "60"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# Documented exit codes (docs/exit-codes.md) a door may end with on a corrupt input. 5 is
# "input not found / read failed", 2 a usage error (DFlash2 into a format that cannot hold it).
DOC_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 130, 10, 11, 12, 13, 20, 30}
CHECK_CODES = {0, 6, 12}

# --- known bugs -----------------------------------------------------------------------------
# A case whose innermost dflash_gguf frame is (file, function), raising this exception type
# with this text in its message, would be counted as "known" instead of failing the fuzz, with a
# strict-xfail reproducer at the end of this file. Empty: every bug found so far is fixed, and its
# reproducer is a test_regression_* below.
KNOWN: list[tuple[str, str, str, str]] = []
# Clean exits whose one error line is still wrong (not printable): (why, pattern of the line).
# Empty for the same reason.
KNOWN_LINES: list[tuple[str, re.Pattern[str]]] = []


# --- the corpus ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Base:
    name: str
    data: bytes
    role: str            # "drafter" | "target" | "other"
    source: Path | None  # the checkpoint dir a drafter was converted from
    fmt: str | None      # its format


@dataclass
class Layout:
    """Where everything is in a valid file: section boundaries, structural fields, strings."""

    bounds: list[int]
    fields: list[tuple[int, int, str]]         # (pos, size, what) of every length/count/type/dim/offset
    strings: list[tuple[int, int, str]]        # (pos, len, owner) of every string's bytes
    values: dict[str, tuple[int, int]]         # key -> (start, end) of its value bytes
    header_end: int
    data_offset: int


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def layout(data: bytes) -> Layout:
    h = parse_header_bytes(data)
    bounds, fields, strings, values = [0, 4, 8, 16, 24], [(4, 4, "version"), (8, 8, "n_tensors"), (16, 8, "n_kv")], [], {}

    def string(pos: int, owner: str) -> int:
        n = _U64.unpack_from(data, pos)[0]
        fields.append((pos, 8, f"length of {owner}"))
        strings.append((pos + 8, n, owner))
        return pos + 8 + n

    def value(pos: int, t: int, owner: str) -> int:
        if t in _SIZES:
            return pos + _SIZES[t]
        if t == 8:
            return string(pos, owner)
        it, n = _U32.unpack_from(data, pos)[0], _U64.unpack_from(data, pos + 4)[0]
        fields.extend([(pos, 4, f"item type of {owner}"), (pos + 4, 8, f"item count of {owner}")])
        pos += 12
        for i in range(n):
            pos = value(pos, it, f"{owner}[{i}]" if n < 64 else owner)
        return pos

    pos = 24
    for _ in range(_U64.unpack_from(data, 16)[0]):
        bounds.append(pos)
        kstart = pos
        pos = string(pos, "key")
        key = data[kstart + 8:pos].decode()
        fields.append((pos, 4, f"type of {key}"))
        vstart = pos + 4
        pos = value(vstart, _U32.unpack_from(data, pos)[0], key)
        values[key] = (vstart, pos)
    for t in h.tensors:
        bounds.append(pos)
        pos = string(pos, f"tensor {t.name}")
        nd = _U32.unpack_from(data, pos)[0]
        fields.append((pos, 4, f"n_dims of {t.name}"))
        fields.extend((pos + 4 + 8 * j, 8, f"ne[{j}] of {t.name}") for j in range(nd))
        pos += 4 + 8 * nd
        fields.extend([(pos, 4, f"ggml type of {t.name}"), (pos + 4, 8, f"offset of {t.name}")])
        pos += 12
    bounds.append(pos)
    bounds += [h.data_offset, len(data)] + [t.offset_abs for t in h.tensors] + [t.end for t in h.tensors]
    return Layout(sorted(set(bounds)), fields, strings, values, pos, h.data_offset)


def _cli(args: list[Any]) -> tuple[int, str, str]:
    from dflash_gguf.cli import main

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main([str(a) for a in args])
    return code, o.getvalue(), e.getvalue()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Base]:
    tmp = tmp_path_factory.mktemp("fuzz-corpus")
    made: dict[str, Base] = {}
    for drafter, formats in (("qwen3-flat", ("llama.cpp", "dflash-draft", "lucebox")),
                             ("qwen3-dflash2", ("llama.cpp", "dflash-draft", "lucebox"))):
        for fmt in formats:
            out = tmp / f"{drafter}-{fmt}.gguf"
            code, _, err = _cli(["convert", DRAFTERS / drafter, "--target-dir", QWEN_DIR, "--format", fmt, "-o", out])
            if code:
                skip_if_missing_package(err)  # the target's tokenizer.json needs the [tokenizers] extra
            if drafter == "qwen3-dflash2" and fmt != "llama.cpp":
                assert code == 2, err  # DFlash2 loads only in mainline llama.cpp: a clean usage error
                continue
            assert code == 0, err
            made[out.stem] = Base(out.stem, out.read_bytes(), "drafter", DRAFTERS / drafter, fmt)
    for src, ftype in (("qwen3-flat-llama.cpp", "q8_0"), ("qwen3-dflash2-llama.cpp", "q4_k_m")):
        out = tmp / f"{src}-{ftype}.gguf"
        code, _, err = _cli(["quantize", tmp / f"{src}.gguf", out, ftype])
        assert code == 0, err
        b = made[src]
        made[out.stem] = Base(out.stem, out.read_bytes(), "drafter", b.source, b.fmt)
    made["llama-tiny"] = Base("llama-tiny", (TARGETS / "llama-tiny.gguf").read_bytes(), "target", None, None)
    for p in sorted(GUARDS.glob("*.gguf")):
        role = "drafter" if "dflash" in p.stem else "target" if p.stem in ("qwen3-8b", "llama-3.1-8b") else "other"
        made[p.stem] = Base(p.stem, p.read_bytes(), role, None, None)
    return made


@pytest.fixture(scope="session")
def layouts(corpus) -> dict[str, Layout]:
    return {n: layout(b.data) for n, b in corpus.items()}


# --- mutations ----------------------------------------------------------------------------

HOSTILE_INTS = [0, 1, 2, 3, 7, 13, 31, 32, 63, 255, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62,
                2**63 - 1, 2**63, 2**64 - 1]
BAD_UTF8 = [b"\xff", b"\xc0", b"\x80", b"\xfe", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x00"]
# Keys a door interprets (its parser must cope with any type there); {a} is the architecture.
KNOWN_KEYS = [
    "general.architecture", "general.alignment", "general.file_type", "general.quantization_version",
    "general.name", "general.type", "general.basename", "general.finetune", "general.size_label",
    "{a}.block_count", "{a}.context_length", "{a}.embedding_length", "{a}.feed_forward_length",
    "{a}.attention.head_count", "{a}.attention.head_count_kv", "{a}.attention.key_length",
    "{a}.attention.value_length", "{a}.attention.layer_norm_rms_epsilon", "{a}.attention.causal",
    "{a}.rope.freq_base", "{a}.rope.dimension_count", "{a}.rope.scaling.type", "{a}.rope.scaling.factor",
    "{a}.rope.scaling.original_context_length", "{a}.attention.sliding_window",
    "{a}.attention.sliding_window_pattern", "{a}.logit_scale", "{a}.final_logit_softcapping",
    "{a}.embedding_scale", "{a}.vocab_size",
    "{a}.target_layers", "{a}.target_layer_ids", "{a}.block_size", "{a}.mask_token_id",
    "{a}.conv_kernel_size", "{a}.conv_group_size", "{a}.selector_rank", "{a}.selector_top_k",
    "{a}.dflash.target_layer_ids", "{a}.dflash.block_size", "{a}.dflash.mask_token_id",
    "{a}.dflash.n_target_features", "{a}.dflash.n_target_layers",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.add_bos_token", "tokenizer.chat_template",
    "split.no", "split.count", "split.tensors.count",
]


# Byte-level mutations mostly end at the header parser (exit 6); the semantic ones reach the
# code behind it, so they get more weight.
MUTATIONS = (["flip-header", "kv-bytes", "arch-utf8", "string-utf8", "field", "truncate", "cut-boundary",
              "data-nan", "none"]
             + ["retype-kv"] * 3 + ["retype-known"] * 6 + ["drop-kv"] * 2
             + ["tensor-rename", "tensor-drop", "tensor-duplicate", "tensor-shape", "tensor-type", "tensor-offset"] * 2)
# Strings that a renderer might take for markup, or that a name parser might trip on.
ODD_STRINGS = ["[/]", "[bold", "[red]x[/blue]", "a\nb", "\x1b[31m", "", " ", "é", "%s%n", "{0}"]


@dataclass
class KVItem:
    key: str
    value: Any
    type: V
    sub: V | None = None


@dataclass
class TensorItem:
    name: str
    ne: tuple[int, ...]  # ggml order
    type: Q
    data: bytes
    offset: int | None = None  # relative to the data section; None = packed in order


def _wrong_values(d) -> tuple[Any, V, V | None]:
    """A value of some type, biased to what breaks naive parsers."""
    kind = d.draw(st.sampled_from([
        "str", "numeric-str", "empty-str", "nonutf8-str", "u32", "i32", "neg", "huge", "u64", "f32", "nan", "inf",
        "bool", "arr-str", "arr-f32", "arr-i32", "arr-neg", "arr-bool", "arr-nested", "arr-u8", "arr-huge",
        "arr-one", "f64", "i8", "arr-empty"]), label="value kind")
    if kind == "str":
        return d.draw(st.sampled_from(["abc", "qwen3", "dflash", "none", "yarn", "-1", *ODD_STRINGS])), V.STRING, None
    if kind == "arr-empty":
        return [], V.ARRAY, d.draw(st.sampled_from([V.INT32, V.STRING, V.BOOL, V.FLOAT32]))
    if kind == "numeric-str":
        return d.draw(st.sampled_from(["3", "1,2,3", "[1, 2]", "1e5", "nan"])), V.STRING, None
    if kind == "empty-str":
        return "", V.STRING, None
    if kind == "nonutf8-str":
        return b"ab" + d.draw(st.sampled_from(BAD_UTF8)) + b"cd", V.STRING, None
    if kind == "u32":
        return d.draw(st.sampled_from([0, 1, 2, 5, 64, 511, 512, 2**31, 2**32 - 1])), V.UINT32, None
    if kind == "i32":
        return d.draw(st.sampled_from([-(2**31), -5, -1, 0, 3, 2**31 - 1])), V.INT32, None
    if kind == "neg":
        return d.draw(st.sampled_from([-1, -2, -(2**63)])), V.INT64, None
    if kind in ("huge", "u64"):
        return d.draw(st.sampled_from([2**40, 2**62, 2**63 - 1, 2**64 - 1])), V.UINT64, None
    if kind == "i8":
        return -128, V.INT8, None
    if kind == "f32":
        return d.draw(st.sampled_from([0.0, -0.0, -1.0, 1e-45, 3.5, 1e30, -1e30])), V.FLOAT32, None
    if kind == "f64":
        return d.draw(st.sampled_from([1e300, -1e300, 5e-324, 0.5])), V.FLOAT64, None
    if kind == "nan":
        return float("nan"), d.draw(st.sampled_from([V.FLOAT32, V.FLOAT64])), None
    if kind == "inf":
        return d.draw(st.sampled_from([math.inf, -math.inf])), V.FLOAT32, None
    if kind == "bool":
        return d.draw(st.booleans()), V.BOOL, None
    if kind == "arr-str":
        return d.draw(st.sampled_from([["1", "2"], ["a"], [b"\xff\xfe", b"x"]])), V.ARRAY, V.STRING
    if kind == "arr-f32":
        return d.draw(st.sampled_from([[1.5, 2.5], [float("nan")], [math.inf, 0.0, 1.0, 2.0]])), V.ARRAY, V.FLOAT32
    if kind == "arr-i32":
        return d.draw(st.sampled_from([[0], [1, 2, 3, 4], [1, 1, 1, 1], [0, 99, 2**31 - 1]])), V.ARRAY, V.INT32
    if kind == "arr-neg":
        return d.draw(st.sampled_from([[-1], [-5, -6, -7, -8], [-(2**31)]])), V.ARRAY, V.INT32
    if kind == "arr-bool":
        return [True, False] * d.draw(st.integers(1, 3)), V.ARRAY, V.BOOL
    if kind == "arr-nested":
        return [[1, 2], [3, 4]], V.ARRAY, V.ARRAY
    if kind == "arr-u8":
        return [1, 2, 3], V.ARRAY, V.UINT8
    if kind == "arr-huge":
        return [2**64 - 1, 2**63], V.ARRAY, V.UINT64
    return [7], V.ARRAY, d.draw(st.sampled_from([V.INT64, V.UINT32, V.FLOAT64, V.INT16]))


def _kv_items(h, data: bytes) -> list[KVItem]:
    """Every KV as stored: strings and string arrays as their raw bytes (they need not be UTF-8)."""
    out = []
    for k in h.kv_order:
        kv = h.kv[k]
        v = kv.value
        if isinstance(v, StringArray):
            v = v.raw_items()
        elif kv.type == V.STRING:
            at = kv.offset + 8 + _U64.unpack_from(data, kv.offset)[0] + 4
            v = data[at + 8: at + 8 + _U64.unpack_from(data, at)[0]]
        out.append(KVItem(k, v, kv.type, kv.sub_type))
    return out


def _tensor_items(h, data: bytes) -> list[TensorItem]:
    return [TensorItem(t.name, t.shape_ne, t.ggml_type, data[t.offset_abs:t.end]) for t in h.tensors]


def _nbytes(ne: tuple[int, ...], qt: Q) -> int:
    block, size = GGML_QUANT_SIZES[qt]
    n = 1
    for d in ne:
        n *= d
    return n // block * size


class _Writer(GGUFWriter):
    """gguf-py's writer, except that it can write an empty array (valid GGUF; llama.cpp can
    write one, gguf-py refuses)."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype == V.ARRAY and isinstance(val, (list, tuple)) and not val:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type or V.INT32) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def serialize(kvs: list[KVItem], tensors: list[TensorItem]) -> bytes:
    """Write a GGUF: KVs encoded by gguf-py's GGUFWriter (any key, any type, any order), the
    tensor section by hand (names may repeat, offsets may be anything)."""
    with tempfile.TemporaryDirectory() as td:
        w = _Writer(Path(td) / "x.gguf", "x")
        w.kv_data[0] = {kv.key: GGUFValue(kv.value, kv.type, kv.sub) for kv in kvs}
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()
        head = bytearray((Path(td) / "x.gguf").read_bytes())
    align = 32
    for kv in kvs:
        if kv.key == "general.alignment" and kv.type == V.UINT32 and kv.value and not kv.value & (kv.value - 1):
            align = kv.value
    head[8:16] = _U64.pack(len(tensors))
    ti, blob, packed = bytearray(), bytearray(), 0
    for t in tensors:
        name = t.name.encode("utf-8", "surrogateescape")
        ti += _U64.pack(len(name)) + name + _U32.pack(len(t.ne))
        for d in t.ne:
            ti += _U64.pack(d & (2**64 - 1))
        ti += _U32.pack(int(t.type)) + _U64.pack(packed if t.offset is None else t.offset)
        blob += t.data + bytes(-len(t.data) % align)
        packed += len(t.data) + (-len(t.data) % align)
    out = head + ti
    out += bytes(-len(out) % align)
    return bytes(out + blob)


@dataclass
class Case:
    base: str
    label: str
    data: bytes


def mutate(d, base: Base, lay: Layout) -> Case:
    """Draw one mutation of ``base``; returns the mutated bytes and a label that says what."""
    data = base.data
    kind = d.draw(st.sampled_from(MUTATIONS), label="mutation")
    b = bytearray(data)
    if kind == "none":
        return Case(base.name, "pristine", data)
    if kind == "flip-header":
        n = d.draw(st.integers(1, 4))
        pos = [d.draw(st.integers(0, lay.data_offset - 1)) for _ in range(n)]
        for p in pos:
            b[p] ^= 1 << d.draw(st.integers(0, 7))
        return Case(base.name, f"flip-header@{pos}", bytes(b))
    if kind == "kv-bytes":
        key = d.draw(st.sampled_from(sorted(lay.values)))
        s, e = lay.values[key]
        p = d.draw(st.integers(s, e - 1))
        v = d.draw(st.sampled_from([0x00, 0xFF, 0x80, 0x7F, 0xC0, 0x01]))
        b[p] = v
        return Case(base.name, f"kv-bytes:{key}@{p}={v:#x}", bytes(b))
    if kind in ("arch-utf8", "string-utf8"):
        cands = [s for s in lay.strings if s[1]]
        if kind == "arch-utf8" and "general.architecture" in lay.values:
            s, _ = lay.values["general.architecture"]
            cands = [(s + 8, _U64.unpack_from(data, s)[0], "general.architecture")]
        pos, n, owner = d.draw(st.sampled_from(cands))
        at = pos + d.draw(st.integers(0, max(0, n - 1)))
        bad = d.draw(st.sampled_from(BAD_UTF8))[: pos + n - at]
        b[at:at + len(bad)] = bad
        return Case(base.name, f"non-utf8:{owner}@{at}={bad!r}", bytes(b))
    if kind == "field":
        pos, size, what = d.draw(st.sampled_from(lay.fields))
        v = d.draw(st.sampled_from(HOSTILE_INTS + [len(data), len(data) + 1, 2**64 - 1]))
        v &= (1 << (8 * size)) - 1
        b[pos:pos + size] = v.to_bytes(size, "little")
        return Case(base.name, f"field:{what}@{pos}={v}", bytes(b))
    if kind == "truncate":
        cut = d.draw(st.integers(0, len(data) - 1))
        return Case(base.name, f"cut@{cut}", data[:cut])
    if kind == "cut-boundary":
        cut = max(0, d.draw(st.sampled_from(lay.bounds)) + d.draw(st.sampled_from([-1, 0, 1])))
        return Case(base.name, f"cut-boundary@{cut}", data[:cut])
    h = parse_header_bytes(data)
    if kind == "data-nan":
        floats = [t for t in h.tensors if t.ggml_type in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K) and t.nbytes]
        if not floats:
            return Case(base.name, "pristine", data)
        t = d.draw(st.sampled_from(floats))
        bad = {Q.F32: [b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"], Q.BF16: [b"\xc0\x7f", b"\x80\xff"]}.get(
            t.ggml_type, [b"\x00\x7e", b"\x00\x7c"])  # F16 NaN / inf; Q8_0/Q4_K/Q6_K: the f16 d at block start
        word = d.draw(st.sampled_from(bad))
        block, size = GGML_QUANT_SIZES[t.ggml_type]
        unit = size if block > 1 else len(word)
        at = t.offset_abs + d.draw(st.integers(0, t.nbytes // unit - 1)) * unit
        if t.ggml_type == Q.Q6_K:
            at += size - 2  # Q6_K keeps its f16 d last
        b[at:at + len(word)] = word
        return Case(base.name, f"data-nan:{t.name}@{at}={word.hex()}", bytes(b))
    kvs, tensors = _kv_items(h, data), _tensor_items(h, data)
    arch = h.arch or "llama"
    label = kind
    if kind in ("retype-kv", "retype-known"):
        present = [kv.key for kv in kvs]
        known = [k.format(a=arch) for k in KNOWN_KEYS]
        if kind == "retype-known":  # a key some door interprets, mostly one the file has
            pool = [k for k in known if k in present] or known
            if d.draw(st.integers(0, 9), label="absent known key") == 0:
                pool = known
        elif present and d.draw(st.integers(0, 9), label="present key") < 7:
            pool = present
        else:
            pool = sorted(set(present) | set(known) | {f"{arch}.{s}" for s in ODD_STRINGS})
        key = d.draw(st.sampled_from(pool), label="key")
        value, typ, sub = _wrong_values(d)
        kvs = [kv for kv in kvs if kv.key != key]
        pos = next((i for i, kv in enumerate(h.kv_order) if kv == key), len(kvs))
        kvs.insert(min(pos, len(kvs)), KVItem(key, value, typ, sub))
        label = f"retype-kv:{key}={value!r}:{typ.name}{'' if sub is None else f'[{sub.name}]'}"
    elif kind == "drop-kv":
        key = d.draw(st.sampled_from([kv.key for kv in kvs])) if kvs else None
        kvs = [kv for kv in kvs if kv.key != key]
        label = f"drop-kv:{key}"
    elif not tensors:
        return Case(base.name, "pristine", data)
    elif kind == "tensor-rename":
        i = d.draw(st.integers(0, len(tensors) - 1))
        names = [t.name for t in tensors]
        new = d.draw(st.sampled_from(names + [
            "", "x" * 70, "blk.0.attn_q.weight", "blk.99.attn_q.weight", "blk.-1.ffn_up.weight", "blk.x.ffn_up.weight",
            "blk.", "fc.weight", "dflash_fc.weight", "dflash.fc.weight", "enc.output_norm.weight",
            "hidden_norm.weight", "token_embd.weight", "output.weight", "rope_freqs.weight", "d2t",
            "blk.0.attn_norm.weight", "selector_predecessor.weight", "blk.0.attn_conv_base", "na\udcffme",
            "blk.1e3.attn_q.weight", "blk. 7.ffn_down.weight", *ODD_STRINGS]),
            label="new name")
        old = tensors[i].name
        tensors[i].name = new
        label = f"tensor-rename:{old}->{new!r}"
    elif kind == "tensor-drop":
        i = d.draw(st.integers(0, len(tensors) - 1))
        label = f"tensor-drop:{tensors.pop(i).name}"
    elif kind == "tensor-duplicate":
        i = d.draw(st.integers(0, len(tensors) - 1))
        tensors.append(TensorItem(tensors[i].name, tensors[i].ne, tensors[i].type, tensors[i].data))
        label = f"tensor-duplicate:{tensors[i].name}"
    elif kind in ("tensor-shape", "tensor-type"):
        i = d.draw(st.integers(0, len(tensors) - 1))
        t = tensors[i]
        ne, qt = list(t.ne), t.type
        if kind == "tensor-shape":
            how = d.draw(st.sampled_from(["swap", "grow", "shrink", "zero", "add-dim", "drop-dim", "one", "scalar"]))
            if how == "swap" and len(ne) > 1:
                ne[0], ne[1] = ne[1], ne[0]
            elif how == "grow":
                ne[-1] += d.draw(st.sampled_from([1, 2, ne[-1]]))
            elif how == "shrink" and ne[-1] > 1:
                ne[-1] -= 1
            elif how == "zero":
                ne[d.draw(st.integers(0, len(ne) - 1))] = 0
            elif how == "add-dim" and len(ne) < 4:
                ne.append(d.draw(st.sampled_from([1, 2])))
            elif how == "drop-dim" and len(ne) > 1:
                ne[0] *= ne.pop()
            elif how == "one":
                ne = [1] * len(ne)
            elif how == "scalar":
                ne = []
            label = f"tensor-shape:{t.name}:{how}:{list(t.ne)}->{ne}"
        else:
            qt = d.draw(st.sampled_from([Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.I8, Q.I32, Q.F64,
                                         Q.Q2_K, Q.IQ2_XXS, Q.TQ1_0]))
            block = GGML_QUANT_SIZES[qt][0]
            if ne and ne[0] % block:
                ne[0] = -(-ne[0] // block) * block
            label = f"tensor-type:{t.name}:{t.type.name}->{qt.name} ne={ne}"
        nb = _nbytes(tuple(ne), qt)
        if nb > 1 << 22:
            return Case(base.name, "pristine", data)
        t.ne, t.type = tuple(ne), qt
        t.data = (t.data * (nb // max(len(t.data), 1) + 1))[:nb] if t.data else bytes(nb)
    elif kind == "tensor-offset":
        i = d.draw(st.integers(0, len(tensors) - 1))
        t = tensors[i]
        packed = 0
        for u in tensors[:i]:
            packed += len(u.data) + (-len(u.data) % 32)
        t.offset = d.draw(st.sampled_from([0, 32, packed + 32, packed - 32 if packed >= 32 else 64, 2**20, 2**40,
                                           2**64 - 32, packed + 1]))
        for j, u in enumerate(tensors):  # keep the others where they were
            if j != i:
                u.offset = sum(len(x.data) + (-len(x.data) % 32) for x in tensors[:j])
        label = f"tensor-offset:{t.name}={t.offset}"
    try:
        return Case(base.name, label, serialize(kvs, tensors))
    except (ValueError, TypeError, struct.error, OverflowError, UnicodeEncodeError) as exc:
        # gguf-py refuses to encode this value (e.g. an empty array): the mutation is moot
        return Case(base.name, f"{label} (unwritable: {type(exc).__name__})", data)


# --- running a door and judging the outcome -------------------------------------------------

@dataclass
class Outcome:
    door: str
    case: str
    code: int | None = None
    verdict: str = "ok"          # ok | traceback | known | bad-code | multiline | leftover | hang | json
    detail: str = ""
    error: str = ""              # the one "error:" line, for the log


STATS: Counter[tuple[str, str]] = Counter()
CODES: dict[str, Counter[int]] = {}
FAILURES: list[Outcome] = []


def _known(exc: BaseException) -> str | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "dflash_gguf" in f.filename]
    if not frames:
        return None
    inner = frames[-1]
    for typ, file, func, text in KNOWN:
        if (type(exc).__name__ == typ and inner.filename.endswith(file) and inner.name == func
                and text in str(exc)):
            return f"{typ} in {file}:{func}"
    return None


def _summary(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "dflash_gguf" in f.filename]
    tail = " <- ".join(f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}:{f.name}"
                       for f in reversed(frames[-3:]))
    return f"{type(exc).__name__}: {str(exc)[:300]} at {tail}"


def judge(door: str, case: Case, run: Callable[[], tuple[int, str, str]], allowed: set[int],
          outdir: Path, expect_out: Path | None, json_doc: bool | str = False) -> Outcome:
    what = f"{door} on {case.base}/{case.label}"
    o = Outcome(door, f"{case.base}/{case.label}")
    t0 = time.perf_counter()
    try:
        with time_limit(CASE_TIMEOUT_S, what):
            code, out, err = run()
    except CaseTimeout as exc:
        o.verdict, o.detail = "hang", str(exc)
        return o
    except DflashError as exc:  # a library door (parity's loaders): the exception is the outcome
        code, out, err = exc.exit_code, "", f"error: {exc}\n"
    except Exception as exc:  # noqa: BLE001 - this is what the fuzzer is looking for
        known = _known(exc)
        o.verdict, o.detail = ("known", known) if known else ("traceback", _summary(exc))
        return o
    o.code = code
    o.detail = f"{time.perf_counter() - t0:.2f}s"
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    o.error = errors[0][:300] if errors else ""
    if "Traceback" in err:
        o.verdict, o.detail = "traceback", err[-2000:]
    elif code not in allowed or code not in DOC_CODES:
        o.verdict, o.detail = "bad-code", f"exit {code} not in {sorted(allowed)}: {err.strip()[:500]}"
    elif code not in (0, 10, 11, 12, 13, 20) and len(errors) != 1:
        o.verdict, o.detail = "multiline", f"exit {code} with {len(errors)} error lines: {err!r:.800}"
    elif errors and any(not ln.isprintable() for ln in errors):
        known = next((why for why, rx in KNOWN_LINES if rx.search(errors[0])), None)
        o.verdict, o.detail = ("known", known) if known else ("multiline", f"error line not printable: {errors!r:.800}")
    else:
        left = sorted(p.name for p in outdir.iterdir())
        want = [expect_out.name] if (expect_out is not None and code == 0) else []
        if left != want:
            o.verdict, o.detail = "leftover", f"exit {code}: output dir holds {left}, expected {want}"
        elif json_doc == "on-success" and code == 0:
            try:
                json.loads(out)
            except ValueError as exc:
                o.verdict, o.detail = "json", f"exit 0: stdout is not one JSON document ({exc}): {out[:300]!r}"
        elif json_doc is True and code != 2:
            try:
                doc = json.loads(out)
                if doc.get("exit_code") != code:
                    o.verdict, o.detail = "json", f"exit {code} but JSON says {doc.get('exit_code')}"
            except ValueError as exc:
                o.verdict, o.detail = "json", f"exit {code}: stdout is not one JSON document ({exc}): {out[:300]!r}"
    return o


def record(o: Outcome) -> None:
    STATS[(o.door, o.verdict)] += 1
    if o.code is not None:
        CODES.setdefault(o.door, Counter())[o.code] += 1
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(o.__dict__) + "\n")
    if o.verdict != "ok" and o.verdict != "known":
        if KEEP_GOING:
            FAILURES.append(o)
        else:
            raise AssertionError(f"{o.door} on {o.case}: {o.verdict}: {o.detail}")


@pytest.fixture(scope="module", autouse=True)
def _report():
    t0 = time.perf_counter()
    yield
    if STATS:
        doors = sorted({d for d, _ in STATS})
        lines = [f"{d}: " + ", ".join(f"{v}={n}" for (dd, v), n in sorted(STATS.items()) if dd == d)
                 + f"; exit codes {dict(sorted(CODES.get(d, Counter()).items()))}" for d in doors]
        print(f"\nfuzz: {sum(STATS.values())} cases in {time.perf_counter() - t0:.1f} s\n  " + "\n  ".join(lines))


# --- the doors ------------------------------------------------------------------------------

def _pick_input(d, corpus, layouts, roles) -> tuple[Base, Case]:
    # drafters converted from the fixtures reach furthest into the code: three times the weight
    names = [n for n, b in sorted(corpus.items()) if b.role in roles for _ in range(3 if b.source else 1)]
    base = corpus[d.draw(st.sampled_from(names), label="input")]
    return base, mutate(d, base, layouts[base.name])


@dataclass
class Door:
    name: str
    roles: tuple[str, ...]
    allowed: set[int]
    argv: Callable[..., list[Any]]    # (d, base, inp, outdir, corpus, pristine) -> argv
    out: str | None = None            # name of the expected output file, if any
    json_doc: bool | str = False      # True: one JSON document with exit_code; "on-success": JSON when 0


def _compare_dir(d, base, inp, outdir, corpus, pristine):
    return ["compare-weights", base.source or DRAFTERS / "qwen3-flat", inp, "--no-progress", "--workers", "1"]


def _compare_gguf(d, base, inp, outdir, corpus, pristine):
    other = pristine(d.draw(st.sampled_from(sorted(n for n, b in corpus.items() if b.role == "drafter"))))
    pair = [inp, other] if d.draw(st.booleans(), label="mutated side is A") else [other, inp]
    return ["compare-weights", *pair, "--no-progress", "--workers", "1"]


def _retarget(d, base, inp, outdir, corpus, pristine):
    fmt = d.draw(st.sampled_from(["llama.cpp", "llama.cpp-pr22105", "dflash-draft", "lucebox"]), label="format")
    extra = []
    if d.draw(st.integers(0, 3), label="with --target-gguf") == 0:
        extra = ["--target-gguf", pristine(d.draw(st.sampled_from(["llama-tiny", "qwen3-8b"]), label="target"))]
    return ["retarget", inp, "-o", outdir / "out.gguf", "--format", fmt, *extra]


def _retarget_target(d, base, inp, outdir, corpus, pristine):
    """The mutated file is the target whose tokenizer a Lucebox drafter (which has none) gets."""
    fmt = d.draw(st.sampled_from(["llama.cpp", "dflash-draft"]), label="format")
    return ["retarget", pristine("qwen3-flat-lucebox"), "-o", outdir / "out.gguf", "--format", fmt,
            "--target-gguf", inp]


def _check_target(d, base, inp, outdir, corpus, pristine):
    tgt = pristine(d.draw(st.sampled_from(["llama-tiny", "qwen3-8b", "llama-3.1-8b"]), label="target"))
    drafter = pristine(d.draw(st.sampled_from(sorted(n for n, b in corpus.items() if b.role == "drafter"))))
    pair = [inp, "--target", tgt] if d.draw(st.booleans(), label="mutated side is the drafter") else [drafter, "--target", inp]
    return ["check", *pair, "--json"]


DOORS = {
    "inspect": Door("inspect", ("drafter", "target", "other"), {0, 6}, lambda d, b, i, o, c, p: ["inspect", i]),
    "inspect-json": Door("inspect-json", ("drafter", "target", "other"), {0, 6},
                         lambda d, b, i, o, c, p: ["inspect", i, "--json"], json_doc="on-success"),
    "quantize-q8_0": Door("quantize-q8_0", ("drafter", "target", "other"), {0, 6, 8},
                          lambda d, b, i, o, c, p: ["quantize", i, o / "out.gguf", "q8_0"], out="out.gguf"),
    "quantize-q4_k_m": Door("quantize-q4_k_m", ("drafter", "target", "other"), {0, 6, 8},
                            lambda d, b, i, o, c, p: ["quantize", i, o / "out.gguf", "q4_k_m", "--allow-requantize"],
                            out="out.gguf"),
    "compare-dir": Door("compare-dir", ("drafter",), {0, 6, 20}, _compare_dir),
    "compare-gguf": Door("compare-gguf", ("drafter", "target"), {0, 6, 20}, _compare_gguf),
    "retarget": Door("retarget", ("drafter",), {0, 2, 6, 7}, _retarget, out="out.gguf"),
    "retarget-target": Door("retarget-target", ("target", "other"), {0, 6, 7}, _retarget_target, out="out.gguf"),
    "check": Door("check", ("drafter", "target", "other"), CHECK_CODES, lambda d, b, i, o, c, p: ["check", i]),
    "check-instruct-text": Door("check-instruct-text", ("drafter", "target", "other"), {0, 6, 10, 11},
                                lambda d, b, i, o, c, p: ["check-instruct", i, "--allow-unknown"]),
    "check-deep": Door("check-deep", ("drafter", "target", "other"), CHECK_CODES,
                       lambda d, b, i, o, c, p: ["check", i, "--deep", "--no-progress", "--json"], json_doc=True),
    "check-target": Door("check-target", ("drafter", "target"), CHECK_CODES | {13}, _check_target, json_doc=True),
    "check-instruct": Door("check-instruct", ("drafter", "target", "other"), {0, 6, 10, 11},
                           lambda d, b, i, o, c, p: ["check-instruct", i, "--json"], json_doc=True),
}


@pytest.fixture(scope="session")
def pristine_dir(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz-pristine")
    for n, b in corpus.items():
        (d / f"{n}.gguf").write_bytes(b.data)
    return d


@contextlib.contextmanager
def case_dirs():
    root = Path(tempfile.mkdtemp(prefix="dflash-fuzz-"))
    try:
        (root / "in").mkdir()
        (root / "out").mkdir()
        yield root / "in", root / "out"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _input_path(base: Base, indir: Path) -> Path:
    # keep a shard-set name for the shard fixtures: the split-key checks then see hostile values too
    return indir / (f"{base.name}.gguf" if "sharded" in base.name else "in.gguf")


@pytest.mark.parametrize("door", list(DOORS))
@FUZZ
@given(d=st.data())
def test_cli_door(door, d, corpus, layouts, pristine_dir):
    spec = DOORS[door]
    base, case = _pick_input(d, corpus, layouts, spec.roles)
    with case_dirs() as (indir, outdir):
        inp = _input_path(base, indir)
        inp.write_bytes(case.data)
        if "sharded-00001" in base.name:  # its second shard, pristine, beside it
            shutil.copy(pristine_dir / base.name.replace("00001-of", "00002-of").__add__(".gguf"), indir)
        argv = spec.argv(d, base, inp, outdir, corpus, lambda n: pristine_dir / f"{n}.gguf")
        o = judge(door, case, lambda: _cli(argv), spec.allowed, outdir,
                  None if spec.out is None else outdir / spec.out, spec.json_doc)
        if o.verdict == "ok":
            left = sorted(p.name for p in indir.iterdir() if p.suffix == ".tmp" or p.name.startswith("."))
            if left:
                o.verdict, o.detail = "leftover", f"input dir holds {left}"
        o.detail = f"{' '.join(map(str, argv))}: {o.detail}" if o.verdict != "ok" else o.detail
    record(o)


LOADERS = ("drafter_from_gguf", "target_from_gguf")


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed: parity's GGUF loaders (dflash_gguf.reference) "
                                             "need it (pip install -e '.[torch]')")
@pytest.mark.parametrize("loader", LOADERS)
@FUZZ
@given(d=st.data())
def test_parity_loader(loader, d, corpus, layouts):
    from dflash_gguf.reference import load

    roles = ("drafter",) if loader == "drafter_from_gguf" else ("target",)
    base, case = _pick_input(d, corpus, layouts, roles + ("other",) if d.draw(st.booleans()) else roles)
    fn = getattr(load, loader)
    with case_dirs() as (indir, outdir):
        inp = indir / "in.gguf"
        inp.write_bytes(case.data)

        def run():
            fn(inp, device="cpu")
            return 0, "", ""
        o = judge(f"parity-{loader}", case, run, {0, 3, 4, 6}, outdir, None)
    record(o)


# A few runs of the real console entry point (a fresh interpreter: import-time failures and
# exit codes as a shell sees them).
SUBPROCESS_CASES = [
    ("qwen3-flat-lucebox", "non-utf8-arch", ["inspect", "{in}"], {6, 0}),
    ("qwen3-flat-llama.cpp", "cut@300", ["check", "{in}", "--deep"], {6}),
    ("qwen3-dflash2-llama.cpp-q4_k_m", "retype-taps", ["retarget", "{in}", "-o", "{out}/o.gguf"], {6}),
    ("qwen3-8b", "non-utf8-arch", ["check-instruct", "{in}"], {0, 6, 10, 11}),
]


def _entry_point() -> list[str]:
    exe = shutil.which("dflash-gguf")
    # the console script imports whatever dflash_gguf is on its path: put this checkout first
    return [exe] if exe else [sys.executable, "-c", "import sys; from dflash_gguf.cli import main; sys.exit(main())"]


@pytest.mark.parametrize("base,mutation,argv,allowed", SUBPROCESS_CASES, ids=[c[2][0] for c in SUBPROCESS_CASES])
def test_subprocess_entry_point(base, mutation, argv, allowed, corpus, layouts, tmp_path):
    b, lay = corpus[base], layouts[base]
    data = bytearray(b.data)
    if mutation == "non-utf8-arch":
        s, _ = lay.values["general.architecture"]
        data[s + 8] = 0xFF
    elif mutation.startswith("cut@"):
        data = data[: int(mutation[4:])]
    elif mutation == "retype-taps":
        h = parse_header_bytes(bytes(data))
        kvs = [kv if kv.key != f"{h.arch}.target_layers" else KVItem(kv.key, "1,2,3,4", V.STRING)
               for kv in _kv_items(h, bytes(data))]
        data = serialize(kvs, _tensor_items(h, bytes(data)))
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    inp = tmp_path / "in" / "in.gguf"
    inp.write_bytes(bytes(data))
    args = [a.format(**{"in": inp, "out": tmp_path / "out"}) for a in argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DFLASH_DEBUG", None)
    p = subprocess.run(_entry_point() + args, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode in allowed, (p.returncode, p.stderr)
    if p.returncode not in (0, 10, 11, 12, 13):
        assert len([ln for ln in p.stderr.splitlines() if ln.startswith("error:")]) == 1, p.stderr
    assert list((tmp_path / "out").iterdir()) == [] or p.returncode == 0


@pytest.mark.skipif(not KEEP_GOING, reason="only with DFLASH_FUZZ_KEEP_GOING=1 (otherwise each door fails at its "
                                           "first failing case and nothing is recorded)")
def test_no_failures_recorded():
    """With DFLASH_FUZZ_KEEP_GOING=1 the doors record failures instead of stopping; fail here."""
    if FAILURES:
        by = Counter((f.door, f.verdict) for f in FAILURES)
        first = "\n".join(f"{f.door} on {f.case}: {f.verdict}: {f.detail[:600]}" for f in FAILURES[:20])
        pytest.fail(f"{len(FAILURES)} failing cases {dict(by)}; first:\n{first}")


# --- regressions: fixed bugs the fuzz found, as fixed inputs -------------------------------------

def _variant(corpus, base: str, *, kvs: dict[str, KVItem | None] | None = None,
             tensors: Callable[[list[TensorItem]], None] | None = None) -> bytes:
    """``base`` re-written with KVs replaced / added (None drops one) and tensors edited in place."""
    data = corpus[base].data
    h = parse_header_bytes(data)
    items = [kv for kv in _kv_items(h, data) if kv.key not in (kvs or {})]
    items += [kv for kv in (kvs or {}).values() if kv is not None]
    ts = _tensor_items(h, data)
    if tensors:
        tensors(ts)
    return serialize(items, ts)


def _run_case(door: str, data: bytes, argv: Callable[[Path, Path], list[Any]], allowed: set[int],
              out: str | None = None) -> Outcome:
    with case_dirs() as (indir, outdir):
        inp = indir / "in.gguf"
        inp.write_bytes(data)
        args = argv(inp, outdir)
        o = judge(door, Case("regression", " ".join(map(str, args)), data), lambda: _cli(args), allowed, outdir,
                  None if out is None else outdir / out)
    return o


def _assert_clean(o: Outcome) -> None:
    assert o.verdict == "ok", f"{o.door} on {o.case}: {o.verdict}: {o.detail}"


@pytest.mark.parametrize("argv", [
    lambda i, o: ["quantize", i, o / "q.gguf", "q4_k_m"],
    lambda i, o: ["retarget", i, "-o", o / "r.gguf", "--format", "lucebox"],
    lambda i, o: ["inspect", i],
], ids=["quantize", "retarget", "inspect"])
@pytest.mark.parametrize("kv", [
    KVItem("dflash.block_count", "2", V.STRING),               # quantize: int("2") accepted; "abc" ValueError
    KVItem("dflash.block_count", math.inf, V.FLOAT32),         # quantize: OverflowError
    KVItem("general.file_type", b"ab\xffcd", V.STRING),        # retarget / inspect: ValueError from int()
    KVItem("dflash.target_layers", [1.5, 2.5], V.ARRAY, V.FLOAT32),  # retarget: struct.error writing INT32
    KVItem("dflash.block_size", -1, V.INT32),                  # retarget: struct.error writing UINT32
    KVItem("general.architecture", 7, V.UINT32),
], ids=["block_count-str", "block_count-inf", "file_type-nonutf8", "taps-float", "block_size-neg", "arch-int"])
def test_regression_wrong_types(corpus, argv, kv):
    data = _variant(corpus, "qwen3-flat-llama.cpp", kvs={kv.key: kv})
    o = _run_case("regression", data, argv, {0, 6}, out=None)
    if o.verdict == "leftover" and o.code == 0:
        return  # a successful write: the output is expected there
    _assert_clean(o)
    inspect_ok = argv(Path("i"), Path("o"))[0] == "inspect"
    assert o.code == (0 if inspect_ok else 6)


def test_regression_inspect_names_the_drafter_problem(corpus):
    """inspect on a drafter whose file_type is a string exits 0, keeps the
    format it detects from the architecture, and says what is wrong in ``drafter_problem``."""
    bad = KVItem("dflash.target_layers", [1.5, 2.5], V.ARRAY, V.FLOAT32)
    data = _variant(corpus, "qwen3-flat-llama.cpp", kvs={bad.key: bad})
    with case_dirs() as (indir, _):
        (indir / "in.gguf").write_bytes(data)
        code, out, err = _cli(["inspect", indir / "in.gguf", "--json"])
    doc = json.loads(out)
    assert code == 0 and not err and doc["format"] == "llama.cpp" and doc["target_layers"] is None
    assert doc["drafter_problem"].startswith("key dflash.target_layers (at byte ")
    assert "is ARRAY[FLOAT32] [1.5, 2.5], but loaders read an array of integers" in doc["drafter_problem"]
    pristine = _cli(["inspect", Path(tempfile.gettempdir()) / "nonexistent.gguf"])
    assert pristine[0] == 5


def test_regression_quantize_layer_names(corpus):
    """No block_count: the layer count comes from tensor names as llama.cpp parses them
    (``int(name.split('.')[1])`` raised on ``blk.x.``)."""
    from dflash_gguf.quants.gguf_file import requantize_layout

    kvs = [k for k in _kv_items(parse_header_bytes(corpus["qwen3-flat-llama.cpp"].data),
                                corpus["qwen3-flat-llama.cpp"].data)]
    from dflash_gguf.fileio.types import KV as _KV

    kvs = [_KV(k.key, k.value, k.type, k.sub) for k in kvs if k.key != "dflash.block_count"]
    tensors = [("blk.x.ffn_up.weight", (256, 64), Q.F32), ("blk.", (64, 64), Q.F32), ("blk.1.ffn_down.weight", (64, 256), Q.F32)]
    _, entries = requantize_layout(kvs, tensors, "q4_k_m")
    assert [e.name for e in entries] == ["blk.", "blk.x.ffn_up.weight", "blk.1.ffn_down.weight"]


def _zero_rows(ts):
    t = next(t for t in ts if t.name == "blk.0.attn_output.weight")
    t.ne, t.data = (0, t.ne[1]), b""  # ne0 = 0: rows of no values


def test_regression_quantize_zero_element_tensor(corpus):
    """quantize hands the writer no chunk for a tensor with a 0 dimension (a 0-byte chunk would be
    a TypeError from memoryview.cast)."""
    data = _variant(corpus, "qwen3-flat-llama.cpp", tensors=_zero_rows)
    _assert_clean(_run_case("regression", data, lambda i, o: ["quantize", i, o / "q.gguf", "q8_0"], {0}, out="q.gguf"))


# --- bugs the campaign found in other modules, fixed: their reproducers ------------------------

@pytest.mark.parametrize("door,argv", [
    ("inspect", lambda i, o: ["inspect", i]),
    ("quantize", lambda i, o: ["quantize", i, o / "q.gguf", "q8_0"]),
    ("compare", lambda i, o: ["compare-weights", i, i]),
])
def test_regression_markup_in_names(corpus, door, argv):
    def rename(ts):
        ts[1].name = "[/]"
    data = _variant(corpus, "qwen3-flat-llama.cpp",
                    kvs={"general.name": KVItem("general.name", "[red]x[/blue]", V.STRING)}, tensors=rename)
    o = _run_case(door, data, argv, DOC_CODES, out="q.gguf" if door == "quantize" else None)
    _assert_clean(o)


@pytest.mark.parametrize("argv", [lambda i, o: ["quantize", i, o / "q.gguf", "q8_0"],
                                  lambda i, o: ["retarget", i, "-o", o / "q.gguf", "--format", "dflash-draft"]],
                         ids=["quantize", "retarget"])
def test_regression_empty_array_kv(corpus, argv):
    data = _variant(corpus, "qwen3-flat-llama.cpp", kvs={"general.tags": KVItem("general.tags", [], V.ARRAY, V.STRING)})
    o = _run_case("writer", data, argv, {0, 6}, out="q.gguf")
    _assert_clean(o)


@pytest.mark.parametrize("argv", [lambda i, o: ["quantize", i, o / "q.gguf", "q8_0"],
                                  lambda i, o: ["retarget", i, "-o", o / "q.gguf", "--format", "dflash-draft"]],
                         ids=["quantize", "retarget"])
def test_regression_scalar_tensor(corpus, argv):
    def scalar(ts):
        t = next(t for t in ts if t.name == "blk.0.attn_output.weight")
        t.ne, t.type, t.data = (), Q.BF16, b"\x80\x3f"
    o = _run_case("writer", _variant(corpus, "qwen3-flat-llama.cpp", tensors=scalar), argv, {0, 6}, out="q.gguf")
    _assert_clean(o)


def test_regression_target_tokens_of_the_wrong_type(corpus, pristine_dir):
    data = _variant(corpus, "llama-tiny", kvs={"tokenizer.ggml.tokens": KVItem("tokenizer.ggml.tokens", False, V.BOOL)})
    o = _run_case("retarget-target", data, lambda i, o: ["retarget", pristine_dir / "qwen3-flat-lucebox.gguf", "-o",
                                                         o / "r.gguf", "--format", "llama.cpp", "--target-gguf", i],
                  {0, 6, 7}, out="r.gguf")
    _assert_clean(o)


def test_regression_dequantize_zero_width_rows():
    from dflash_gguf.quants import dequantize

    assert dequantize(b"", Q.Q8_0, (4, 0)).shape == (4, 0)


def test_regression_loader_zero_element_tensor(corpus):
    """parity's drafter loader on a Q8_0 tensor with ne0 = 0: a clean WeightsError (shape), not
    numpy's reshape ValueError from the dequantizer."""
    pytest.importorskip("torch", reason="parity's GGUF loaders need torch")
    from dflash_gguf.reference import load

    def zero(ts):
        t = next(t for t in ts if t.name == "blk.0.ffn_up.weight")
        t.ne, t.data = (0, t.ne[1]), b""
    data = _variant(corpus, "qwen3-flat-llama.cpp-q8_0", tensors=zero)
    with case_dirs() as (indir, outdir):
        (indir / "in.gguf").write_bytes(data)
        o = judge("parity-drafter_from_gguf", Case("regression", "zero", data),
                  lambda: (load.drafter_from_gguf(indir / "in.gguf", device="cpu"), (0, "", ""))[1], {4, 6}, outdir, None)
    _assert_clean(o)


def test_regression_retarget_name_collision(corpus):
    """A mainline file with fc.weight and a stray tensor named dflash_fc.weight, retargeted to
    dflash-draft, would hold two tensors named dflash_fc.weight (GGUFWriter's ValueError)."""
    def stray(ts):
        next(t for t in ts if t.name == "blk.0.attn_v.weight").name = "dflash_fc.weight"
    data = _variant(corpus, "qwen3-flat-llama.cpp", tensors=stray)
    o = _run_case("retarget", data, lambda i, o: ["retarget", i, "-o", o / "r.gguf", "--format", "dflash-draft"],
                  {0, 6}, out="r.gguf")
    _assert_clean(o)


def test_regression_target_error_line_escaped(corpus, pristine_dir):
    """A NUL in a target's architecture: the "<arch>.embedding_length is missing" line stays printable."""
    data = bytearray(corpus["llama-tiny"].data)
    h = parse_header_bytes(bytes(data))
    at = h.kv["general.architecture"].offset
    at += 8 + _U64.unpack_from(data, at)[0] + 4 + 8  # key, value type, string length: the value's first byte
    data[at + 1] = 0  # "l\x00ama"
    o = _run_case("retarget-target", bytes(data),
                  lambda i, o: ["retarget", pristine_dir / "qwen3-flat-lucebox.gguf", "-o", o / "r.gguf", "--format",
                                "llama.cpp", "--target-gguf", i], {0, 6, 7}, out="r.gguf")
    assert o.verdict in ("ok", "known"), o.detail
    assert o.verdict == "ok", o.detail
