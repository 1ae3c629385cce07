#!/usr/bin/env python
"""Throughput and peak memory of dflash_gguf's quantizers against ggml's C reference.

Generates a realistic DFlash drafter's weights (hidden 4096, 5 layers, intermediate 12288,
32 q heads x 128, 8 kv heads, fc 5*4096 -> 4096; bf16-representable values), one tensor at a
time, and in one run reports, for each of our two backends side by side -- the numba kernels
(quants/_numba/, used when numba is installed) and the numpy path (DFLASH_GGUF_NUMBA=0):

  * Q4_K_M through the llama-quantize plan (Q4_K + Q6_K): ours vs ggml's C reference
    (``ggml_quantize_chunk`` from llama-cpp-python's libggml-base, threaded over rows on the
    same number of threads) -- and whether the bytes are identical;
  * Q8_0: ours vs gguf-py's ``gguf.quantize`` (single-threaded by design) and vs C.

Throughput is MB/s of bf16 input (2 bytes per value) and Mvalues/s; "cpu" is the process CPU
time (all threads), steadier than wall time on a shared machine. "peak RSS" is the process's
high-water mark during the quantize calls above its resident size before them
(``/proc/self/clear_refs`` reset per call), i.e. the quantizer's own working memory. numba's
one-off compile (or cache load) happens before any timing and is reported on its own.

    python benchmarks/bench_quantize.py              # full size: 1.05e9 values, 2.1 GB as bf16, minutes
    python benchmarks/bench_quantize.py --scale 0.05 # 5% of the rows of every tensor, quick
    python benchmarks/bench_quantize.py --scale 0.05 --repeat 3 --backends numba  # best of 3 per tensor
"""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gguf  # noqa: E402

from dflash_gguf.quants import _numba, quantize, row_nbytes  # noqa: E402
from dflash_gguf.quants.threads import default_threads  # noqa: E402
from dflash_gguf.quants.policy import plan_types  # noqa: E402

HIDDEN, INTER, N_LAYER, N_HEAD, N_KV, HEAD_DIM, N_TAPS = 4096, 12288, 5, 32, 8, 128, 5


def drafter_tensors() -> list[tuple[str, tuple[int, ...]]]:
    q, kv = N_HEAD * HEAD_DIM, N_KV * HEAD_DIM
    t = [("fc.weight", (HIDDEN, N_TAPS * HIDDEN)), ("enc.output_norm.weight", (HIDDEN,)), ("output_norm.weight", (HIDDEN,))]
    for i in range(N_LAYER):
        p = f"blk.{i}."
        t += [
            (p + "attn_norm.weight", (HIDDEN,)),
            (p + "attn_q.weight", (q, HIDDEN)),
            (p + "attn_k.weight", (kv, HIDDEN)),
            (p + "attn_v.weight", (kv, HIDDEN)),
            (p + "attn_output.weight", (HIDDEN, q)),
            (p + "attn_q_norm.weight", (HEAD_DIM,)),
            (p + "attn_k_norm.weight", (HEAD_DIM,)),
            (p + "ffn_norm.weight", (HIDDEN,)),
            (p + "ffn_gate.weight", (INTER, HIDDEN)),
            (p + "ffn_up.weight", (INTER, HIDDEN)),
            (p + "ffn_down.weight", (HIDDEN, INTER)),
        ]
    return t


def bf16_weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 holding bf16-representable values: N(0, 0.02) with per-row scale spread."""
    x = rng.standard_normal(shape, dtype=np.float32)
    x *= (0.02 * np.exp(0.3 * rng.standard_normal((shape[0], 1)))).astype(np.float32)
    u = x.view(np.uint32)
    u += np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))  # round to nearest even bf16
    u &= np.uint32(0xFFFF0000)
    return x


# --- peak-RSS bookkeeping ----------------------------------------------------------------
def _status_kb(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    # hand freed heap back to the OS so "before" is the live size, not a warm allocator's
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Peak:
    """Peak resident memory of a block above the resident size before it, in MiB."""

    def __enter__(self):
        _trim()
        self.ok = _reset_peak()
        self.before = _status_kb("VmRSS") or 0
        return self

    def __exit__(self, *exc):
        hwm = _status_kb("VmHWM") if self.ok else None
        if hwm is None:  # fall back to the process-lifetime high-water mark
            hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mib = max(0, hwm - self.before) / 1024


# --- ggml's C reference through llama-cpp-python's libggml-base ----------------------------
def load_ggml():
    try:
        import llama_cpp
    except Exception as e:  # noqa: BLE001  (report whatever made it unavailable)
        return None, f"llama_cpp not importable ({type(e).__name__}: {e})"
    # LLAMA_CPP_LIB_PATH first, as llama-cpp-python itself loads (`make test` builds there)
    dirs = [Path(d) for d in (os.environ.get("LLAMA_CPP_LIB_PATH"), Path(llama_cpp.__file__).parent / "lib") if d]
    path = next((d / "libggml-base.so" for d in dirs if (d / "libggml-base.so").is_file()), None)
    if path is None:
        return None, f"libggml-base.so not found in {', '.join(map(str, dirs))}"
    lib = ctypes.CDLL(str(path))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
    ]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    return lib, str(path)


def ggml_quantize(lib, pool: ThreadPoolExecutor, n_threads: int, x: np.ndarray, qtype) -> np.ndarray:
    """ggml_quantize_chunk over row ranges on ``n_threads`` threads (ctypes drops the GIL)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    nrows, n = x.shape
    rb = row_nbytes(qtype, n)
    out = np.empty(nrows * rb, np.uint8)
    lib.ggml_quantize_init(int(qtype))
    step = max(1, -(-nrows // (4 * n_threads)))

    def work(r0: int) -> None:
        r1 = min(nrows, r0 + step)
        lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, r0 * n, r1 - r0, n, None)

    list(pool.map(work, range(0, nrows, step)))
    return out


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return "?"


# --- the run -------------------------------------------------------------------------------
def warm_numba() -> str:
    """Compile (or load from numba's cache) every kernel before anything is timed."""
    names = ("q8_0", "q4_k", "q5_k", "q6_k")
    t0 = time.perf_counter()
    kernels = [_numba.kernel(n) for n in names]
    for n, k in zip(names, kernels):
        k(np.zeros((1, 32 if n == "q8_0" else 256), np.float32))
    dt = time.perf_counter() - t0
    misses = sum(sum(k.stats.cache_misses.values()) for k in kernels)
    how = "compiled (cache was empty or stale)" if misses else "loaded from numba's cache"
    return f"numba {_version('numba')} kernels {how} in {dt:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of every tensor's rows (default 1.0)")
    ap.add_argument("--threads", type=int, default=default_threads(), help="threads for ours and for C")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="time every call this many times, keep the fastest")
    ap.add_argument("--backends", default="numba,numpy", help="comma list of numba, numpy (default both)")
    ap.add_argument("--no-gguf", action="store_true", help="skip the (slow, single-threaded) gguf-py Q8_0 baseline")
    args = ap.parse_args()
    nt = args.threads
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - {"numba", "numpy"}:
        ap.error(f"unknown backend in {args.backends!r}")
    numba_note = warm_numba() if _numba.AVAILABLE and "numba" in backends else None
    if "numba" in backends and not _numba.AVAILABLE:
        numba_note = "numba is not installed: numba rows skipped"
        backends.remove("numba")

    tensors = [(n, ((max(1, round(s[0] * args.scale)),) + s[1:]) if len(s) > 1 else s) for n, s in drafter_tensors()]
    plan = plan_types(tensors, "Q4_K_M", N_LAYER)
    work = [c for c in plan if c.quantized]
    n_vals = sum(int(np.prod(c.shape)) for c in work)
    lib, where = load_ggml()
    print(f"drafter: {len(tensors)} tensors, {len(work)} quantized, {n_vals / 1e6:.1f} M values "
          f"({n_vals * 2 / 1e9:.2f} GB as bf16); threads: {nt}; scale {args.scale}; best of {args.repeat}")
    print(f"numpy {np.__version__}, gguf {_version('gguf')}, llama-cpp-python {_version('llama_cpp_python')}; "
          f"C reference: {where if lib is not None else 'UNAVAILABLE - ' + where}")
    if numba_note:
        print(numba_note)
    mix = {}
    for c in work:
        mix[c.ggml_type.name] = mix.get(c.ggml_type.name, 0) + int(np.prod(c.shape))
    print("Q4_K_M mix: " + ", ".join(f"{k} {v / n_vals:.0%}" for k, v in sorted(mix.items())))

    rng = np.random.default_rng(args.seed)
    t: dict[str, float] = {}
    cpu: dict[str, float] = {}
    peak: dict[str, float] = {}
    mismatched: list[str] = []
    pool = ThreadPoolExecutor(max_workers=nt)

    def timed(key: str, fn, backend: str | None = None):
        prev = _numba.set_enabled(backend == "numba") if backend else None
        try:
            best = best_cpu = float("inf")
            for _ in range(max(1, args.repeat)):
                with Peak() as pk:
                    c0, t0 = time.process_time(), time.perf_counter()
                    r = fn()
                    best = min(best, time.perf_counter() - t0)
                    best_cpu = min(best_cpu, time.process_time() - c0)
                peak[key] = max(peak.get(key, 0.0), pk.mib)
        finally:
            if backend:
                _numba.set_enabled(prev)
        t[key] = t.get(key, 0.0) + best
        cpu[key] = cpu.get(key, 0.0) + best_cpu
        return r

    for c in work:
        x = bf16_weights(rng, c.shape)
        ref = timed("c_q4km", lambda: ggml_quantize(lib, pool, nt, x, c.ggml_type)) if lib is not None else None
        for b in backends:
            ours = timed(f"{b}_q4km", lambda: quantize(x, c.ggml_type, name=c.name, threads=nt), b)
            if ref is not None and not np.array_equal(ours.reshape(-1), ref):
                mismatched.append(f"{c.name} ({c.ggml_type.name}, {b})")
            del ours
        q8 = {}
        for b in backends:
            q8[b] = timed(f"{b}_q8", lambda: quantize(x, "q8_0", name=c.name, threads=nt), b)
            if nt != 1:
                timed(f"{b}_q8_1t", lambda: quantize(x, "q8_0", name=c.name, threads=1), b)
        if not args.no_gguf:
            g = timed("gguf_q8", lambda: gguf.quantize(x, gguf.GGMLQuantizationType.Q8_0))
            mismatched += [f"{c.name} (Q8_0 {b} vs gguf-py)" for b in backends if not np.array_equal(q8[b], g)]
            del g
        if lib is not None:
            ref = timed("c_q8", lambda: ggml_quantize(lib, pool, nt, x, gguf.GGMLQuantizationType.Q8_0))
            mismatched += [f"{c.name} (Q8_0 {b} vs C)" for b in backends if not np.array_equal(q8[b].reshape(-1), ref)]
        q8 = x = ref = None  # freed before the next shape is drawn (the lambdas above hold no reference past their call)

    mb = n_vals * 2 / 1e6

    def row(label: str, key: str) -> None:
        if not t.get(key):
            return
        print(f"  {label:36s} {t[key]:8.2f} s (cpu {cpu[key]:7.2f} s) {mb / t[key]:8.1f} MB/s "
              f"{n_vals / t[key] / 1e6:7.1f} Mval/s  peak +{peak[key]:7.1f} MiB")

    def ratio(label: str, num: str, den: str, extra: str = "") -> None:
        if t.get(num) and t.get(den):
            print(f"  {label:44s}: {t[num] / t[den]:5.2f}x wall, {cpu[num] / cpu[den]:5.2f}x cpu{extra}")

    print("\nQ4_K_M (plan: Q4_K + Q6_K)")
    for b in backends:
        row(f"dflash_gguf {b} ({nt} threads)", f"{b}_q4km")
    row(f"ggml C reference ({nt} threads)", "c_q4km")
    print("Q8_0")
    for b in backends:
        row(f"dflash_gguf {b} ({nt} threads)", f"{b}_q8")
        row(f"dflash_gguf {b} (1 thread)", f"{b}_q8_1t")
    row("gguf-py gguf.quantize (1 thread)", "gguf_q8")
    row(f"ggml C reference ({nt} threads)", "c_q8")
    print("\nratios (>1: dflash_gguf faster)")
    if lib is None:
        print("  C reference unavailable: only our absolute numbers above")
    for b in backends:
        ratio(f"Q4_K_M  {b} / C reference, {nt} threads each", "c_q4km", f"{b}_q4km")
    for b in backends:
        ratio(f"Q8_0    {b} / gguf-py, {nt} threads vs 1", "gguf_q8", f"{b}_q8")
        ratio(f"Q8_0    {b} / gguf-py, 1 thread each", "gguf_q8", f"{b}_q8_1t" if nt != 1 else f"{b}_q8")
        ratio(f"Q8_0    {b} / C reference, {nt} threads each", "c_q8", f"{b}_q8")
    print(f"largest tensor: {max(np.prod(c.shape) for c in work) * 4 / 2**20:.0f} MiB as float32")
    if lib is not None or not args.no_gguf:
        verdict = "yes, every tensor" if not mismatched else "NO: " + ", ".join(mismatched)
        print("bytes identical to the references: " + verdict)
    pool.shutdown()


if __name__ == "__main__":
    main()
