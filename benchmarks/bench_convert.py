"""Benchmark `convert` against `cp` and llama.cpp's own converter: whole processes, one run.

    python benchmarks/bench_convert.py [--layers 2] [--repeat 3] [--no-reference] [--keep] [--before DIR]
                                       [--no-compile] [--no-sync] [--work DIR]

Generates a synthetic drafter with Qwen3-8B-DFlash shapes (bf16; 2 layers ≈ 0.95 GB, 5 layers
≈ 2.1 GB) under benchmarks/_work/ (--work DIR: under DIR/_work/) and a Qwen3-8B target with the
real 151,936-token BPE vocabulary, as a Hugging Face dir and as a (vocab-only) GGUF written by
llama.cpp's converter; both come from the test helpers (tests/target/real_vocab.py, cached under
.cache/real-vocab or $DFLASH_CACHE), which need DFLASH_LLAMA_CPP_SRC = vendor/llama.cpp of the
llama-cpp-python 0.3.36 sdist.

Then runs, each as a fresh child process, interleaved round by round (so background load on a
shared machine hits every job alike), --repeat rounds:
  cp            `cp` of model.safetensors (GNU cp 9: one copy_file_range of the whole file)
  copy16        a Python read/write copy in 16 MiB chunks (user-space streaming, for scale)
  ours-gguf     `python -m dflash_gguf convert D -o X --target-gguf T.gguf` (tokenizer KVs copied)
  gguf-dry      the same with --dry-run --json (everything but the write; ours-gguf minus it = the data path)
  ours-dir      `python -m dflash_gguf convert D -o X --target-dir T/` (vocab built from tokenizer.json)
  llama.cpp     `convert_hf_to_gguf.py D --target-model-dir T/ --outfile X` (the vendored converter)
  before-gguf   with --before DIR: ours-gguf of another checkout (e.g. a `git archive` of main)
  startup       `python -c "import typer"`: the interpreter, site and typer, which every run of
                ours pays before any of our code (context for the ratio, not part of any goal)
Each job writes its own output, and every timed run overwrites the one its previous run left, as
users re-run a conversion (`cp` truncates it; ours replaces it by rename, --force): an untimed run
of each job creates them first. Replacing costs what a first write does not: the old file's blocks
and page cache are freed, and on a VM whose freed memory goes back to the host, writing into memory
freed seconds earlier costs a host fault per page. Dirty pages are synced before each run, so one
job's writeback does not land in the next one's timing (the old output is then clean, as when a
conversion is re-run minutes later); --no-sync runs back to back with the old outputs still dirty,
as re-runs seconds apart. Every round's times are printed. For each job: wall (best and median),
CPU (user+sys of the child, from os.wait4) and peak RSS (ru_maxrss of the child; a child's starts
at its parent's peak, so the inputs are generated in a separate child and this process stays
small: the floor is printed); then the ratios set as goals (ours-gguf ≥ 0.8× cp, its data path
≥ 1.0× cp, ours-dir ≥ 3× llama.cpp, peak ≤ 3 × largest tensor + 300 MiB). Timings on a shared
machine are noisy: read best and median, and the paired ratio (per round, cp against the job run
moments later, then the median).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _models import (add_shape_flags, qwen3_dflash_config, qwen3_dflash_tensors, shape_argv,  # noqa: E402
                     write_bf16_safetensors)
MiB = 1 << 20


def _pieces(rng, shape: tuple[int, ...], matrix: bool):
    """Flat pieces of 16 M values: N(0, 0.02) matrices, 1 + N(0, 0.05) norms (only plausible
    bytes matter to a copy)."""
    n = int(np.prod(shape))
    for start in range(0, n, 1 << 24):
        m = min(1 << 24, n - start)
        yield (rng.standard_normal(m, dtype=np.float32) * 0.02) if matrix else (1 + 0.05 * rng.standard_normal(m, dtype=np.float32))


def make_drafter(d: Path, layers: int, H: int, I: int, taps: int, heads: int = 32, kv: int = 8, hd: int = 128) -> int:
    d.mkdir(parents=True, exist_ok=True)
    t = qwen3_dflash_tensors(layers, H, I, taps, heads, kv, hd)
    cfg = qwen3_dflash_config(layers, H, I, taps, vocab=151936, mask_token_id=151669, heads=heads, kv=kv, hd=hd)
    (d / "config.json").write_text(json.dumps(cfg))
    write_bf16_safetensors(d / "model.safetensors", t, _pieces, round_half_even=False)
    return max(int(np.prod(s)) * 2 for s, _ in t.values())


def filesystem(path: Path) -> str:
    """The type of the file system holding ``path`` and its mount options (/proc/mounts)."""
    best, what = "", "?"
    try:
        for line in open("/proc/mounts"):
            _, mount, fstype, opts = line.split()[:4]
            mount = mount.replace("\\040", " ")
            if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
                best, what = mount, f"{fstype} ({opts}) on {mount}"
    except OSError:
        pass
    return what


def make_target(dest: Path) -> tuple[Path, Path]:
    """The Qwen3-8B target with its real vocabulary: (HF dir, vocab-only GGUF by llama.cpp)."""
    sys.path.insert(0, str(ROOT))
    from tests.target.real_targets import TARGETS
    from tests.target.real_vocab import real_target_dir, real_target_gguf

    vocab, config, _ = TARGETS["Qwen3-8B"]
    tdir = real_target_dir(vocab, config, dest / "Qwen3-8B")
    return tdir, real_target_gguf(tdir, dest / "Qwen3-8B.gguf")


def cpu_flags() -> str:
    model, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    have = [f for f in ("avx2", "avx512f") if f in flags]
    return f"{model}, {os.cpu_count()} cores, {'+'.join(have) or 'no avx2/avx512f'}"


def run_child(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s = user + sys, peak RSS bytes) of one child process, from os.wait4.
    posix_spawn/vfork (subprocess's default here) gives the child no copy of this process's
    pages, so its ru_maxrss is its own. ``cwd``: a checkout's root, so that ``python -m``
    imports that checkout (its cwd comes first on sys.path)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode:
        sys.exit(f"benchmark child failed ({proc.returncode}): {' '.join(argv)}\n{err[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_flags(ap)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-reference", action="store_true", help="skip llama.cpp's converter (slow: torch)")
    ap.add_argument("--keep", action="store_true", help="keep benchmarks/_work/ afterwards")
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout of dflash-gguf to time its convert --target-gguf alongside")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not byte-compile dflash_gguf first (time the source compile too)")
    ap.add_argument("--no-sync", action="store_true",
                    help="no sync before each run: old outputs are still dirty, as re-runs seconds apart")
    ap.add_argument("--work", type=Path, default=HERE,
                    help="where to put the _work/ folder of inputs and outputs (default: benchmarks/)")
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)  # the generating child
    args = ap.parse_args()
    src_env = os.environ.get("DFLASH_LLAMA_CPP_SRC")
    if not src_env or not (Path(src_env) / "convert_hf_to_gguf.py").is_file():
        sys.exit("set DFLASH_LLAMA_CPP_SRC to vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist")
    llama_src = Path(src_env)

    work = args.work.resolve() / "_work"
    d = work / "drafter"
    t0 = time.perf_counter()
    if args.prepare:
        largest = make_drafter(d, args.layers, args.hidden, args.intermediate, args.taps)
        tdir, tgguf = make_target(work / "target")
        print(json.dumps([largest, str(tdir), str(tgguf)]))
        return
    # Generated in a child: a child's ru_maxrss starts at its parent's peak (kept across exec),
    # so this process stays small and the floor it leaves is printed below.
    shutil.rmtree(work, ignore_errors=True)
    prep = subprocess.run([sys.executable, __file__, "--prepare", "--work", str(args.work), *shape_argv(args)],
                          capture_output=True, text=True)
    if prep.returncode:
        sys.exit(f"generating the inputs failed:\n{prep.stderr[-3000:]}")
    largest, tdir, tgguf = json.loads(prep.stdout.splitlines()[-1])
    print(f"CPU: {cpu_flags()}; python {sys.version.split()[0]}; Linux {os.uname().release}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"file system: {filesystem(work)}; rounds overwrite each job's existing output, "
          f"{'back to back (--no-sync)' if args.no_sync else 'synced before each run'}")
    src = d / "model.safetensors"
    size = src.stat().st_size
    print(f"synthetic drafter: {size / 1e9:.2f} GB bf16, {args.layers} layers, hidden {args.hidden}, largest tensor "
          f"{largest / MiB:.0f} MiB; target Qwen3-8B, real 151,936-token vocab (ready in {time.perf_counter() - t0:.1f} s)")

    ours_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    ref_env = {**os.environ, "PYTHONPATH": str(llama_src / "gguf-py")}
    py = sys.executable

    def out(job: str) -> str:
        return str(work / f"out-{job}.gguf")

    def ours(job: str) -> list[str]:
        return [py, "-m", "dflash_gguf", "convert", str(d), "-o", out(job), "--force"]
    copy16 = ("import sys\nwith open(sys.argv[1], 'rb', buffering=0) as f, open(sys.argv[2], 'wb') as g:\n"
              " b = bytearray(16 << 20); m = memoryview(b)\n"
              " while (n := f.readinto(b)): g.write(m[:n])\n")
    jobs = {
        "cp": (["cp", str(src), out("cp")], os.environ.copy(), ROOT),
        "copy16": ([py, "-c", copy16, str(src), out("copy16")], os.environ.copy(), ROOT),
        "ours-gguf": ([*ours("ours-gguf"), "--target-gguf", str(tgguf)], ours_env, ROOT),
        # the same process up to the write: read, validate, plan (its wall, taken from
        # ours-gguf's, is what writing the header and the tensor data costs); --json, because
        # the human dry run renders the whole plan as a table (~30 ms the real run never spends)
        "gguf-dry": ([py, "-m", "dflash_gguf", "convert", str(d), "--dry-run", "--json", "--target-gguf", str(tgguf)],
                     ours_env, ROOT),
        "ours-dir": ([*ours("ours-dir"), "--target-dir", str(tdir)], ours_env, ROOT),
    }
    if args.before:  # run from that checkout's root: `python -m` imports from its cwd first
        before = args.before.resolve()
        jobs["before-gguf"] = ([*ours("before-gguf"), "--target-gguf", str(tgguf)], {**ours_env, "PYTHONPATH": str(before)},
                               before)
    jobs["startup"] = ([py, "-c", "import typer"], ours_env, ROOT)
    if not args.no_reference:
        jobs["llama.cpp"] = ([py, str(llama_src / "convert_hf_to_gguf.py"), str(d), "--target-model-dir", str(tdir),
                              "--outfile", out("llama.cpp"), "--outtype", "auto"], ref_env, ROOT)
    # Byte-compile the checkouts timed, as pip does when it installs: with PYTHONDONTWRITEBYTECODE
    # set (as on some CI machines) every child would otherwise compile our ~40 modules (~65 ms).
    trees = [ROOT] + ([args.before.resolve()] if args.before else [])
    if not args.no_compile:
        import compileall

        for tree in trees:
            compileall.compile_dir(tree / "dflash_gguf", quiet=1)
    print(f"dflash_gguf byte-compiled first: {'no' if args.no_compile else 'yes'} "
          f"(PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})")
    floor = run_child(["true"], os.environ.copy())[2]
    print(f"RSS floor inherited from this process: {floor / MiB:.0f} MiB (no child reports less)")
    for argv, env, cwd in jobs.values():  # untimed: every timed run replaces an existing output
        run_child(argv, env, cwd)
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in jobs}
    for r in range(args.repeat):
        for name, (argv, env, cwd) in jobs.items():
            if not args.no_sync:
                os.sync()  # flush the previous job's dirty pages: none of it lands in this job's timing
            results[name].append(run_child(argv, env, cwd))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in results.items()), flush=True)

    print(f"\n{'job':10} {'wall best':>9} {'median':>7} {'CPU best':>8} {'peak RSS':>9}   MB/s (best)")
    best = {}
    for name, rs in results.items():
        walls = [w for w, _, _ in rs]
        best[name] = min(walls)
        print(f"{name:10} {min(walls):8.2f}s {statistics.median(walls):6.2f}s {min(c for _, c, _ in rs):7.2f}s "
              f"{max(m for _, _, m in rs) / MiB:7.0f}MiB   " + ("     -" if name == "startup" else f"{size / 1e6 / min(walls):6.0f}"))

    def med(name: str) -> float:
        return statistics.median(w for w, _, _ in results[name])

    def paired(name: str) -> float:
        # Jobs run interleaved, so a round's jobs share the machine's state of the moment.
        return statistics.median(c[0] / o[0] for c, o in zip(results["cp"], results[name]))

    print(f"\nload average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    print(f"ratio cp / ours-gguf        best {best['cp'] / best['ours-gguf']:.2f}x, median "
          f"{med('cp') / med('ours-gguf'):.2f}x, paired {paired('ours-gguf'):.2f}x   (goal ≥ 0.80x)")
    if "before-gguf" in best:
        print(f"ratio cp / before-gguf      best {best['cp'] / best['before-gguf']:.2f}x, median "
              f"{med('cp') / med('before-gguf'):.2f}x, paired {paired('before-gguf'):.2f}x")
    print("  (paired: the median over rounds of cp / that job in the same round; a slow phase of the "
          "machine hits both)")
    print(f"start-up before our code (interpreter, site, typer): median {med('startup'):.3f} s of ours-gguf's "
          f"{med('ours-gguf'):.3f} s")
    # Best minus best, median minus median: the minimum of per-round differences would pair one
    # run's luck with another's bad luck (it can come out negative on a noisy machine).
    write = {"best": best["ours-gguf"] - best["gguf-dry"], "median": med("ours-gguf") - med("gguf-dry")}
    cp_of = {"best": best["cp"], "median": med("cp")}
    print("ours-gguf minus its dry run (header + tensor data written): " + ", ".join(
        f"{k} {w:.2f} s -> cp / that {cp_of[k] / w:.2f}x" if w > 0 else f"{k} {w:.2f} s (noise: no estimate)"
        for k, w in write.items()) + " (the data path alone; goal ≥ 1.0x)")
    print(f"ratio cp / ours-dir         best {best['cp'] / best['ours-dir']:.2f}x, median {med('cp') / med('ours-dir'):.2f}x")
    if "llama.cpp" in best:
        print(f"ratio llama.cpp / ours-dir  best {best['llama.cpp'] / best['ours-dir']:.2f}x, median "
              f"{med('llama.cpp') / med('ours-dir'):.2f}x   (goal ≥ 3x)")
    budget = 3 * largest + 300 * MiB
    for name in ("ours-gguf", "ours-dir"):
        peak = max(m for _, _, m in results[name])
        print(f"peak RSS {name:9} {peak / MiB:.0f} MiB; budget 3 × largest ({largest / MiB:.0f} MiB) + 300 MiB = "
              f"{budget / MiB:.0f} MiB: {'within' if peak <= budget else 'OVER'}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
