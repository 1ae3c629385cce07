#!/usr/bin/env python
"""Whole-process `quantize` against llama.cpp's own quantizer, same file, same thread count.

The numbers that count: wall clock, CPU and peak RSS of a *whole process* that
reads a bf16 drafter GGUF and writes one llama-quantize file type, not kernel-only throughput
(benchmarks/bench_quantize.py measures the kernels).

Input: a synthetic drafter at Qwen3-8B-DFlash shape (hidden 4096, 5 layers, intermediate 12288,
32 q heads x 128, 8 kv heads, fc 5*4096 -> 4096, norms: 1.05 G values; random bf16 weights), written once as
safetensors + config.json and converted with our own ``convert`` (mainline llama.cpp format,
tokenizer from a hidden-4096 copy of fixtures/targets/llama-tiny.gguf). Cached under --work
(default: $TMPDIR/dflash-bench-quantize) keyed by size.

Jobs, each a fresh process, run alternately (ours, reference, ours, ...) --repeat times:
  * ours:      python -m dflash_gguf quantize IN OUT TYPE --threads N   (numba, and numpy
               with DFLASH_GGUF_NUMBA=0)
  * reference: a llama-quantize binary (--llama-quantize PATH; default `make runtime`'s build, else
               PATH), or llama_model_quantize through llama-cpp-python in a fresh python (nthread N)
for N = 2 and N = all cores (one row if they are equal). Wall is time.perf_counter around the
child, CPU from the child's own rusage (os.wait4; its worker processes included), peak RSS the
larger of rusage's and the sum over the child's process tree sampled every 20 ms (the numpy path
quantizes in worker processes). Outputs are compared byte for byte with the reference's (llama_model_quantize writes exactly our KVs: general.file_type and
general.quantization_version last, see tests/quants/test_gguf_file.py).

    python benchmarks/bench_quantize_cli.py                 # full size, Q4_K_M and Q8_0
    python benchmarks/bench_quantize_cli.py --ftypes all --backends numba --repeat 2   # every file type
    python benchmarks/bench_quantize_cli.py --scale 0.2     # 1 layer, smaller ffn, quick
    python benchmarks/bench_quantize_cli.py --backends numba --ftypes q4_k_m --repeat 3
    python benchmarks/bench_quantize_cli.py --isa avx2      # our AVX2 code paths on an AVX-512 machine

--isa avx2 runs ours with numpy's AVX-512 kernels disabled (NPY_DISABLE_CPU_FEATURES) and numba
compiling for Zen 3 (NUMBA_CPU_NAME=znver3: AVX2, FMA, no AVX-512), the CPU of the AVX2-only
development machine. The reference needs no such switch: llama-quantize's bf16
conversion and quantizers (ggml_bf16_to_fp32_row, quantize_q4_K, ...) are in ggml-base, which is
compiled without -march (only ggml-cpu gets -march=native), so it runs the same code on both.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _models import qwen3_dflash_config, qwen3_dflash_tensors, write_bf16_safetensors  # noqa: E402

from dflash_gguf.quants.ftypes import FTYPE_IDS as _LLAMA_FTYPES  # noqa: E402

FTYPE_IDS = {name.lower(): n for name, n in _LLAMA_FTYPES.items()}  # llama-quantize's names and numbers
# --isa avx2: numpy's dispatch groups above AVX2 (numpy >= 2.3 names; older names are ignored)
NUMPY_ABOVE_AVX2 = "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL"

LLAMA_QUANTIZE_PY = r'''
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(sys.argv[3]); p.nthread = int(sys.argv[4])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
'''


# --- the input ------------------------------------------------------------------------------
def drafter_shapes(scale: float) -> tuple[dict, dict[str, tuple[tuple[int, ...], bool]]]:
    """config.json and {safetensors name: (shape, is_matrix)}; --scale shrinks layers, taps and
    the ffn width (hidden stays 4096, so every row length and fallback is the real one)."""
    H = 4096
    layers = max(1, round(5 * scale))
    taps = max(1, round(5 * scale))
    inter = max(256, round(12288 * scale / 256) * 256)
    return (qwen3_dflash_config(layers, H, inter, taps, vocab=512, mask_token_id=500),
            qwen3_dflash_tensors(layers, H, inter, taps))


def _pieces(rng: np.random.Generator, shape: tuple[int, ...], matrix: bool):
    """Row pieces of ~16 M values: N(0, 0.02) matrices with a per-row scale spread (so the
    K-quant fits see realistic variety), 1 + N(0, 0.05) norms."""
    cols = shape[-1]
    rows = int(np.prod(shape[:-1]))
    step = max(1, (1 << 24) // cols)
    for r0 in range(0, rows, step):
        m = min(step, rows - r0)
        if matrix:
            x = rng.standard_normal((m, cols), dtype=np.float32)
            x *= (0.02 * np.exp(0.3 * rng.standard_normal((m, 1)))).astype(np.float32)
        else:
            x = 1 + 0.05 * rng.standard_normal((m, cols), dtype=np.float32)
        yield x


def write_safetensors(path: Path, tensors: dict[str, tuple[tuple[int, ...], bool]], seed: int = 0) -> None:
    """bf16 safetensors streamed piece by piece (round-to-nearest-even), values from ``_pieces``."""
    write_bf16_safetensors(path, tensors, _pieces, seed=seed)


def target_gguf(path: Path, hidden: int) -> None:
    """fixtures/targets/llama-tiny.gguf's tokenizer with the drafter's hidden size."""
    from gguf import GGUFReader, GGUFWriter

    r = GGUFReader(ROOT / "fixtures" / "targets" / "llama-tiny.gguf")
    w = GGUFWriter(path, "llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        value = hidden if k == "llama.embedding_length" else (36 if k == "llama.block_count" else f.contents())
        w.add_key_value(k, value, f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


WARM_NUMBA = r'''
import numpy as np
from dflash_gguf.quants import _numba
from dflash_gguf.quants.base import registered
for cls in registered().values():
    if cls.numba_kernel:
        _numba.run(_numba.kernel(cls.numba_kernel), np.zeros((1, cls.block_size), np.float32))
_numba.kernel("bf16_to_f32")(np.zeros(1, np.uint16), np.zeros(1, np.uint32))
'''

MAKE_INPUT = r'''
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dflash_gguf.convert import convert
convert(sys.argv[2], sys.argv[3], format="llama.cpp", target_gguf=sys.argv[4], force=True)
'''


def make_input(work: Path, scale: float) -> tuple[Path, int]:
    """The bf16 GGUF (cached), and its number of values."""
    cfg, tensors = drafter_shapes(scale)
    n_values = sum(int(np.prod(s)) for s, _ in tensors.values())
    d = work / f"drafter-s{scale:g}"
    gguf_path = work / f"drafter-s{scale:g}-bf16.gguf"
    if gguf_path.is_file():
        return gguf_path, n_values
    t0 = time.perf_counter()
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    write_safetensors(d / "model.safetensors", tensors)
    target_gguf(work / "target-4096.gguf", cfg["hidden_size"])
    # in a child: the parent stays small, so nothing it holds can show up in a child's ru_maxrss
    tmp = gguf_path.with_suffix(".tmp")
    subprocess.run([sys.executable, "-c", MAKE_INPUT, str(ROOT), str(d), str(tmp), str(work / "target-4096.gguf")],
                   check=True)
    tmp.rename(gguf_path)
    shutil.rmtree(d)
    print(f"generated {gguf_path} in {time.perf_counter() - t0:.1f} s")
    return gguf_path, n_values


# --- running a job ----------------------------------------------------------------------------
# The child is started by this small wrapper, not by the bench itself: Linux carries the peak RSS
# of the process that execs into the child's ru_maxrss, so the parent must stay small (the wrapper
# is a bare interpreter). It reports the child's wall time and rusage as one JSON line. rusage's
# peak is the largest *single* process of the tree, so a thread samples the whole tree's resident
# memory (the child and every descendant: the numpy path's worker processes) every 20 ms; the
# peak reported is the larger of the two. Shared pages count once per process: an upper bound.
WRAPPER = r'''
import json, os, sys, threading, time
PAGE = os.sysconf("SC_PAGE_SIZE")

def tree_rss(pid):
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):  # gone meanwhile
            pass
    return total

t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
peak, done = [0], threading.Event()

def sample():
    while not done.wait(0.02):
        peak[0] = max(peak[0], tree_rss(pid))

threading.Thread(target=sample, daemon=True).start()
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
done.set()
with open(sys.argv[1], "w") as f:
    json.dump({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kib": max(ru.ru_maxrss, peak[0] // 1024),
               "code": os.waitstatus_to_exitcode(status)}, f)
'''


def run_child(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, float, float]:
    """(wall s, CPU s (user + sys), peak RSS MiB) of one child process, from its own rusage. It runs
    in the log's directory, so `python -m` imports the checkout PYTHONPATH names, not the cwd's."""
    stats = log.with_suffix(".json")
    with open(log, "wb") as f:
        subprocess.run([sys.executable, "-S", "-c", WRAPPER, str(stats), *argv], env=env, stdout=f,
                       stderr=subprocess.STDOUT, cwd=log.parent, check=True)
    r = json.loads(stats.read_text())
    if r["code"] != 0:
        sys.exit(f"{' '.join(argv)} failed ({r['code']}):\n{log.read_text(errors='replace')[-3000:]}")
    return r["wall"], r["cpu"], r["maxrss_kib"] / 1024


def cpu_info() -> str:
    model, flags = platform.processor() or "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("?", "x86_64", ""):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    feats = " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ("avx2", "fma", "f16c", "avx512f"))
    return f"{model}; {feats}"


def version(dist: str) -> str:
    try:
        from importlib.metadata import version as v

        return v(dist)
    except Exception:  # noqa: BLE001
        return "absent"


def _native_quantize() -> str | None:
    built = Path(__file__).resolve().parents[1] / ".cache" / "llama.cpp-build" / "bin" / "llama-quantize"
    return str(built) if built.is_file() else shutil.which("llama-quantize")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="model size: 1.0 = Qwen3-8B-DFlash shape (default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of every job, alternated (default 3)")
    ap.add_argument("--ftypes", default="q4_k_m,q8_0", help="comma list of llama-quantize file types, or all")
    ap.add_argument("--backends", default="numba,numpy", help="ours: comma list of numba, numpy")
    ap.add_argument("--threads", default=None, help="comma list of thread counts (default: 2 and all cores)")
    ap.add_argument("--llama-quantize", default=_native_quantize(),
                    help="a llama-quantize binary (default: `make runtime`'s build of the vendored llama.cpp, else "
                         "on PATH; else llama_model_quantize via llama-cpp-python)")
    ap.add_argument("--no-reference", action="store_true", help="ours only")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout of dflash-gguf (e.g. a `git archive` of main) to run alongside, alternated")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dflash-bench-quantize")
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: ours without AVX-512 (numpy dispatch and numba codegen), on an AVX-512 machine")
    args = ap.parse_args()
    if args.llama_quantize:  # children run in the work dir
        args.llama_quantize = str(Path(args.llama_quantize).resolve())

    try:
        all_cores = len(os.sched_getaffinity(0))
    except AttributeError:
        all_cores = os.cpu_count() or 1
    threads = sorted({int(n) for n in args.threads.split(",")} if args.threads else {min(2, all_cores), all_cores})
    ftypes = [f.strip().lower() for f in args.ftypes.split(",") if f.strip()]
    if ftypes == ["all"]:
        ftypes = list(FTYPE_IDS)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    assert set(ftypes) <= set(FTYPE_IDS) and set(backends) <= {"numba", "numpy"}, (ftypes, backends)
    args.work.mkdir(parents=True, exist_ok=True)
    src, n_values = make_input(args.work, args.scale)

    print(f"cpu: {cpu_info()}; {all_cores} cores usable; load avg {os.getloadavg()[0]:.2f}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {version('numba')}, "
          f"gguf {version('gguf')}, llama-cpp-python {version('llama_cpp_python')}")
    ref_kind = ("none" if args.no_reference else
                f"llama-quantize binary {args.llama_quantize}" if args.llama_quantize else
                "llama_model_quantize (llama-cpp-python) in a fresh python")
    print(f"input: {src} ({src.stat().st_size / 1e9:.2f} GB, {n_values / 1e6:.0f} M values); reference: {ref_kind}")

    base_env = {k: v for k, v in os.environ.items() if k != "DFLASH_GGUF_NUMBA"}
    ours_env = dict(base_env)
    if args.isa == "avx2":
        # NUMBA_CPU_FEATURES="" takes the named CPU's own features; unset, numba adds the host's
        ours_env.update(NPY_DISABLE_CPU_FEATURES=NUMPY_ABOVE_AVX2, NUMBA_CPU_NAME="znver3", NUMBA_CPU_FEATURES="")
        print(f"ours with --isa avx2: NPY_DISABLE_CPU_FEATURES={NUMPY_ABOVE_AVX2!r} NUMBA_CPU_NAME=znver3 "
              f"(the reference runs as built: its quantizers are in ggml-base, compiled without -march)")
    checkouts = [("ours", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    jobs = []  # (label, ftype, threads, argv, env, out)
    for ft in ftypes:
        for n in threads:
            for who, root in checkouts:
                env_root = dict(ours_env, PYTHONPATH=str(root) + os.pathsep + base_env.get("PYTHONPATH", ""))
                # a checkout without `quantize --threads` always used every core: only that row is comparable
                has_threads = "--threads" in subprocess.run(
                    [sys.executable, "-m", "dflash_gguf", "quantize", "--help"], env=env_root, cwd=root,
                    capture_output=True, text=True).stdout
                for b in backends if has_threads or n == all_cores else ():
                    env = dict(env_root, DFLASH_GGUF_NUMBA="1" if b == "numba" else "0")
                    out = args.work / f"{who}-{b}-{ft}-{n}.gguf"
                    argv = [sys.executable, "-m", "dflash_gguf", "quantize", str(src), str(out), ft, "--force",
                            *(["--threads", str(n)] if has_threads else [])]
                    jobs.append((f"{who} {b}", ft, n, argv, env, out))
            if not args.no_reference:
                out = args.work / f"ref-{ft}-{n}.gguf"
                if args.llama_quantize:
                    argv = [args.llama_quantize, str(src), str(out), ft.upper(), str(n)]
                else:
                    argv = [sys.executable, "-c", LLAMA_QUANTIZE_PY, str(src), str(out), str(FTYPE_IDS[ft]), str(n)]
                jobs.append(("llama.cpp", ft, n, argv, dict(base_env), out))
    if not args.no_reference and not args.llama_quantize:
        print("(llama_model_quantize runs with nthread = the thread count; no llama-quantize binary on PATH)")

    # untimed: numba's kernels compiled into (or loaded from) its cache, and the input read once into
    # the page cache, so no job pays for either
    if "numba" in backends:
        for who, root in checkouts:
            env = dict(ours_env, DFLASH_GGUF_NUMBA="1", PYTHONPATH=str(root))
            run_child([sys.executable, "-c", WARM_NUMBA], env, args.work / "warmup.log")
    with open(src, "rb") as f:
        while f.read(16 << 20):
            pass
    results: dict[int, list[tuple[float, float, float]]] = {i: [] for i in range(len(jobs))}
    ref_of = {(ft, n): i for i, (label, ft, n, *_r) in enumerate(jobs) if label == "llama.cpp"}
    same: dict[int, str] = {}
    # one (type, threads) group at a time: its jobs alternate, its files are compared with the
    # reference's and removed before the next group (every type's outputs at once would be ~45 GB)
    groups: dict[tuple[str, int], list[int]] = {}
    for i, (_label, ft, n, *_r) in enumerate(jobs):
        groups.setdefault((ft, n), []).append(i)
    for key, members in groups.items():
        for r in range(args.repeat):
            for i in (members if r % 2 == 0 else members[::-1]):  # alternate which job runs first
                label, ft, n, argv, env, out = jobs[i]
                out.unlink(missing_ok=True)
                results[i].append(run_child(argv, env, args.work / "job.log"))
        j = ref_of.get(key)
        for i in members:
            if j is not None and i != j:
                same[i] = "identical" if filecmp.cmp(jobs[i][5], jobs[j][5], shallow=False) else "DIFFER"
        for i in members:
            jobs[i][5].unlink(missing_ok=True)

    print(f"\nwhole process, {args.repeat} alternated runs each; wall and CPU: best / median; peak RSS: max "
          f"(shared {all_cores}-core machine: noisy)")
    print(f"{'job':17s} {'ftype':7s} {'thr':>3s} {'wall best':>10s} {'median':>8s} {'CPU best':>9s} {'median':>8s} "
          f"{'peak RSS':>9s} {'vs llama.cpp':>12s}  bytes")
    for i, (label, ft, n, argv, env, out) in enumerate(jobs):
        res = results[i]
        walls, cpus, rss = [x[0] for x in res], [x[1] for x in res], max(x[2] for x in res)
        ratio = ""
        j = ref_of.get((ft, n))
        if j is not None and j != i:
            ratio = f"{min(x[0] for x in results[j]) / min(walls):.2f}x"
        elif j == i:
            ratio = "1.00x"
        print(f"{label:17s} {ft:7s} {n:3d} {min(walls):9.2f}s {statistics.median(walls):7.2f}s {min(cpus):8.2f}s "
              f"{statistics.median(cpus):7.2f}s {rss:7.0f}Mi {ratio:>12s}  {same.get(i, '')}")
    print("vs llama.cpp: reference best wall / ours best wall (>1: ours faster); bytes: whole output file vs the "
          "reference's")


if __name__ == "__main__":
    main()
