#!/usr/bin/env python
"""Throughput and peak memory of dflash_gguf's quantizers against ggml's C reference.

Generates a realistic DFlash drafter's weights (hidden 4096, 5 layers, intermediate 12288,
32 q heads x 128, 8 kv heads, fc 5*4096 -> 4096; bf16-representable values), one tensor at a
time, and in one run reports:

  * Q4_K_M through the llama-quantize plan (Q4_K + Q6_K): ours vs ggml's C reference
    (``ggml_quantize_chunk`` from llama-cpp-python's libggml-base, threaded over rows on the
    same number of threads) -- and whether the bytes are identical;
  * Q8_0: ours vs gguf-py's ``gguf.quantize`` (single-threaded by design) and vs C.

Throughput is MB/s of bf16 input (2 bytes per value) and Mvalues/s. "peak RSS" is the
process's high-water mark during the quantize calls above its resident size before them
(``/proc/self/clear_refs`` reset per call), i.e. the quantizer's own working memory.

    python bench/bench_quantize.py              # full size: 1.05e9 values, 2.1 GB as bf16, minutes
    python bench/bench_quantize.py --scale 0.05 # 5% of the rows of every tensor, quick
"""
from __future__ import annotations

import argparse
import ctypes
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gguf  # noqa: E402

from dflash_gguf.quants import quantize, row_nbytes  # noqa: E402
from dflash_gguf.quants.base import default_threads  # noqa: E402
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
    path = Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"
    if not path.is_file():
        return None, f"{path} not found"
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
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of every tensor's rows (default 1.0)")
    ap.add_argument("--threads", type=int, default=default_threads(), help="threads for ours and for C")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-gguf", action="store_true", help="skip the (slow, single-threaded) gguf-py Q8_0 baseline")
    args = ap.parse_args()
    nt = args.threads

    tensors = [(n, ((max(1, round(s[0] * args.scale)),) + s[1:]) if len(s) > 1 else s) for n, s in drafter_tensors()]
    plan = plan_types(tensors, "Q4_K_M", N_LAYER)
    work = [c for c in plan if c.quantized]
    n_vals = sum(int(np.prod(c.shape)) for c in work)
    lib, where = load_ggml()
    print(f"drafter: {len(tensors)} tensors, {len(work)} quantized, {n_vals / 1e6:.1f} M values "
          f"({n_vals * 2 / 1e9:.2f} GB as bf16); threads: {nt}; scale {args.scale}")
    print(f"numpy {np.__version__}, gguf {_version('gguf')}, llama-cpp-python {_version('llama_cpp_python')}; "
          f"C reference: {where if lib is not None else 'UNAVAILABLE - ' + where}")
    mix = {}
    for c in work:
        mix[c.ggml_type.name] = mix.get(c.ggml_type.name, 0) + int(np.prod(c.shape))
    print("Q4_K_M mix: " + ", ".join(f"{k} {v / n_vals:.0%}" for k, v in sorted(mix.items())))

    rng = np.random.default_rng(args.seed)
    t = {k: 0.0 for k in ("ours_q4km", "c_q4km", "ours_q8", "ours_q8_1t", "gguf_q8", "c_q8")}
    peak = {k: 0.0 for k in t}
    mismatched: list[str] = []
    pool = ThreadPoolExecutor(max_workers=nt)

    def timed(key: str, fn):
        with Peak() as pk:
            t0 = time.perf_counter()
            r = fn()
            t[key] += time.perf_counter() - t0
        peak[key] = max(peak[key], pk.mib)
        return r

    for c in work:
        x = bf16_weights(rng, c.shape)
        ours = timed("ours_q4km", lambda: quantize(x, c.ggml_type, name=c.name, threads=nt))
        if lib is not None:
            ref = timed("c_q4km", lambda: ggml_quantize(lib, pool, nt, x, c.ggml_type))
            if not np.array_equal(ours.reshape(-1), ref):
                mismatched.append(f"{c.name} ({c.ggml_type.name})")
        del ours
        q8 = timed("ours_q8", lambda: quantize(x, "q8_0", name=c.name, threads=nt))
        if nt != 1:
            timed("ours_q8_1t", lambda: quantize(x, "q8_0", name=c.name, threads=1))
        if not args.no_gguf:
            g = timed("gguf_q8", lambda: gguf.quantize(x, gguf.GGMLQuantizationType.Q8_0))
            if not np.array_equal(q8, g):
                mismatched.append(f"{c.name} (Q8_0 vs gguf-py)")
            del g
        if lib is not None:
            ref = timed("c_q8", lambda: ggml_quantize(lib, pool, nt, x, gguf.GGMLQuantizationType.Q8_0))
            if not np.array_equal(q8.reshape(-1), ref):
                mismatched.append(f"{c.name} (Q8_0 vs C)")
        del q8, x

    mb = n_vals * 2 / 1e6

    def row(label: str, key: str) -> None:
        if t[key] == 0:
            return
        print(f"  {label:34s} {t[key]:8.2f} s  {mb / t[key]:8.1f} MB/s  {n_vals / t[key] / 1e6:7.1f} Mval/s"
              f"  peak +{peak[key]:7.1f} MiB")

    print("\nQ4_K_M (plan: Q4_K + Q6_K)")
    row(f"dflash_gguf ({nt} threads)", "ours_q4km")
    row(f"ggml C reference ({nt} threads)", "c_q4km")
    print("Q8_0")
    row(f"dflash_gguf ({nt} threads)", "ours_q8")
    row("dflash_gguf (1 thread)", "ours_q8_1t")
    row("gguf-py gguf.quantize (1 thread)", "gguf_q8")
    row(f"ggml C reference ({nt} threads)", "c_q8")
    print("\nratios (>1: dflash_gguf faster)")
    if t["c_q4km"]:
        print(f"  Q4_K_M  ours / C reference, same threads : {t['c_q4km'] / t['ours_q4km']:.2f}x")
    else:
        print("  Q4_K_M  C reference unavailable: only our absolute numbers above")
    if t["gguf_q8"]:
        print(f"  Q8_0    ours / gguf-py                   : {t['gguf_q8'] / t['ours_q8']:.2f}x "
              f"({nt} threads), {t['gguf_q8'] / (t['ours_q8_1t'] or t['ours_q8']):.2f}x (1 thread)")
    if t["c_q8"]:
        print(f"  Q8_0    ours / C reference, same threads : {t['c_q8'] / t['ours_q8']:.2f}x")
    print(f"largest tensor: {max(np.prod(c.shape) for c in work) * 4 / 2**20:.0f} MiB as float32")
    if lib is not None or not args.no_gguf:
        print("bytes identical to the references: " + ("yes, every tensor" if not mismatched else "NO: " + ", ".join(mismatched)))
    pool.shutdown()


if __name__ == "__main__":
    main()
