"""Header bombs: a few KB of real bytes whose header declares millions of items, the rest of the
file a hole (``truncate``), so every declared byte "exists" and only the header's total budget
(``header_records.HEADER_BUDGET``) stands between the file and gigabytes of memory.

Every bomb runs through every command that reads a header (``check``, ``check-instruct``,
``inspect``, ``convert --target-gguf``; ``quantize`` where it gets past the header) as a whole
process: a documented exit code, one ``error:`` line, no traceback, peak RSS and wall time
bounded. Before the budget, the worst of these took 9.3 GB and 170 s.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from dflash_gguf.errors import (
    EXIT_BASE,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNKNOWN,
    GGUFFormatError,
    TargetError,
)
from dflash_gguf.fileio.gguf_constants import GGUFValueType as V
from dflash_gguf.fileio.header_records import (
    COST_NESTED_ARRAY,
    COST_NUMBER,
    HEADER_BUDGET,
)
from tests.conftest import FIXTURES
from tests.redteam.harness import Run, assert_bounded, assert_one_line_error, run_cli

DRAFTER = FIXTURES / "drafters" / "qwen3-flat"
CORRUPT = GGUFFormatError.exit_code
# Generous: header-only commands use ~20 MiB and a real 262k vocabulary ~60 MiB; a bomb that
# gets through uses gigabytes (and RLIMIT_AS turns that into a failure, not a dead machine).
RSS_MIB, WALL_S, AS_MIB = 300, 10, 3072
HUGE = 1 << 24  # items a bomb declares (llama.cpp's and our per-array cap is higher or equal)


# --- building bombs: struct for the real bytes, seek/truncate for the holes -------------------

def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _head(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _array(item: V, n: int) -> bytes:
    """An ARRAY value's type, item type and count (its items follow)."""
    return struct.pack("<IIQ", V.ARRAY, item, n)


_ITEM_SIZE = {V.UINT8: 1, V.INT8: 1, V.FLOAT32: 4, V.STRING: 8}  # a STRING of zeros is empty


def _write(path: Path, parts: list[bytes | int]) -> Path:
    """``parts``: bytes written, ints skipped (a hole of zeros)."""
    with open(path, "wb") as f:
        for p in parts:
            if isinstance(p, int):
                f.seek(p, 1)
            else:
                f.write(p)
        f.truncate(f.tell() + 64)
    return path


def many_arrays(keys: int, item: V, n: int) -> Callable[[Path], Path]:
    """``keys`` keys, each an array of ``n`` zero items (UINT8 0, FLOAT32 0.0, STRING "")."""
    def build(path: Path) -> Path:
        parts: list[bytes | int] = [_head(0, keys)]
        for k in range(keys):
            parts += [_s(b"bomb.%d" % k) + _array(item, n), n * _ITEM_SIZE[item]]
        return _write(path, parts)
    return build


def nested(n: int, depth: int = 2, inner: V = V.UINT8, inner_n: int = 0) -> Callable[[Path], Path]:
    """One key: ``depth`` levels of ARRAY, ``n`` items each, the innermost arrays of ``inner_n``
    zero ``inner`` items (empty UINT8 arrays, the default, are 12 zero bytes each: a hole)."""
    def value(d: int) -> list[bytes | int]:
        if d == 1:
            return [struct.pack("<IQ", inner, inner_n), inner_n * _ITEM_SIZE[inner]]
        empty = d == 2 and inner == V.UINT8 and not inner_n
        return [struct.pack("<IQ", V.ARRAY, n)] + ([12 * n] if empty else value(d - 1) * n)

    def build(path: Path) -> Path:
        return _write(path, [_head(0, 1), _s(b"bomb.nested") + struct.pack("<I", V.ARRAY), *value(depth)])
    return build


def big_strings(keys: int, nbytes: int) -> Callable[[Path], Path]:
    """``keys`` scalar STRING values of ``nbytes`` zero bytes each (valid UTF-8: NULs)."""
    def build(path: Path) -> Path:
        parts: list[bytes | int] = [_head(0, keys)]
        for k in range(keys):
            parts += [_s(b"bomb.str.%d" % k) + struct.pack("<IQ", V.STRING, nbytes), nbytes]
        return _write(path, parts)
    return build


def long_string_items(keys: int, n: int, nbytes: int) -> Callable[[Path], Path]:
    """``keys`` string arrays of ``n`` items of ``nbytes`` zero bytes: the budget spent on text."""
    def build(path: Path) -> Path:
        parts: list[bytes | int] = [_head(0, keys)]
        for k in range(keys):
            parts += [_s(b"bomb.vocab.%d" % k) + _array(V.STRING, n)] + [struct.pack("<Q", nbytes), nbytes] * n
        return _write(path, parts)
    return build


# Over the budget: the parse must refuse them, in milliseconds, naming key and byte.
OVER = {
    "nested-16M-empty": nested(HUGE),
    "nested-4M-empty": nested(1 << 22),
    "nested-depth3": nested(1 << 12, depth=3),
    "nested-float32": nested(64, inner=V.FLOAT32, inner_n=1 << 20),
    "nested-strings": nested(64, inner=V.STRING, inner_n=1 << 20),
    "20x16M-uint8": many_arrays(20, V.UINT8, HUGE),
    "20x16M-int8": many_arrays(20, V.INT8, HUGE),
    "20x16M-float32": many_arrays(20, V.FLOAT32, HUGE),
    "20x16M-strings": many_arrays(20, V.STRING, HUGE),
    "200x4MiB-strings": big_strings(200, 4 << 20),
    "string-items-text": long_string_items(80, 16, 1 << 20),
}
# Just under the budget: valid (if odd) files that must still parse, bounded.
UNDER = {
    "nested-just-under": nested(HEADER_BUDGET // COST_NESTED_ARRAY - 64),
    "float32-just-under": many_arrays(4, V.FLOAT32, HEADER_BUDGET // COST_NUMBER // 4 - 1024),
}


def _doors(bomb: Path, tmp_path: Path) -> dict[str, list]:
    return {"check": ["check", bomb], "check-instruct": ["check-instruct", bomb], "inspect": ["inspect", bomb],
            "convert": ["convert", DRAFTER, "--target-gguf", bomb, "-o", tmp_path / "out.gguf"]}


def _assert_clean(r: Run, code: int) -> None:
    """``code``, no traceback; a verdict (check's 12, check-instruct's 10/11) is on stdout,
    any other failure one ``error:`` line."""
    if code in (EXIT_BASE, EXIT_FINDINGS, EXIT_UNKNOWN):
        assert r.code == code and "Traceback" not in r.stderr and "error:" not in r.stderr, str(r)
    else:
        assert_one_line_error(r, code)


def _run(args: list, door: str) -> Run:
    # convert imports numpy, whose start-up maps more address space than a header-only command
    return run_cli(args, timeout=60, address_space_mib=None if door == "convert" else AS_MIB)


@pytest.mark.parametrize("door", ["check", "check-instruct", "inspect", "convert"])
@pytest.mark.parametrize("bomb", sorted(OVER))
def test_bomb_over_budget_is_refused(tmp_path, bomb, door):
    path = OVER[bomb](tmp_path / f"{bomb}.gguf")
    assert path.stat().st_blocks * 512 < 64 << 20, "the bomb must stay sparse"
    r = _run(_doors(path, tmp_path)[door], door)
    assert_one_line_error(r, CORRUPT)
    assert "byte" in r.stderr and "bomb." in r.stderr, str(r)  # names the key and the offset
    assert len(r.stderr) < 600, str(r)
    assert_bounded(r, rss_mib=RSS_MIB, wall_s=WALL_S)
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize("door", ["check", "check-instruct", "inspect", "convert"])
@pytest.mark.parametrize("bomb", sorted(UNDER))
def test_bomb_under_budget_still_parses(tmp_path, bomb, door):
    path = UNDER[bomb](tmp_path / f"{bomb}.gguf")
    r = _run(_doors(path, tmp_path)[door], door)
    # no architecture: check reports errors, check-instruct cannot tell, convert has no target
    expected = {"check": EXIT_FINDINGS, "check-instruct": EXIT_UNKNOWN, "inspect": EXIT_OK,
                "convert": TargetError.exit_code}[door]
    _assert_clean(r, expected)
    assert_bounded(r, rss_mib=RSS_MIB, wall_s=WALL_S)


def test_quantize_refuses_a_bomb(tmp_path):
    path = OVER["20x16M-float32"](tmp_path / "bomb.gguf")
    r = run_cli(["quantize", path, tmp_path / "q.gguf", "q8_0"], timeout=60)
    assert_one_line_error(r, CORRUPT)
    assert_bounded(r, rss_mib=RSS_MIB, wall_s=WALL_S)
    assert not (tmp_path / "q.gguf").exists()


# --- a real-size vocabulary stays fast ----------------------------------------------------------

def _vocab(path: Path, n: int) -> Path:
    """A Qwen3.5/Gemma-size tokenizer: n tokens, n merges, n float scores, n int32 types."""
    toks = [b"tok%d" % i + b"x" * (i % 13) for i in range(n)]
    kvs = [_s(b"general.architecture") + struct.pack("<I", V.STRING) + _s(b"qwen3"),
           _s(b"tokenizer.ggml.model") + struct.pack("<I", V.STRING) + _s(b"gpt2"),
           _s(b"tokenizer.ggml.tokens") + _array(V.STRING, n) + b"".join(map(_s, toks)),
           _s(b"tokenizer.ggml.scores") + _array(V.FLOAT32, n) + struct.pack(f"<{n}f", *(i / 7 for i in range(n))),
           _s(b"tokenizer.ggml.token_type") + _array(V.INT32, n) + struct.pack(f"<{n}i", *([1] * n)),
           _s(b"tokenizer.ggml.merges") + _array(V.STRING, n) + b"".join(_s(t + b" " + t) for t in toks)]
    path.write_bytes(_head(0, len(kvs)) + b"".join(kvs))
    return path


@pytest.mark.parametrize("door", ["check", "check-instruct", "inspect"])
def test_real_size_vocabulary_parses(tmp_path, door):
    path = _vocab(tmp_path / "vocab.gguf", 262_144)
    r = _run(_doors(path, tmp_path)[door], door)
    # a tokenizer without a chat template: check-instruct's verdict is "base"
    _assert_clean(r, {"check": EXIT_OK, "check-instruct": EXIT_BASE, "inspect": EXIT_OK}[door])
    assert_bounded(r, rss_mib=150, wall_s=WALL_S)


# --- zero-element tensors with a huge other dimension ------------------------------------------

def _zero_tensor(path: Path, ne: tuple[int, ...], name: bytes = b"blk.0.attn_q.weight") -> Path:
    """An F32 file with a zero-element tensor ``ne`` and a normal [32, 2] one after it."""
    def info(nm: bytes, dims: tuple[int, ...], off: int) -> bytes:
        return _s(nm) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<IQ", 0, off)
    out = (_head(2, 1) + _s(b"general.architecture") + struct.pack("<I", V.STRING) + _s(b"llama")
           + info(name, ne, 0) + info(b"blk.0.attn_k.weight", (32, 2), 0))
    path.write_bytes(out + bytes(-len(out) % 32) + bytes(256))
    return path


@pytest.mark.parametrize("ne, check_code", [
    ((1 << 40, 0), EXIT_FINDINGS),   # ggml's writers drop the trailing 0: [2^40], no data
    ((0, 1 << 40), EXIT_OK),         # kept as is by every writer: a warning
    ((4096, 0, 1 << 40), EXIT_OK),
    ((1 << 40, 0, 1, 1), EXIT_FINDINGS),
])
@pytest.mark.parametrize("qtype", ["q8_0", "q4_k_m"])
def test_zero_element_tensor(tmp_path, ne, check_code, qtype):
    path = _zero_tensor(tmp_path / "z.gguf", ne)
    r = run_cli(["check", path], address_space_mib=AS_MIB)
    _assert_clean(r, check_code)
    assert ("empty-tensor-shape" in r.stdout) == (check_code == EXIT_FINDINGS), str(r)
    out = tmp_path / "q.gguf"
    r = run_cli(["quantize", path, out, qtype], timeout=60)
    assert_one_line_error(r, EXIT_OK)
    assert_bounded(r, rss_mib=RSS_MIB, wall_s=30)
    back = run_cli(["inspect", "--json", out], address_space_mib=AS_MIB)
    assert back.code == EXIT_OK and '"nbytes": 0' in back.stdout, str(back)
