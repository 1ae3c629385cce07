"""Benchmark the header-only guards and the header-only commands' whole-process wall time.

    python benchmarks/bench_checks.py [--repeat 21] [--cli-repeat 11] [--keep]

Generates under benchmarks/_work/ (gitignored) three GGUFs with gguf-py's writer:
  - tiny:   a Qwen3-8B-shaped target (36 layers, 399 tensors, 64-token vocab) with toy dims;
  - sparse: the same header with Qwen3-8B's real F16 dims (hidden 4096, ff 12288, vocab
            151,936): 16.4 GB of tensor data that is never written; the file is extended with
            truncate(), so it is sparse (apparent size 16 GB, a few KB on disk);
  - vocab:  the tiny file plus a 151,936-token vocabulary and 151,387 merges (a real Qwen3
            header is ~8 MB of tokenizer strings), to show what a real target costs.
Then times, in-process, ``read_header``, ``run_checks`` (header only) and ``classify``
(median of --repeat runs, after one warm-up). Goal: < 50 ms in-process for tiny and sparse alike.

Second table: the whole-process wall time of each header-only command (``check``,
``check-instruct``, ``inspect``, ``version``, ``--help``), each run as
``python -m dflash_gguf ...`` in a fresh interpreter with this checkout first on PYTHONPATH,
best and median of --cli-repeat runs, wall time and CPU time (user + sys, which other load on
a shared machine disturbs less). Every run alternates with ``python -c pass`` (the
interpreter's own start-up, the floor) so both see the same machine load. Goal: <= 0.3 s.
The package is byte-compiled first, as ``pip install`` does (with PYTHONDONTWRITEBYTECODE=1 and
no __pycache__, every run would compile dflash_gguf's sources again: ~0.1 s); --no-compile
skips that step to time the tree as it is.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import gguf

from dflash_gguf.guards.run import run_checks
from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.instruct import classify

WORK = Path(__file__).resolve().parent / "_work"
LAYERS = 36


def _tensor_list(hidden: int, ff: int, vocab: int, hd: int) -> list[tuple[str, tuple[int, ...]]]:
    """Qwen3-style target inventory, numpy order (ggml ne reversed)."""
    nq, nkv = 32, 8
    out = [("token_embd.weight", (vocab, hidden)), ("output_norm.weight", (hidden,)), ("output.weight", (vocab, hidden))]
    for i in range(LAYERS):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (hidden,)), (p + "ffn_norm.weight", (hidden,)),
                (p + "attn_q.weight", (nq * hd, hidden)), (p + "attn_k.weight", (nkv * hd, hidden)),
                (p + "attn_v.weight", (nkv * hd, hidden)), (p + "attn_output.weight", (hidden, nq * hd)),
                (p + "attn_q_norm.weight", (hd,)), (p + "attn_k_norm.weight", (hd,)),
                (p + "ffn_gate.weight", (ff, hidden)), (p + "ffn_up.weight", (ff, hidden)),
                (p + "ffn_down.weight", (hidden, ff))]
    return out


def make(path: Path, hidden: int, ff: int, vocab: int, hd: int, big_vocab: bool = False) -> int:
    """Write header + tensor infos; extend the file to its full size without writing data."""
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name("Qwen3 8B")
    w.add_basename("Qwen3")
    w.add_size_label("8B")
    w.add_uint32("qwen3.block_count", LAYERS)
    w.add_uint32("qwen3.embedding_length", hidden)
    w.add_uint32("qwen3.feed_forward_length", ff)
    w.add_uint32("qwen3.attention.head_count", 32)
    w.add_uint32("qwen3.attention.head_count_kv", 8)
    w.add_float32("qwen3.rope.freq_base", 1_000_000.0)
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    n_tok = 151_936 if big_vocab else 64
    toks = [f"t{i}" for i in range(n_tok - 3)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    w.add_token_list(toks)
    w.add_token_types([1] * (n_tok - 3) + [3, 3, 3])
    w.add_token_merges([f"t{i} t{i + 1}" for i in range(151_387 if big_vocab else 32)])
    w.add_eos_token_id(n_tok - 1)
    w.add_chat_template("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                        "{%- endfor %}" * 20)
    total = 0
    for name, shape in _tensor_list(hidden, ff, vocab, hd):
        nbytes = int(np.prod(shape)) * (4 if len(shape) == 1 else 2)
        w.add_tensor_info(name, shape, np.dtype(np.float32 if len(shape) == 1 else np.float16), nbytes)
        total += nbytes + (-nbytes % 32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    end = path.stat().st_size
    os.truncate(path, end + (-end % 32) + total)  # sparse: the data section is a hole
    return path.stat().st_size


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up: imports, page cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


ROOT = Path(__file__).resolve().parent.parent
DRAFTER = ROOT / "fixtures" / "guards" / "qwen3-8b-dflash.gguf"
TARGET = ROOT / "fixtures" / "guards" / "qwen3-8b.gguf"


def cpu_line() -> str:
    """CPU model, core count and the SIMD flags the quantizers care about (Linux /proc/cpuinfo)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    simd = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx2", "avx512f"))
    return f"cpu: {model} ({os.cpu_count()} CPUs; {simd}); python {sys.version.split()[0]}"


def header_commands(files: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(label, argv) of every header-only command; each must exit 0."""
    return [
        ("version", ["version"]),
        ("--help", ["--help"]),
        ("check --help", ["check", "--help"]),
        ("check drafter", ["check", str(DRAFTER)]),
        ("check drafter --target", ["check", str(DRAFTER), "--target", str(TARGET)]),
        ("check --json tiny", ["check", "--json", str(files["tiny"])]),
        ("check vocab (8 MB header)", ["check", str(files["vocab"])]),
        ("check-instruct tiny", ["check-instruct", str(files["tiny"])]),
        ("check-instruct vocab", ["check-instruct", str(files["vocab"])]),
        ("inspect drafter", ["inspect", str(DRAFTER)]),
        ("inspect --json drafter", ["inspect", "--json", str(DRAFTER)]),
    ]


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall time, CPU time (user + sys: what the process itself did, less sensitive than wall
    time to other load on a shared machine) and exit code of one run."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), code


def bench_startup(files: dict[str, Path], repeat: int, compile_first: bool = True) -> None:
    """Whole-process wall and CPU time of each header-only command, alternating with the floor."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if compile_first:  # what an installed package has: __pycache__ (gitignored here)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "dflash_gguf")], check=True)
    floor_cmd = [sys.executable, "-c", "pass"]
    floor: list[tuple[float, float]] = []
    rows = []
    for label, args in header_commands(files):
        runs = []
        for _ in range(repeat):
            floor.append(_run(floor_cmd, env)[:2])
            wall, cpu, code = _run([sys.executable, "-m", "dflash_gguf", *args], env)
            assert code == 0, (label, code)
            runs.append((wall, cpu))
        rows.append((label, runs))
    rows.append(("floor: python -c pass", floor))
    print(f"\n{'command (python -m dflash_gguf ...)':<36} {'wall best':>9} {'median':>7} {'- floor':>8} | "
          f"{'cpu best':>8} {'median':>7}")
    f_wall = statistics.median(w for w, _ in floor)
    for label, runs in rows:
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{label:<36} {min(walls) * 1e3:>7.0f}ms {statistics.median(walls) * 1e3:>5.0f}ms "
              f"{(statistics.median(walls) - f_wall) * 1e3:>6.0f}ms | {min(cpus) * 1e3:>6.0f}ms "
              f"{statistics.median(cpus) * 1e3:>5.0f}ms")
    code = "byte-compiled first" if compile_first else "bytecode as found"
    print(f"whole process, best and median of {repeat} runs each (floor: all {len(floor)} runs); {code}; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    print(cpu_line())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--cli-repeat", type=int, default=11)
    ap.add_argument("--keep", action="store_true", help="keep benchmarks/_work/ files")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile dflash_gguf before the CLI runs")
    a = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    files = {"tiny": WORK / "guard-tiny.gguf", "sparse": WORK / "guard-sparse.gguf", "vocab": WORK / "guard-vocab.gguf"}
    make(files["tiny"], hidden=64, ff=192, vocab=64, hd=2)
    make(files["sparse"], hidden=4096, ff=12288, vocab=151_936, hd=128)  # Qwen3-8B in F16
    make(files["vocab"], hidden=64, ff=192, vocab=64, hd=2, big_vocab=True)
    try:
        print(f"{'file':<8} {'apparent size':>16} {'on disk':>10} {'header':>10} | {'read_header':>11} "
              f"{'run_checks':>10} {'classify':>9}")
        for label, p in files.items():
            st = p.stat()
            h = read_header(p)
            rh = median_ms(lambda: read_header(p), a.repeat)
            rc = median_ms(lambda: run_checks(p), a.repeat)
            cl = median_ms(lambda: classify(read_header(p)), a.repeat)
            report = run_checks(p)
            assert not report.has_errors(), [f.message for f in report.findings]
            print(f"{label:<8} {st.st_size:>16,} {st.st_blocks * 512:>10,} {h.header_end:>10,} | {rh:>9.2f}ms "
                  f"{rc:>8.2f}ms {cl:>7.2f}ms")
        print(f"in-process: median of {a.repeat}. 'classify' includes read_header.")
        bench_startup(files, a.cli_repeat, compile_first=not a.no_compile)
    finally:
        if not a.keep:
            for p in files.values():
                p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
