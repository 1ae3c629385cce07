"""Benchmark `compare-weights` against the straightforward approach: whole processes, one run.

    python benchmarks/bench_compare.py [--layers 2] [--types q8_0,q4_k_m,auto,f16] [--repeat 3] [--keep]
                                  [--before DIR]   # also time another checkout (e.g. a git archive of main)
    python benchmarks/bench_compare.py --bands      # re-measure the default tolerance bands instead

Generates a synthetic drafter with Qwen3-8B-DFlash shapes (bf16; 2 layers ~ 0.95 GB) under
benchmarks/_work_compare/ and converts it with our library to each --types outtype (lucebox format:
no tokenizer needed; the tensors are the same in every format; "auto" keeps bf16). Then, per
type, runs each side as a fresh child process, interleaved, --repeat rounds:
  - baseline: for each tensor, the checkpoint tensor as float32 (exact), gguf-py's
    GGUFReader + gguf.dequantize for the GGUF side, and the same metrics with plain NumPy on
    whole tensors (relative RMS error, max abs error and where, cosine, norm ratio); no
    re-quantization, one tensor at a time;
  - ours: `python -m dflash_gguf compare-weights D G --json` (which also re-encodes every
    tensor with the ggml-exact quantizer and compares the bytes), its verdict checked (the
    report is the envelope's payload; a --before checkout older than 0.2 prints it bare);
  - ours-noreq (quantized types): the same with --no-requantize, to show what the re-encode
    check costs (not the goal's measure: it gives up the bit-identical verdict);
  - ours-before (with --before DIR): `compare-weights` of another checkout, for before/after.
One untimed round first (numba's cache, the page cache), then --repeat timed rounds. For each:
wall of the whole process (best and median), CPU (user + sys, os.wait4; median), peak RSS
(ru_maxrss of the child), the library's own time (inside the process, after imports), and the
ratio baseline/ours (goal >= 2x on every type). Timings on a shared machine are noisy: the load
average is printed with each type, and every job of a round runs back to back.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work_compare"
sys.path.insert(0, str(HERE))
from _models import add_shape_flags, shape_argv  # noqa: E402
from bench_convert import cpu_flags, make_drafter  # noqa: E402  (the same drafter, the same CPU line)

MiB = 1 << 20

BASELINE = r'''
import sys, time
t = time.perf_counter()
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
print(time.perf_counter() - t, f"worst_rel_rms={worst:.4g}")
'''

CONVERT = r'''
import sys
from dflash_gguf.convert import convert
convert(sys.argv[1], sys.argv[2], format="lucebox", outtype=sys.argv[3], force=True)
'''


def run_child(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int, str]:
    """(wall s, CPU s, peak RSS bytes, stdout) of one child process, from os.wait4. A child's
    ru_maxrss starts at this process's peak (kept across exec): this one stays small. ``cwd``:
    a checkout's root, so that ``python -m`` imports that checkout (its cwd comes first)."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.PIPE, cwd=cwd)
        err = proc.stderr.read()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.stderr.close()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if code:
        sys.exit(f"benchmark child failed ({code}): {' '.join(argv)}\n{err.decode(errors='replace')[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, text


def _report(stdout: str) -> dict:
    """compare-weights' report from its --json stdout: the envelope's payload (0.2 on), or the
    bare report a --before checkout older than 0.2 prints."""
    doc = json.loads(stdout)
    return doc["payload"] if "schema_version" in doc else doc


def measure_bands(rows: int, cols: int, seed: int) -> None:
    """Relative RMS error and per-block max error / block max |x| of ggml's own encodings on
    weight-like data; the default bands are 1.5x / 2x the worst of these (docs/compare-weights.md)."""
    import numpy as np

    from dflash_gguf.compare import BANDS
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
    for qt in [n for n, b in BANDS.items() if b.block_err is not None]:  # the quantized types BANDS holds
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
    add_shape_flags(ap)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--types", default="q8_0,q4_k_m,auto,f16", help="outtypes to measure (comma-separated)")
    ap.add_argument("--keep", action="store_true", help="keep benchmarks/_work_compare/ afterwards")
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout of dflash-gguf (e.g. a `git archive` of main) to time alongside")
    ap.add_argument("--bands", action="store_true", help="measure the default tolerance bands and exit")
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)  # the generating child
    args = ap.parse_args()
    if args.bands:
        measure_bands(512, 4096, 1)
        return
    d = WORK / "drafter"
    heads = min(args.heads, max(1, args.hidden // 128))
    if args.prepare:
        largest = make_drafter(d, args.layers, args.hidden, args.intermediate, args.taps, heads=heads,
                               kv=max(1, heads // 4))
        print(largest)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    shutil.rmtree(WORK, ignore_errors=True)
    t0 = time.perf_counter()
    # Generated in a child, so this process (whose peak every child's ru_maxrss starts from) stays small.
    prep = subprocess.run([sys.executable, __file__, "--prepare", *shape_argv(args), "--heads", str(args.heads)],
                          capture_output=True, text=True, env=env)
    if prep.returncode:
        sys.exit(f"generating the drafter failed:\n{prep.stderr[-3000:]}")
    largest = int(prep.stdout.split()[-1])
    size = (d / "model.safetensors").stat().st_size
    print(f"CPU: {cpu_flags()}; python {sys.version.split()[0]}")
    print(f"synthetic drafter: {size / 1e9:.2f} GB bf16, {args.layers} layers, hidden {args.hidden}, "
          f"largest tensor {largest / MiB:.0f} MiB (generated in {time.perf_counter() - t0:.1f} s)")
    floor = run_child(["true"], os.environ.copy())[2]
    print(f"RSS floor inherited from this process: {floor / MiB:.0f} MiB (no child reports less)")
    py = sys.executable
    try:
        for outtype in args.types.split(","):
            g = WORK / f"drafter-{outtype}.gguf"
            t0 = time.perf_counter()
            subprocess.run([py, "-c", CONVERT, str(d), str(g), outtype], check=True, env=env)
            print(f"\n[{outtype}] converted to {g.name} ({g.stat().st_size / 1e9:.2f} GB) in "
                  f"{time.perf_counter() - t0:.1f} s")
            jobs = {"baseline": ([py, "-c", BASELINE, str(d), str(g)], env, ROOT),
                    "ours": ([py, "-m", "dflash_gguf", "compare-weights", str(d), str(g), "--json"], env, ROOT)}
            if outtype.startswith("q"):  # where the time goes: the same without the re-encode check
                jobs["ours-noreq"] = ([*jobs["ours"][0], "--no-requantize"], env, ROOT)
            if args.before:
                before = args.before.resolve()
                jobs["ours-before"] = (jobs["ours"][0], {**env, "PYTHONPATH": str(before)}, before)
            res: dict[str, list] = {k: [] for k in jobs}
            print(f"  load average {os.getloadavg()[0]:.2f} (2-core machine: above 2, jobs wait for a core)")
            for r in range(args.repeat + 1):  # interleaved, so background load hits all alike
                for name, (argv, job_env, cwd) in jobs.items():
                    got = run_child(argv, job_env, cwd)
                    if r:  # round 0 warms numba's cache and the page cache, untimed
                        res[name].append(got)
            note = {"baseline": res["baseline"][0][3].split()[1]}
            inner = {"baseline": [float(r[3].split()[0]) for r in res["baseline"]]}
            for name in jobs:
                if name.startswith("ours"):
                    doc = _report(res[name][0][3])
                    assert doc["verdict"] == "pass", doc["summary"]
                    inner[name] = [float(_report(r[3])["seconds"]) for r in res[name]]
                    note[name] = doc["summary"]["line"]
            for name in jobs:
                walls = [r[0] for r in res[name]]
                print(f"  {name:11} wall best {min(walls):6.2f} s, median {statistics.median(walls):6.2f} s; "
                      f"CPU median {statistics.median(r[1] for r in res[name]):6.2f} s; "
                      f"peak RSS {max(r[2] for r in res[name]) / MiB:5.0f} MiB; "
                      f"in-process {min(inner[name]):6.2f} s   {note[name]}")
            bw, ow = [r[0] for r in res["baseline"]], [r[0] for r in res["ours"]]
            print(f"  ratio baseline/ours: best {min(bw) / min(ow):.2f}x, median "
                  f"{statistics.median(bw) / statistics.median(ow):.2f}x   (goal >= 2x); "
                  f"{size / 1e6 / min(ow):.0f} MB/s of checkpoint bytes")
            if args.before:
                pw = [r[0] for r in res["ours-before"]]
                print(f"  ratio baseline/ours-before: median {statistics.median(bw) / statistics.median(pw):.2f}x; "
                      f"ours-before/ours: median {statistics.median(pw) / statistics.median(ow):.2f}x")
            print(f"  load average {os.getloadavg()[0]:.2f}")
            g.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
