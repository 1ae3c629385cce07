"""Seeded fuzzing of the header reader and the checks: no traceback, no hang, ever.

Every case is a valid GGUF with one mutation: cut at a section boundary or a random offset,
a length / count / type / offset field overwritten with a hostile value, random byte flips,
inserted or deleted bytes, duplicated names, non-UTF-8 bytes in a string. The only allowed
outcomes are a clean ``GGUFFormatError`` (exit 6) or a parsed header on which every check
and the classifier run without raising. A slice of the cases also goes through the CLI,
whose exit code must be one of the documented ones. Seeded, so a failure names a case that
reproduces.
"""
from __future__ import annotations

import random
import struct
import time
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.guards.run import FILE_CHECKS, MODEL_CHECKS, PAIR_CHECKS
from dflash_gguf.errors import GGUFFormatError
from dflash_gguf.fileio.gguf_header import parse_header_bytes
from dflash_gguf.guards.instruct import classify
from tests.fuzz.limits import time_limit

GUARDS = Path(__file__).resolve().parents[2] / "fixtures" / "guards"
N_HEADER_CASES = 3200
N_CLI_CASES = 160
CASE_TIMEOUT_S = 2.0
CLI_EXIT_CODES = {0, 6, 10, 11, 12, 13}
U32, U64 = struct.Struct("<I"), struct.Struct("<Q")
HOSTILE = [0, 1, 2, 7, 13, 255, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _rich(tmp: Path) -> bytes:
    """A file using every value type, nested and string arrays, quantized tensors, alignment 64."""
    w = gguf.GGUFWriter(tmp / "rich.gguf", "qwen3")
    V = gguf.GGUFValueType
    w.add_custom_alignment(64)  # sets the key and the writer's padding (add_uint32 would only set the key)
    for t, v in {V.UINT8: 1, V.INT8: -1, V.UINT16: 2, V.INT16: -2, V.UINT32: 3, V.INT32: -3, V.FLOAT32: 0.5,
                 V.BOOL: True, V.STRING: "s", V.UINT64: 4, V.INT64: -4, V.FLOAT64: 0.25}.items():
        w.add_key_value(f"k.{t.name.lower()}", v, t)
    w.add_array("k.nested", [[1, 2], [3]])
    w.add_array("k.bools", [True, False, True])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "<|im_end|>", "é"])
    w.add_eos_token_id(2)
    w.add_chat_template("{{'<|im_start|>'}}")
    w.add_tensor("blk.0.q8", gguf.quantize(np.ones((2, 64), np.float32), gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.f16", np.ones(48, np.float16))
    w.add_tensor("scalar", np.ones(1, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return (tmp / "rich.gguf").read_bytes()


def field_map(data: bytes) -> tuple[list[int], list[tuple[int, int, str]], list[tuple[int, int]]]:
    """Walk a *valid* file: section boundaries, (pos, size, kind) of every length/count/type/
    offset field, and (pos, len) of every string's bytes."""
    bounds, fields, strings = [0, 4, 8, 16, 24], [(4, 4, "version"), (8, 8, "count"), (16, 8, "count")], []
    n_t, n_kv = U64.unpack_from(data, 8)[0], U64.unpack_from(data, 16)[0]
    pos = 24

    def string(pos):
        n = U64.unpack_from(data, pos)[0]
        fields.append((pos, 8, "length"))
        strings.append((pos + 8, n))
        return pos + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(pos, t):
        if t in sizes:
            return pos + sizes[t]
        if t == 8:
            return string(pos)
        it, n = U32.unpack_from(data, pos)[0], U64.unpack_from(data, pos + 4)[0]
        fields.extend([(pos, 4, "type"), (pos + 4, 8, "count")])
        pos += 12
        for _ in range(n):
            pos = value(pos, it)
        return pos

    for _ in range(n_kv):
        bounds.append(pos)
        pos = string(pos)
        fields.append((pos, 4, "type"))
        pos = value(pos + 4, U32.unpack_from(data, pos)[0])
    for _ in range(n_t):
        bounds.append(pos)
        pos = string(pos)
        nd = U32.unpack_from(data, pos)[0]
        fields.append((pos, 4, "n_dims"))
        fields.extend((pos + 4 + 8 * j, 8, "dim") for j in range(nd))
        pos += 4 + 8 * nd
        fields.extend([(pos, 4, "ggml_type"), (pos + 4, 8, "offset")])
        pos += 12
    bounds.append(pos)
    h = parse_header_bytes(data)
    bounds += [h.data_offset] + [t.offset_abs for t in h.tensors] + [t.end for t in h.tensors]
    return sorted(set(bounds)), fields, strings


def mutate(data: bytes, fmap, rng: random.Random) -> tuple[str, bytes]:
    bounds, fields, strings = fmap
    kind = rng.choice(["cut-boundary", "cut-random", "field", "field", "flip", "insert-delete",
                       "duplicate-name", "non-utf8", "header-count"])
    b = bytearray(data)
    if kind == "cut-boundary":
        cut = max(0, rng.choice(bounds) + rng.choice([-1, 0, 0, 1]))
        return f"{kind}@{cut}", bytes(b[:cut])
    if kind == "cut-random":
        cut = rng.randrange(len(b))
        return f"{kind}@{cut}", bytes(b[:cut])
    if kind in ("field", "header-count"):
        pos, size, what = fields[rng.randrange(3)] if kind == "header-count" else rng.choice(fields)
        v = rng.choice(HOSTILE + [rng.getrandbits(8 * size), len(data), len(data) + 1, -1 & (2**64 - 1)])
        v &= (1 << (8 * size)) - 1
        b[pos:pos + size] = v.to_bytes(size, "little")
        return f"{kind}:{what}@{pos}={v}", bytes(b)
    if kind == "flip":
        hdr_end = max(bounds[:-1]) if len(bounds) > 1 else len(b)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(min(len(b), hdr_end + 64))
            b[pos] ^= 1 << rng.randrange(8)
        return kind, bytes(b)
    if kind == "insert-delete":
        pos = rng.randrange(len(b))
        if rng.random() < 0.5:
            n = rng.randint(1, 9)
            return f"delete@{pos}+{n}", bytes(b[:pos] + b[pos + n:])
        return f"insert@{pos}", bytes(b[:pos] + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 9))) + b[pos:])
    if kind == "duplicate-name":
        by_len: dict[int, list[int]] = {}
        for pos, n in strings:
            if 0 < n < 128:
                by_len.setdefault(n, []).append(pos)
        pairs = [v for v in by_len.values() if len(v) > 1]
        if pairs:
            src, dst = rng.sample(rng.choice(pairs), 2)
            n = next(n for p, n in strings if p == src)
            b[dst:dst + n] = data[src:src + n]
            return f"{kind}@{dst}", bytes(b)
    pos, n = rng.choice([s for s in strings if s[1]] or [(4, 1)])
    b[pos + rng.randrange(n)] = rng.choice([0xFF, 0xC0, 0x80, 0xFE])
    return f"non-utf8@{pos}", bytes(b)


def exercise(data: bytes, name: str = "fuzz.gguf") -> str:
    """Parse, then run every check; returns the outcome class. Anything else raising fails."""
    try:
        h = parse_header_bytes(data, name)
    except GGUFFormatError as e:
        assert str(e).isprintable(), f"messages are one printable line: {e!r}"
        return type(e).__name__
    findings = [f for chk in FILE_CHECKS + MODEL_CHECKS for f in chk(h)]
    findings += [f for chk in PAIR_CHECKS for f in chk(h, h)]
    for f in findings:
        assert (f.message + f.where).isprintable(), f"findings are one printable line: {f!r}"
    for e in classify(h).evidence:
        assert e.value.isprintable(), f"evidence is shown on one line: {e!r}"
    return "parsed"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    files = [_rich(tmp)] + [(GUARDS / n).read_bytes() for n in
                            ("qwen3-8b.gguf", "gemma-3-1b-it.gguf", "qwen3-8b-sharded-00002-of-00002.gguf",
                             "qwen3-8b-dflash.gguf")]
    return [(d, field_map(d)) for d in files]


def test_fuzz_header_and_checks(corpus):
    rng = random.Random(20260521)
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    cases = 0
    # Every boundary of every corpus file, cut exactly there, plus seeded random mutations.
    deterministic = [(i, cut) for i, (_, (bounds, _, _)) in enumerate(corpus) for cut in bounds]
    for i, cut in deterministic:
        data = corpus[i][0]
        with time_limit(CASE_TIMEOUT_S, f"file{i}/cut@{cut}"):
            outcomes[exercise(data[:cut])] += 1
        cases += 1
    while cases < N_HEADER_CASES:
        i = rng.randrange(len(corpus))
        data, fmap = corpus[i]
        label, mutated = mutate(data, fmap, rng)
        t0 = time.perf_counter()
        with time_limit(CASE_TIMEOUT_S, f"file{i}/{label}"):
            try:
                outcomes[exercise(mutated)] += 1
            except AssertionError:
                raise
            except Exception as e:  # a traceback: report the reproducible case
                raise AssertionError(f"file{i}/{label}: {type(e).__name__}: {e}") from e
        slowest = max(slowest, time.perf_counter() - t0)
        cases += 1
    print(f"\n{cases} cases, slowest {slowest * 1e3:.1f} ms: {dict(outcomes)}")
    assert cases >= N_HEADER_CASES
    assert outcomes["parsed"] > 100 and outcomes["TruncatedError"] > 100  # the mutator reaches both sides
    assert len(outcomes) >= 7  # and many distinct failure classes


def test_fuzz_cli_exit_codes(corpus, tmp_path, capsys):
    from dflash_gguf.cli import main

    rng = random.Random(7)
    seen: Counter[int] = Counter()
    for n in range(N_CLI_CASES):
        i = rng.randrange(len(corpus))
        data, fmap = corpus[i]
        label, mutated = mutate(data, fmap, rng)
        # every other case named as a one-shard set, so the split-key checks see hostile values too
        p = tmp_path / (f"c{n % 8}.gguf" if n % 2 else f"c{n % 8}-00001-of-00001.gguf")
        p.write_bytes(mutated)
        for args in (["check", str(p), "--deep", "--no-progress"], ["check-instruct", str(p)],
                     ["check", str(p), "--target", str(p), "--json"]):
            with time_limit(CASE_TIMEOUT_S, f"file{i}/{label} {args[0]}"):
                code = main(args)
            capsys.readouterr()
            assert code in CLI_EXIT_CODES, f"file{i}/{label} {args}: exit {code}"
            seen[code] += 1
    print(f"\nCLI exit codes over {3 * N_CLI_CASES} runs: {dict(seen)}")
    assert seen[6] and seen[0]
