"""Benchmark `compare-weights` against the straightforward approach, in one run.

    python bench/bench_compare.py [--layers 2] [--hidden 4096] [--intermediate 12288] [--taps 5] [--repeat 2]
    python bench/bench_compare.py --bands      # re-measure the default tolerance bands instead

Generates a synthetic drafter with Qwen3-8B-DFlash shapes (bf16; 2 layers ~ 0.95 GB) under
bench/_work_compare/, converts it with our library to Q8_0 and to BF16 (lucebox format: no
tokenizer needed; the tensors are the same in every format), then measures, each in a fresh
subprocess, interleaved, best of --repeat:
  - baseline: for each tensor, the checkpoint tensor as float32 (exact), gguf-py's
    GGUFReader + gguf.dequantize for the GGUF side, and the same metrics with plain NumPy on
    whole tensors (relative RMS error, max abs error and where, cosine, norm ratio); no
    re-quantization, one tensor at a time;
  - ours: dflash_gguf.compare.compare_weights (which also re-quantizes every tensor with the
    ggml-exact quantizer and checks the bytes).
Prints throughput (MB/s of checkpoint bytes), the ratio ours/baseline (goal >= 2x) and the
peak RSS of each (VmHWM of the child; ru_maxrss is inherited across exec on Linux).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work_compare"
sys.path.insert(0, str(HERE))
from bench_convert import make_drafter  # noqa: E402  (the same streaming bf16 safetensors writer)

HWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"

OURS = r'''
import sys, time
from dflash_gguf.compare import compare_weights
t = time.perf_counter()
r = compare_weights(sys.argv[1], sys.argv[2])
dt = time.perf_counter() - t
assert r.passed, r.summary
print(dt, HWM, r.summary.replace(" ", "_"))
'''.replace("HWM", HWM)

BASELINE = r'''
import sys, time
import numpy as np
import gguf
from gguf import GGUFReader
from dflash_gguf.formats import meta_from_gguf
from dflash_gguf.fileio.gguf_reader import read_gguf
from dflash_gguf.fileio.safetensors import read_inventory, to_f32

t = time.perf_counter()
inv = {s.name: s for s in read_inventory(sys.argv[1])}
f = read_gguf(sys.argv[2])  # only for the format's name map
fmt, _ = meta_from_gguf(f.kvs, f.shapes(), sys.argv[2])
r = GGUFReader(sys.argv[2])
worst = 0.0
for tg in r.tensors:
    name = fmt.source_name(tg.name)
    src = inv.get(name) or inv["model." + name]
    x = to_f32(src)
    y = gguf.dequantize(tg.data, tg.tensor_type).reshape(x.shape)
    d = (y - x).ravel()
    xr, yr = x.ravel(), y.ravel()
    ss_d, ss_x, ss_y, xy = float(np.vdot(d, d)), float(np.vdot(xr, xr)), float(np.vdot(yr, yr)), float(np.vdot(xr, yr))
    i = int(np.argmax(np.abs(d)))
    rel, max_abs, where = (ss_d / ss_x) ** 0.5, abs(float(d[i])), np.unravel_index(i, x.shape)
    cos, ratio = xy / (ss_x * ss_y) ** 0.5, (ss_y / ss_x) ** 0.5
    worst = max(worst, rel)
print(time.perf_counter() - t, HWM, f"worst_rel_rms={worst:.4g}")
'''.replace("HWM", HWM)

CONVERT = r'''
import sys
from dflash_gguf.convert import convert
convert(sys.argv[1], sys.argv[2], format="lucebox", outtype=sys.argv[3], force=True)
'''

IMPORT_ONLY = f"import dflash_gguf.compare, gguf; print(0, {HWM}, '-')"


def run(code: str, *args: str) -> tuple[float, int, str]:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"benchmark child failed:\n{res.stderr}")
    out = res.stdout.split()
    return float(out[0]), int(out[1]) * 1024, out[2]


def measure_bands(rows: int, cols: int, seed: int) -> None:
    """Relative RMS error and per-block max error / block max |x| of ggml's own encodings on
    weight-like data; the default bands are 1.5x / 2x the worst of these (docs/compare-weights.md)."""
    from dflash_gguf.quants import dequantize, quantize, block_size

    rng = np.random.default_rng(seed)

    def data():
        g = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        yield "gaussian", g
        yield "student-t(3)", (rng.standard_t(3, (rows, cols)) * 0.01).astype(np.float32)
        yield "laplace", rng.laplace(0, 0.02, (rows, cols)).astype(np.float32)
        scale = np.exp(rng.normal(0, 0.5, (rows, 1))) * np.where(rng.random(cols) < 0.01, 10.0, 1.0)
        yield "row/col-scaled", (g * scale).astype(np.float32)
        o = g.copy()
        o[rng.random((rows, cols)) < 0.001] *= 20
        yield "gaussian+0.1%x20", o
        yield "norm-like 1+0.05N", (1 + 0.05 * rng.standard_normal((rows, cols))).astype(np.float32)

    sets = [(n, ((x.view(np.uint32) + 0x8000) >> 16 << 16).astype(np.uint32).view(np.float32)) for n, x in data()]
    print(f"{'type':6} {'distribution':18} {'rel RMS':>9} {'block err':>9}")
    for qt in ("Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0"):
        worst_rel = worst_blk = 0.0
        bs = block_size(qt)
        for name, x in sets:  # bf16-rounded, like real checkpoints
            y = dequantize(quantize(x, qt), qt, x.shape)
            d = (y - x).astype(np.float64)
            rel = float(np.sqrt((d * d).sum() / (x.astype(np.float64) ** 2).sum()))
            blk = float((np.abs(d).reshape(-1, bs).max(1) / np.abs(x).reshape(-1, bs).max(1)).max())
            worst_rel, worst_blk = max(worst_rel, rel), max(worst_blk, blk)
            print(f"{qt:6} {name:18} {rel:9.5f} {blk:9.5f}")
        print(f"{qt:6} {'=> worst':18} {worst_rel:9.5f} {worst_blk:9.5f}   band 1.5x = {1.5 * worst_rel:.4f}, "
              f"block 2x = {2 * worst_blk:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=12288)
    ap.add_argument("--taps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--types", default="q8_0,auto", help="outtypes to measure (comma-separated)")
    ap.add_argument("--keep", action="store_true", help="keep bench/_work_compare/ afterwards")
    ap.add_argument("--bands", action="store_true", help="measure the default tolerance bands and exit")
    args = ap.parse_args()
    if args.bands:
        measure_bands(512, 4096, 1)
        return

    d = WORK / "drafter"
    t0 = time.perf_counter()
    heads = min(args.heads, max(1, args.hidden // 128))
    largest = make_drafter(d, args.layers, args.hidden, args.intermediate, args.taps, heads=heads,
                           kv=max(1, heads // 4))
    size = (d / "model.safetensors").stat().st_size
    print(f"synthetic drafter: {size / 1e9:.2f} GB bf16, {args.layers} layers, hidden {args.hidden}, "
          f"largest tensor {largest / 1e6:.0f} MB (generated in {time.perf_counter() - t0:.1f} s)")
    base_rss = run(IMPORT_ONLY)[1]
    mb = size / 1e6
    try:
        for outtype in args.types.split(","):
            g = WORK / f"drafter-{outtype}.gguf"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", CONVERT, str(d), str(g), outtype], check=True)
            print(f"\n[{outtype}] converted to {g.name} ({g.stat().st_size / 1e9:.2f} GB) in "
                  f"{time.perf_counter() - t0:.1f} s")
            base, ours = [], []
            for _ in range(args.repeat):  # interleaved, so background load hits both alike
                base.append(run(BASELINE, str(d), str(g)))
                ours.append(run(OURS, str(d), str(g)))
            bt, ot = min(b[0] for b in base), min(o[0] for o in ours)
            print(f"  baseline (gguf-py dequantize + numpy)  {mb / bt:8.1f} MB/s  ({bt:.2f} s, "
                  f"peak RSS {max(b[1] for b in base) / 1e6:.0f} MB)  {base[0][2]}")
            print(f"  ours (compare_weights, + re-quantize)  {mb / ot:8.1f} MB/s  ({ot:.2f} s, "
                  f"peak RSS {max(o[1] for o in ours) / 1e6:.0f} MB)  {ours[0][2].replace('_', ' ')}")
            print(f"  ratio ours/baseline {bt / ot:.2f}x  (goal >= 2x); interpreter + imports alone "
                  f"{base_rss / 1e6:.0f} MB; largest tensor {largest / 1e6:.0f} MB bf16")
            g.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
