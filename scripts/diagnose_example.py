#!/usr/bin/env python3
"""The example of docs/diagnose.md: `dflash-gguf diagnose` on the trained pair of fixtures/runtime
with faults planted at two stages, and a real llama-server as stage 5; it writes the two plots
the page shows and prints the command and its output.

    python3 scripts/diagnose_example.py --server-bin .cache/llama.cpp-build/bin/llama-server

What it plants, in --work (a temp dir unless given):
  drafter-theta1e4.gguf   the checkpoint converted with rope_theta 1e4 in its config.json (the
                          trained value is 1e6): a conversion fault, stage 2
  target-Q4_0.gguf        fixtures/runtime/target.gguf quantized to Q4_0 with llama-quantize's mix
                          (our quantizer, the same bytes): the served target, stage 3
and --quants makes drafter-Q8_0.gguf and drafter-Q4_K_M.gguf from the BF16 fixture drafter.
Writes docs/img/diagnose-waterfall.png and docs/img/diagnose-by-position.png (--img-dir).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "fixtures" / "runtime"


def plant(work: Path) -> tuple[Path, Path]:
    from dflash_gguf.convert import convert
    from dflash_gguf.quants.gguf_file import quantize_gguf

    ck = work / "drafter-theta1e4"  # the checkpoint as a converter with a wrong config sees it
    shutil.copytree(RUNTIME / "drafter", ck, dirs_exist_ok=True)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["rope_theta"] = 1e4
    (ck / "config.json").write_text(json.dumps(cfg, indent=2))
    theta = work / "drafter-theta1e4.gguf"
    convert(ck, theta, outtype="bf16", target_dir=RUNTIME / "target", force=True)
    target = work / "target-Q4_0.gguf"
    quantize_gguf(RUNTIME / "target.gguf", target, "q4_0", force=True)
    return theta, target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server-bin", default=os.environ.get("DFLASH_LLAMA_SERVER"),
                    help="llama-server (default: $DFLASH_LLAMA_SERVER)")
    ap.add_argument("--work", type=Path, help="where the planted files go (default: a temp dir, removed)")
    ap.add_argument("--img-dir", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="sampled runs (their sd is the 1σ of the verdict)")
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args()
    if not args.server_bin:
        ap.error("give --server-bin (or set DFLASH_LLAMA_SERVER): stage 5 runs in a real llama-server")
    with tempfile.TemporaryDirectory(prefix="diagnose-example-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        theta, target = plant(work)
        plots = work / "plots"
        argv = ["diagnose", "--target", "fixtures/runtime/target", "--drafter", "fixtures/runtime/drafter",
                "--drafter-gguf", "fixtures/runtime/drafter.gguf", "--drafter-gguf", str(theta),
                "--quants", "q8_0,q4_k_m", "--target-gguf", str(target), "--server-bin", str(args.server_bin),
                "--prompts-file", "fixtures/runtime/prompts.jsonl", "--tokenizer-dir", "fixtures/runtime/target",
                "--max-new-tokens", str(args.max_new_tokens), "--runs", str(args.runs), "--temperature",
                str(args.temperature), "--device", "cpu", "--plots", str(plots)]
        shown = " ".join(a.replace(str(work), "$WORK") for a in argv)
        print(f"$ dflash-gguf {shown}\n", flush=True)
        env = {**os.environ, "NO_COLOR": "1"}  # piped, the table is 200 columns wide: as the docs show it
        r = subprocess.run([sys.executable, "-m", "dflash_gguf", *argv], cwd=ROOT, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        print(r.stdout.replace(str(work), "$WORK"))
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return r.returncode
        args.img_dir.mkdir(parents=True, exist_ok=True)
        for src, dst in (("waterfall.png", "diagnose-waterfall.png"),
                         ("acceptance_by_position.png", "diagnose-by-position.png")):
            shutil.copyfile(plots / src, args.img_dir / dst)
            print(f"wrote {args.img_dir / dst} ({(args.img_dir / dst).stat().st_size:,} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
