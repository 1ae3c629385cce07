"""Shared test helpers: fixture paths and an in-process CLI runner."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
DRAFTERS = FIXTURES / "drafters"
TARGETS = FIXTURES / "targets"
BROKEN = FIXTURES / "broken"
# The guard fixtures by name: a glob would let a test loop pass over an empty directory.
GUARD_FIXTURES = [FIXTURES / "guards" / n for n in (
    "frankenmerge-7b.gguf", "gemma-3-1b-it.gguf", "gemma-3-1b-pt.gguf", "gemma-4-e2b-it.gguf", "llama-3.1-8b-instruct.gguf", "llama-3.1-8b.gguf", "qwen3-8b-base.gguf", "qwen3-8b-dflash.gguf", "qwen3-8b-sharded-00001-of-00002.gguf", "qwen3-8b-sharded-00002-of-00002.gguf", "qwen3-8b.gguf")]
# Golden vectors from ggml's C reference live beside the checkout (read-only).
SHARED = ROOT.parent / "shared"
# The native llama.cpp build `make test` makes (Makefile: runtime). `make test` installs
# llama-cpp-python without compiling its own copy and points it here; setting the default here
# too lets a bare `pytest` run the same way (llama_cpp reads it at import).
LLAMA_BIN = ROOT / ".cache" / "llama.cpp-build" / "bin"
if "LLAMA_CPP_LIB_PATH" not in os.environ and (LLAMA_BIN / "libllama.so").exists():
    os.environ["LLAMA_CPP_LIB_PATH"] = str(LLAMA_BIN)


# Our errors name the optional package a step needs ("reading it needs the 'tokenizers' package:
# pip install 'dflash-gguf[tokenizers]'"): the [tokenizers] extra for a target dir's tokenizer.json
# (tokenizers) or tokenizer.model (sentencepiece), transformers for a Gemma 4 tokenizer, [torch] for
# parity and a .pt mask embedding.
_NEEDS_PACKAGE = re.compile(r"needs the '([A-Za-z0-9_]+)' package")


def skip_if_missing_package(message: str) -> None:
    """Skip the running test where ``message`` (an error of ours) says a step needs a package that
    is not installed here; with the package installed, return (the caller fails as it would)."""
    m = _NEEDS_PACKAGE.search(message)
    if m and importlib.util.find_spec(m.group(1)) is None:
        extra = {"tokenizers": "[tokenizers]", "sentencepiece": "[tokenizers]", "torch": "[torch]",
                 "matplotlib": "[plots]"}.get(m.group(1), "[test]")
        pytest.skip(f"needs the optional package '{m.group(1)}' (the {extra} extra), not installed")


@contextlib.contextmanager
def optional_packages():
    """Around library calls (``convert(..., target_dir=...)``): an error of ours saying it needs an
    optional package that is not installed skips the test instead of failing it."""
    from dflash_gguf.errors import DflashError

    try:
        yield
    except DflashError as exc:
        skip_if_missing_package(str(exc))
        raise


@pytest.fixture
def cli(capsys):
    """Run ``dflash-gguf ARGS`` in-process; returns (exit_code, stdout, stderr). A command that
    fails because it needs an optional package that is not installed (the [tokenizers] extra for
    ``--target-dir``, mostly) skips the test (``skip_if_missing_package``)."""
    from dflash_gguf.cli import main

    def run(*args: str | os.PathLike):
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        if code:
            skip_if_missing_package(captured.err)
        return code, captured.out, captured.err

    return run


@pytest.fixture(scope="session")
def dspark(tmp_path_factory):
    """The DSpark cases of tests/convert/dspark_ckpt.py, built and converted (mainline format)
    once per session: ``{"dirs": {case: dir}, "gguf": {case: path}, "target": dir}``."""
    from dflash_gguf.convert import convert
    from tests.convert.dspark_ckpt import CASES, build_case, spm_target_dir

    root = tmp_path_factory.mktemp("dspark")
    target = spm_target_dir(root)
    dirs = {n: build_case(root / "ckpt", n) for n in CASES}
    ggufs = {}
    for n, d in dirs.items():
        ggufs[n] = root / f"{n}.gguf"
        with optional_packages():  # the target's tokenizer.model needs sentencepiece
            convert(d, ggufs[n], target_dir=target)
    return {"dirs": dirs, "gguf": ggufs, "target": target}


RUNTIME = FIXTURES / "runtime"


@pytest.fixture(scope="session")
def quantized_drafter(tmp_path_factory):
    """ftype -> the trained drafter of fixtures/runtime (drafter.gguf: BF16 matrices, F32 norms;
    its checkpoint is drafter/) quantized to that llama-quantize file type by our library, once
    per session. Its 64- and 256-wide matrices take every block type between them: K-quants
    where ne0 is 256, the legacy and IQ4_NL fallbacks elsewhere."""
    from dflash_gguf.quants.gguf_file import quantize_gguf

    root = tmp_path_factory.mktemp("quantized")
    cache: dict[str, Path] = {}

    def get(ftype: str) -> Path:
        if ftype not in cache:
            cache[ftype] = root / f"drafter-{ftype}.gguf"
            quantize_gguf(RUNTIME / "drafter.gguf", cache[ftype], ftype, threads=2)
        return cache[ftype]

    return get


def rewrite_gguf(src, dst, *, values=None, drop=(), rename=None, data=None, alignment=None, add=None, retype=None,
                 drop_tensors=()):
    """Copy a GGUF key by key and tensor by tensor with gguf-py, changing only what is asked:
    ``values`` {key: new value}, ``drop`` keys, ``rename`` {tensor: new name},
    ``data`` {tensor: fn(array) -> array}, a custom ``alignment``, ``add`` {key: (value, type,
    sub_type)} appended after the existing keys, ``retype`` {key: GGUFValueType} (a scalar stored
    as another type), ``drop_tensors``. Used to plant faults."""
    import numpy as np
    from gguf import GGUFReader, GGUFWriter

    r = GGUFReader(src)
    w = GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    if alignment:
        w.add_custom_alignment(alignment)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in drop:
            continue
        value = (values or {}).get(k, f.contents())
        vtype = (retype or {}).get(k, f.types[0])
        w.add_key_value(k, value, vtype, sub_type=f.types[1] if len(f.types) > 1 else None)
    for k, (value, typ, sub) in (add or {}).items():
        w.add_key_value(k, value, typ, sub_type=sub)
    for t in r.tensors:
        if t.name in drop_tensors:
            continue
        arr = np.array(t.data)
        if t.name in (data or {}):
            arr = data[t.name](arr)
        w.add_tensor((rename or {}).get(t.name, t.name), arr, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def llama_cpp_src() -> Path | None:
    """vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist (``DFLASH_LLAMA_CPP_SRC``; ``make test``
    downloads it), or None; set but wrong fails the run instead of skipping its tests."""
    def ok(c: Path) -> bool:
        return (c / "convert_hf_to_gguf.py").is_file() and (c / "gguf-py" / "gguf").is_dir()

    env = os.environ.get("DFLASH_LLAMA_CPP_SRC")
    if env:
        # Set but wrong is a CI misconfiguration: fail rather than silently skip the golden tests.
        if not ok(Path(env)):
            pytest.fail(f"DFLASH_LLAMA_CPP_SRC={env} has no convert_hf_to_gguf.py and gguf-py/ (want vendor/llama.cpp)")
        return Path(env)
    # where `make test` unpacks it in this checkout, then a developer's unpacked sdist
    for local in (ROOT / ".cache" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp",
                  Path("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp")):
        if ok(local):
            return local
    return None


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """A built llama-server: ``$DFLASH_LLAMA_SERVER``, else ``<repo>/.cache/llama.cpp-build/bin/llama-server``
    (the vendored llama.cpp built by the Makefile), else ``llama-server`` on PATH; skips when none.
    Set but wrong fails the run instead of skipping (a CI misconfiguration)."""
    import shutil

    env = os.environ.get("DFLASH_LLAMA_SERVER")
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            pytest.fail(f"DFLASH_LLAMA_SERVER={env} is not an executable llama-server")
        return Path(env)
    local = LLAMA_BIN / "llama-server"
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    pytest.skip("no llama-server: build the vendored llama.cpp (`make runtime`) or set DFLASH_LLAMA_SERVER")
