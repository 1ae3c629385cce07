#!/usr/bin/env python
"""A whole `diagnose` run against the commands a user would otherwise run by hand, whole process.

The job: the trained pair of fixtures/runtime (its five prompts), the BF16 drafter GGUF plus a
Q8_0 and a Q4_K_M made from it, stages 1, 2, 4 and 5 (llama-server with the f32 target.gguf).

  * diagnose:  dflash-gguf diagnose --drafter-gguf drafter.gguf --quants q8_0,q4_k_m
               --target-gguf target.gguf --server-bin BIN --prompts-file ... --json
  * by hand:   dflash-gguf quantize (Q8_0, then Q4_K_M), dflash-gguf parity --drafter-gguf x3
               --emulate llama.cpp (stages 1, 2 and the checkpoint's stage 4), dflash-gguf bench
               --drafter x3 --no-baseline (stage 5): five processes, one after the other.

By hand gives less: parity emulates the runtime for the checkpoint only, not for each GGUF
(diagnose runs stage 4 for every file), and it leaves the attribution to the reader. Wall is
time.perf_counter around each process; peak RSS the largest of any process (rusage of the
children, llama-server included). Needs torch and `make runtime`'s llama-server.

    python benchmarks/bench_diagnose.py                  # --repeat 2
    python benchmarks/bench_diagnose.py --server-bin PATH --repeat 3
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_convert import cpu_flags  # noqa: E402  (the same CPU line)

RUNTIME = ROOT / "fixtures" / "runtime"
PROMPTS = ("--prompts-file", str(RUNTIME / "prompts.jsonl"), "--tokenizer-dir", str(RUNTIME / "target"))
COMMON = ("--device", "cpu", "--max-new-tokens", "64")


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "dflash_gguf", *map(str, args)]


def diagnose_jobs(server: str, work: Path) -> list[list[str]]:
    return [cli("diagnose", "--target", RUNTIME / "target", "--drafter", RUNTIME / "drafter",
                "--drafter-gguf", RUNTIME / "drafter.gguf", "--quants", "q8_0,q4_k_m", "--quants-dir", work,
                "--target-gguf", RUNTIME / "target.gguf", "--server-bin", server, *PROMPTS, *COMMON, "--json")]


def by_hand_jobs(server: str, work: Path) -> list[list[str]]:
    q8, q4 = work / "drafter-Q8_0.gguf", work / "drafter-Q4_K_M.gguf"
    ggufs = (RUNTIME / "drafter.gguf", q8, q4)
    return [
        cli("quantize", RUNTIME / "drafter.gguf", q8, "q8_0", "--force", "--json"),
        cli("quantize", RUNTIME / "drafter.gguf", q4, "q4_k_m", "--force", "--json"),
        cli("parity", "--target", RUNTIME / "target", "--drafter", RUNTIME / "drafter",
            *(a for g in ggufs for a in ("--drafter-gguf", g)), "--emulate", "llama.cpp", *PROMPTS, *COMMON, "--json"),
        cli("bench", "--target", RUNTIME / "target.gguf", *(a for g in ggufs for a in ("--drafter", g)),
            "--suite", RUNTIME / "prompts.jsonl", "--n-predict", "64", "--no-baseline", "--server-bin", server,
            "--json"),
    ]


# each side's processes, one after the other, by the name the table prints
JOBS = {"diagnose": diagnose_jobs, "by hand": by_hand_jobs}


def run_all(jobs: list[list[str]]) -> tuple[float, float]:
    """Seconds for the jobs one after the other, and the peak RSS (MiB) of any process they ran."""
    t = time.perf_counter()
    for cmd in jobs:
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[2:4])} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    wall = time.perf_counter() - t
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-bin", default=os.environ.get("DFLASH_LLAMA_SERVER")
                    or str(ROOT / ".cache" / "llama.cpp-build" / "bin" / "llama-server"))
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternated (default 2)")
    args = ap.parse_args()
    if not Path(args.server_bin).is_file():
        raise SystemExit(f"no llama-server at {args.server_bin}: run `make runtime` or pass --server-bin")
    print(f"cpu: {cpu_flags()}; {len(os.sched_getaffinity(0))} usable; python {platform.python_version()}")
    walls: dict[str, list[float]] = {name: [] for name in JOBS}
    peak: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dflash-bench-diagnose-") as tmp:
        for _ in range(args.repeat):
            for name in JOBS:
                work = Path(tmp) / name.replace(" ", "-")
                work.mkdir(exist_ok=True)
                # peak RSS per side: each side runs in its own child so RUSAGE_CHILDREN is its own
                r = subprocess.run([sys.executable, __file__, "--_side", name, "--server-bin", args.server_bin,
                                    "--_work", str(work)], capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(r.stderr.strip() or r.stdout.strip())
                wall, rss = map(float, r.stdout.split())
                walls[name].append(wall)
                peak[name] = max(peak.get(name, 0.0), rss)
    print(f"{'job':<10} {'wall best':>10} {'median':>8} {'peak RSS':>10}  vs by hand")
    best_hand = min(walls["by hand"])
    for name, w in walls.items():
        w = sorted(w)
        print(f"{name:<10} {w[0]:>9.1f}s {w[len(w) // 2]:>7.1f}s {peak[name]:>8.0f}Mi  {best_hand / w[0]:.2f}x")
    print("vs by hand: by hand's best wall / this job's best wall (>1: faster than by hand)")


if __name__ == "__main__":
    if "--_side" in sys.argv:  # one side, in its own process: prints "wall peak_mib"
        p = argparse.ArgumentParser()
        p.add_argument("--_side")
        p.add_argument("--_work")
        p.add_argument("--server-bin")
        a = p.parse_args()
        print(*run_all(JOBS[a._side](a.server_bin, Path(a._work))))
    else:
        main()
