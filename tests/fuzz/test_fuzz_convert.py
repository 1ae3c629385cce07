"""Fuzz the ``convert`` door with corrupted config.json, safetensors headers and shard indexes.

Every case must end in exit 0 or a documented exit code (docs/exit-codes.md) with one
``error:`` line on stderr: never a traceback, never a hang, never a file left in the output
directory. Inputs are the bundled fixtures, copied to a temp dir and mutated.

CI runs a small derandomized budget; ``DFLASH_FUZZ_EXAMPLES=10000`` runs a long offline
session (docs/fuzzing.md). The CLI runs in-process (fast); a few subprocess runs prove the
real console entry point too.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_gguf import errors
from dflash_gguf.cli import main

from tests.conftest import DRAFTERS, ROOT, TARGETS
from tests.fuzz.limits import time_limit

try:
    import torch  # noqa: F401  (parity's loader is fuzzed too when torch is installed)
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# Total examples over the property tests below, shared out by weight. CI keeps it small.
TOTAL = int(os.environ.get("DFLASH_FUZZ_EXAMPLES", "400"))
CASE_TIMEOUT_S = float(os.environ.get("DFLASH_FUZZ_CASE_TIMEOUT", "30"))
# What convert may answer (docs/exit-codes.md): success, or one of the failure classes it raises.
CONVERT_CODES = {0} | {c.exit_code for c in (errors.UsageError, errors.ConfigError, errors.WeightsError,
                                              errors.InputError, errors.OutputError, errors.TargetError,
                                              errors.QuantizationError)}


def fuzz_settings(weight: float):
    return settings(
        max_examples=max(1, round(TOTAL * weight)),
        derandomize=True,  # same cases on every CI run
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


# --- running one case -------------------------------------------------------------------------
def run_convert(drafter: Path, out_dir: Path, extra: list[str]) -> tuple[int, str]:
    """Run ``dflash-gguf convert`` in-process; returns (exit code, stderr)."""
    err, out = io.StringIO(), io.StringIO()
    with time_limit(CASE_TIMEOUT_S, "convert"), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["convert", str(drafter), "-o", str(out_dir / "d.gguf"), *extra])
    return code, err.getvalue()


def load_for_parity(drafter: Path) -> None:
    """parity's drafter-dir loader (``reference.load_drafter``) on the same input: a drafter or a
    DflashError (which the CLI prints as one line), never another exception."""
    if not HAVE_TORCH:
        return
    from dflash_gguf.reference import load_drafter

    with time_limit(CASE_TIMEOUT_S, "parity's drafter loader"):
        try:
            load_drafter(drafter)
        except errors.DflashError:
            pass


def check_outcome(code: int, stderr: str, out_dir: Path, extra: list[str]) -> None:
    assert code in CONVERT_CODES, f"exit {code} is not a documented convert outcome; stderr: {stderr!r}"
    assert "Traceback" not in stderr, stderr
    left = sorted(p.name for p in out_dir.iterdir())
    if code == 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert all(line.startswith("warning:") for line in lines), stderr
        assert left == ([] if "--dry-run" in extra else ["d.gguf"]), left
    else:
        assert stderr.startswith("error: ") and stderr.count("\n") == 1, f"not one error line: {stderr!r}"
        assert left == [], f"exit {code} left {left} behind"


def convert_case(build, extra: list[str]) -> None:
    """Build a drafter dir with ``build(dir)``, convert it, and check the outcome."""
    with tempfile.TemporaryDirectory() as td:
        drafter, out_dir = Path(td, "drafter"), Path(td, "out")
        drafter.mkdir()
        out_dir.mkdir()
        build(drafter)
        code, stderr = run_convert(drafter, out_dir, extra)
        check_outcome(code, stderr, out_dir, extra)
        load_for_parity(drafter)


# --- fixtures as data ---------------------------------------------------------------------------
BASES = ("qwen3-flat", "qwen3-dflash2")


def _load_base(name: str):
    cfg = json.loads((DRAFTERS / name / "config.json").read_text())
    blob = (DRAFTERS / name / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    return cfg, json.loads(blob[8:8 + n]), blob[8 + n:]


BASE = {name: _load_base(name) for name in BASES}


def st_bytes(header, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def write_dir(d: Path, cfg, st_blob: bytes | None) -> None:
    (d / "config.json").write_text(json.dumps(cfg))
    if st_blob is not None:
        (d / "model.safetensors").write_bytes(st_blob)


# Extra args: a tokenizer-free format reaches the plan and the writer; with a target the
# llama.cpp formats and the target checks are exercised too; quantized outtypes hit quants.
EXTRA = st.sampled_from([
    ["--format", "lucebox"],
    ["--format", "lucebox", "--outtype", "f16"],
    ["--format", "lucebox", "--outtype", "q8_0"],
    ["--format", "lucebox", "--dry-run", "--json"],
    ["--target-dir", str(TARGETS / "qwen3-tiny")],
    ["--format", "dflash-draft", "--target-dir", str(TARGETS / "qwen3-tiny"), "--outtype", "q4_k_m"],
])

# Values of the wrong type or range for any key.
NASTY = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, 1, 2, 3, 7, 2**31, 2**32, 2**63, 2**64, -2**63, 10**30, 10**400]),
    st.integers(),
    st.sampled_from([0.0, -0.0, 0.5, -1.5, 1e-300, 1e300, math.nan, math.inf, -math.inf, 1e6, 4.0]),
    st.floats(),
    st.sampled_from(["", "abc", "1e6", "nan", "16", "true", "BF16", "yarn", "llama3", "linear",
                     "sliding_attention", "full_attention", "DFlashDraftModel", "a\nb"]),
    st.text(max_size=6),
    st.lists(st.integers(-3, 10), max_size=5),
    st.lists(st.one_of(st.none(), st.text(max_size=3), st.floats(), st.booleans()), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=3),
    st.sampled_from([{}, [], [[1]], {"rope_theta": 1e6}, {"rope_type": "yarn"}]),
).map(copy.deepcopy)  # sampled containers are shared objects; mutations must not leak between cases

# --- config.json ------------------------------------------------------------------------------
def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


_KNOWN = [  # keys the parser reads that the fixtures do not (all) spell
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "layer_types",
    "use_sliding_window", "sliding_window", "is_causal", "final_logit_softcapping", "input_embedding_scale",
    "output_multiplier", "target_hidden_size", "mask_token_id", "block_size", "target_layer_ids",
    "num_target_layers", "head_dim", "num_key_value_heads", "max_position_embeddings", "attention_bias",
    "tie_word_embeddings", "model_type", "architectures",
]
_NESTED = {
    "rope_parameters": ["rope_theta", "rope_type", "factor", "original_max_position_embeddings",
                        "partial_rotary_factor", "full_attention", "low_freq_factor", "high_freq_factor"],
    "rope_scaling": ["rope_type", "type", "factor", "original_max_position_embeddings", "low_freq_factor",
                     "high_freq_factor", "beta_fast", "beta_slow", "attention_factor"],
    "dflash_config": ["mask_token_id", "target_layer_ids", "block_size", "use_swa", "swa_window_size", "causal",
                      "attention_value_scale", "target_hidden_size", "conv_kernel_size", "conv_group_size",
                      "selector_rank", "selector_top_k", "final_logit_softcapping", "input_embedding_scale",
                      "output_multiplier"],
}
KEY_PATHS = sorted(
    {p for name in BASES for p in _paths(BASE[name][0])}
    | {(k,) for k in _KNOWN}
    | {(outer, inner) for outer, inners in _NESTED.items() for inner in inners},
    key=repr,
)
random.Random(0).shuffle(KEY_PATHS)  # hypothesis favours early entries; do not let that be "architectures"


# Valid-typed starting points that reach deeper code (scaling maths, SWA, per-layer rope).
PRESETS = [
    {},
    {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1024,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                      "beta_fast": 32, "beta_slow": 1}},
    {"rope_scaling": {"type": "linear", "factor": 2.0}},
    {"rope_parameters": {"rope_theta": 1e6, "rope_type": "longrope", "factor": 2.0}},
    {"rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                         "sliding_attention": {"rope_theta": 1e4}}},
    {"partial_rotary_factor": 0.5},
    {"layer_types": ["sliding_attention", "full_attention"], "use_sliding_window": True, "sliding_window": 8},
]


def _set(cfg, path, value) -> None:
    node = cfg
    for k in path[:-1]:
        if isinstance(node, dict):
            if not isinstance(node.get(k), (dict, list)):
                node[k] = {}
            node = node[k]
        elif isinstance(node, list) and isinstance(k, int) and k < len(node):
            node = node[k]
        else:
            return
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)):
        node[path[-1]] = value


def _delete(cfg, path) -> None:
    node = cfg
    for k in path[:-1]:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)
    elif isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node):
        del node[path[-1]]


@st.composite
def mutated_config(draw):
    base = draw(st.sampled_from(BASES))
    cfg = json.loads(json.dumps(BASE[base][0]))
    for k, v in draw(st.sampled_from(PRESETS)).items():
        cfg[k] = json.loads(json.dumps(v))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(KEY_PATHS))
        action = draw(st.sampled_from(["set", "set", "near", "delete"]))
        if action == "delete":
            _delete(cfg, path)
        elif action == "near":  # a plausible number: passes type checks, tests consistency checks
            _set(cfg, path, draw(st.one_of(st.integers(-2, 70), st.sampled_from([0.25, 1.0, 1e-6, 65536]))))
        else:
            _set(cfg, path, draw(NASTY))
    return base, cfg


@fuzz_settings(0.4)
@given(case=mutated_config(), extra=EXTRA)
def test_fuzz_config_values(case, extra):
    base, cfg = case
    convert_case(lambda d: write_dir(d, cfg, st_bytes(BASE[base][1], BASE[base][2])), extra)


DEEP = b"[" * 100_000  # json's RecursionError
HUGE_INT = b'{"hidden_size": ' + b"9" * 5000 + b"}"  # json's ValueError: over 4300 digits
_CONFIG_TEXT = (DRAFTERS / "qwen3-flat" / "config.json").read_bytes()
CONFIG_FILES = st.one_of(
    st.just(b""),
    st.binary(max_size=64),
    st.builds(lambda n: _CONFIG_TEXT[:n], st.integers(0, len(_CONFIG_TEXT) - 1)),  # truncated JSON
    st.builds(lambda b: b + _CONFIG_TEXT, st.sampled_from([b"\xff\xfe", b"\x80", b"\xef\xbb\xbf"])),
    st.builds(lambda v: json.dumps(v).encode(), NASTY),  # valid JSON, not an object
    st.just(b"NaN"), st.just(DEEP), st.just(HUGE_INT),
)


@fuzz_settings(0.1)
@given(blob=CONFIG_FILES, layout=st.sampled_from(["file", "file", "file", "file", "missing", "directory"]))
def test_fuzz_config_file(blob, layout):
    def build(d):
        (d / "model.safetensors").write_bytes(st_bytes(BASE["qwen3-flat"][1], BASE["qwen3-flat"][2]))
        if layout == "file":
            (d / "config.json").write_bytes(blob)
        elif layout == "directory":
            (d / "config.json").mkdir()

    convert_case(build, ["--format", "lucebox"])


# --- safetensors headers ------------------------------------------------------------------------
ST_FIELDS = ("dtype", "shape", "data_offsets")
DTYPES = ["BF16", "F16", "F32", "F64", "I8", "U8", "BOOL", "I64", "F8_E4M3", "bf16", "Q8_0", ""]


@st.composite
def mutated_safetensors(draw):
    base = draw(st.sampled_from(BASES))
    cfg, header, data = BASE[base]
    header = json.loads(json.dumps(header))
    names = [n for n in header if n != "__metadata__"]
    prefix = None
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["field", "field", "entry", "dtype", "shape", "offsets", "metadata",
                                     "truncate", "trailing", "extra", "rename", "drop", "prefix", "header_bytes"]))
        name = draw(st.sampled_from(names))
        if isinstance(header, bytes) or name not in header:
            continue
        entry = header[name]
        if kind == "field" and isinstance(entry, dict):
            field = draw(st.sampled_from(ST_FIELDS))
            if draw(st.booleans()):
                entry.pop(field, None)
            else:
                entry[field] = draw(NASTY)
        elif kind == "entry":
            header[name] = draw(NASTY)
        elif kind == "dtype" and isinstance(entry, dict):
            entry["dtype"] = draw(st.sampled_from(DTYPES))
        elif kind == "shape" and isinstance(entry, dict) and isinstance(entry.get("shape"), list):
            shape = entry["shape"]
            op = draw(st.sampled_from(["dim", "append", "drop", "zero"]))
            if op == "dim" and shape:
                shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(-2, 2**40))
            elif op == "append":
                shape.append(draw(st.integers(0, 4)))
            elif op == "drop" and shape:
                shape.pop()
            elif op == "zero":
                entry["shape"] = [0] * len(shape)
        elif kind == "offsets" and isinstance(entry, dict):
            other = header.get(draw(st.sampled_from(names)))  # may have been renamed or dropped
            entry["data_offsets"] = draw(st.one_of(
                st.lists(st.integers(-10, len(data) + 10), min_size=2, max_size=2),
                st.just(copy.deepcopy(other.get("data_offsets")) if isinstance(other, dict) else None),  # overlap
                st.just([len(data), len(data) + 2**62]),
            ))
        elif kind == "metadata":
            header["__metadata__"] = draw(NASTY)
        elif kind == "truncate":
            data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
        elif kind == "trailing":
            data = data + draw(st.binary(min_size=1, max_size=16))
        elif kind == "extra":
            header[draw(st.text(max_size=12))] = draw(st.one_of(NASTY, st.fixed_dictionaries({
                "dtype": st.sampled_from(DTYPES), "shape": st.lists(st.integers(0, 8), max_size=3),
                "data_offsets": st.lists(st.integers(0, len(data) + 8), min_size=2, max_size=2)})))
        elif kind == "rename":
            header[draw(st.text(max_size=12))] = header.pop(name)
        elif kind == "drop":
            del header[name]
        elif kind == "prefix":
            prefix = draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 3000)))
        elif kind == "header_bytes":
            header = draw(st.one_of(st.binary(max_size=40), st.sampled_from([b"\xff\xfe{}", b"[]", b"null", b"1", DEEP, HUGE_INT])))
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(blob) if prefix is None else prefix
    return cfg, struct.pack("<Q", length) + blob + data


@fuzz_settings(0.35)
@given(case=mutated_safetensors(), extra=EXTRA)
def test_fuzz_safetensors_header(case, extra):
    cfg, blob = case
    convert_case(lambda d: write_dir(d, cfg, blob), extra)


# --- sharded index ------------------------------------------------------------------------------
def _shards(header, data) -> dict[str, bytes]:
    """The fixture split into two shards, each re-based at offset 0."""
    names = sorted(n for n in header if n != "__metadata__")
    out = {}
    for i, part in enumerate((names[::2], names[1::2]), 1):
        h, chunks, pos = {}, [], 0
        for n in part:
            a, b = header[n]["data_offsets"]
            h[n] = {**header[n], "data_offsets": [pos, pos + b - a]}
            chunks.append(data[a:b])
            pos += b - a
        out[f"model-0000{i}-of-00002.safetensors"] = st_bytes(h, b"".join(chunks))
    return out


SHARDS = {name: _shards(BASE[name][1], BASE[name][2]) for name in BASES}


@st.composite
def mutated_index(draw):
    base = draw(st.sampled_from(BASES))
    shards = dict(SHARDS[base])
    weight_map = {}
    for shard, blob in shards.items():
        (n,) = struct.unpack("<Q", blob[:8])
        weight_map.update({t: shard for t in json.loads(blob[8:8 + n])})
    index = {"metadata": {"total_size": 1}, "weight_map": weight_map}
    index_bytes = None
    names, files = sorted(weight_map), sorted(shards)
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["value", "value", "weight_map", "top", "bytes", "missing_key",
                                     "drop_shard", "absent_tensor", "wrong_shard", "corrupt_shard"]))
        wm = index.get("weight_map") if isinstance(index, dict) else None
        if kind == "value" and isinstance(wm, dict):
            wm[draw(st.sampled_from(names))] = draw(st.one_of(NASTY, st.sampled_from(
                ["model.safetensors.index.json", "../model.safetensors", "/dev/null", ".", "",
                 "model-00003-of-00002.safetensors", "sub/dir.safetensors"])))
        elif kind == "weight_map" and isinstance(index, dict):
            index["weight_map"] = draw(NASTY)
        elif kind == "top":
            index = draw(NASTY)
        elif kind == "bytes":
            index_bytes = draw(st.one_of(st.binary(max_size=32), st.sampled_from([DEEP, HUGE_INT])))
        elif kind == "missing_key" and isinstance(index, dict):
            index.pop("weight_map", None)
        elif kind == "drop_shard":
            shards.pop(draw(st.sampled_from(files)), None)
        elif kind == "absent_tensor" and isinstance(wm, dict):
            wm[draw(st.text(max_size=8))] = draw(st.sampled_from(files))
        elif kind == "wrong_shard" and isinstance(wm, dict):
            wm[draw(st.sampled_from(names))] = draw(st.sampled_from(files))
        elif kind == "corrupt_shard":
            f = draw(st.sampled_from(files))
            if f in shards:
                shards[f] = shards[f][:draw(st.integers(0, len(shards[f])))]
    if index_bytes is None:
        index_bytes = json.dumps(index).encode()
    return BASE[base][0], shards, index_bytes


@fuzz_settings(0.15)
@given(case=mutated_index(), extra=EXTRA)
def test_fuzz_sharded_index(case, extra):
    cfg, shards, index_bytes = case

    def build(d):
        write_dir(d, cfg, None)
        for name, blob in shards.items():
            (d / name).write_bytes(blob)
        (d / "model.safetensors.index.json").write_bytes(index_bytes)

    convert_case(build, extra)


# --- the real console entry point ---------------------------------------------------------------
def _list_dtype(d: Path) -> None:
    cfg, header, data = BASE["qwen3-flat"]
    header = json.loads(json.dumps(header))
    header["fc.weight"]["dtype"] = ["BF16"]  # a list where a string belongs: one line, not a TypeError traceback
    write_dir(d, cfg, st_bytes(header, data))


SUBPROCESS_CASES = [
    ("valid", lambda d: write_dir(d, BASE["qwen3-flat"][0], st_bytes(*BASE["qwen3-flat"][1:])), 0),
    ("dtype-is-a-list", _list_dtype, errors.WeightsError.exit_code),
    ("config-not-json", lambda d: (write_dir(d, {}, st_bytes(*BASE["qwen3-flat"][1:])),
                                   (d / "config.json").write_bytes(b"{\x80")), errors.ConfigError.exit_code),
    ("no-weights", lambda d: write_dir(d, BASE["qwen3-flat"][0], None), errors.InputError.exit_code),
]


@pytest.mark.parametrize("name,build,expected", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_console_entry_point(tmp_path, name, build, expected):
    drafter, out_dir = tmp_path / "drafter", tmp_path / "out"
    drafter.mkdir()
    out_dir.mkdir()
    build(drafter)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DFLASH_DEBUG", None)
    # What the ``dflash-gguf`` console script runs (pyproject: dflash_gguf.cli:main), from this checkout.
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from dflash_gguf.cli import main; sys.exit(main())",
         "convert", str(drafter), "-o", str(out_dir / "d.gguf"), "--format", "lucebox"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == expected, proc.stderr
    check_outcome(proc.returncode, proc.stderr, out_dir, [])
