"""Benchmark `convert` against a plain copy of the same bytes, in one run.

    python bench/bench_convert.py [--layers 2] [--hidden 4096] [--intermediate 12288] [--taps 5]

Generates a synthetic drafter with Qwen3-8B-DFlash shapes (bf16; 2 layers ≈ 0.95 GB, 5 layers
≈ 2.1 GB) under bench/_work/, then measures, each in a fresh subprocess (best of --repeat):
  - baseline: a user-space copy of model.safetensors in 16 MiB chunks (read + write, same bytes);
  - convert bf16 → bf16 (auto), lucebox format (no tokenizer needed; the write path is the same).
Prints throughput (MB/s of source bytes), the ratio convert/copy, and convert's peak RSS next to
the largest tensor (targets: ratio ≥ 0.8, peak ≤ 3 × largest + 300 MB).
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORK = Path(__file__).resolve().parent / "_work"


def write_bf16_safetensors(path: Path, tensors: dict[str, tuple[tuple[int, ...], int]], seed: int = 0) -> int:
    """Stream a bf16 safetensors file tensor by tensor (safetensors' writers need the whole dict
    in memory, and its numpy API has no bf16; the format is a JSON header + raw bytes)."""
    header, offset = {}, 0
    for name, (shape, _) in sorted(tensors.items()):
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, (shape, kind) in sorted(tensors.items()):
            n = int(np.prod(shape))
            for start in range(0, n, 1 << 24):
                m = min(1 << 24, n - start)
                x = (rng.standard_normal(m, dtype=np.float32) * 0.02) if kind else (1 + 0.05 * rng.standard_normal(m, dtype=np.float32))
                f.write(((x.view(np.uint32) + 0x8000) >> 16).astype(np.uint16).tobytes())
    return offset


def make_drafter(d: Path, layers: int, H: int, I: int, taps: int, heads: int = 32, kv: int = 8, hd: int = 128) -> int:
    d.mkdir(parents=True, exist_ok=True)
    t = {"fc.weight": ((H, taps * H), 1), "hidden_norm.weight": ((H,), 0), "norm.weight": ((H,), 0)}
    for i in range(layers):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": ((H,), 0), p + "post_attention_layernorm.weight": ((H,), 0),
                  p + "self_attn.q_proj.weight": ((heads * hd, H), 1), p + "self_attn.k_proj.weight": ((kv * hd, H), 1),
                  p + "self_attn.v_proj.weight": ((kv * hd, H), 1), p + "self_attn.o_proj.weight": ((H, heads * hd), 1),
                  p + "self_attn.q_norm.weight": ((hd,), 0), p + "self_attn.k_norm.weight": ((hd,), 0),
                  p + "mlp.gate_proj.weight": ((I, H), 1), p + "mlp.up_proj.weight": ((I, H), 1),
                  p + "mlp.down_proj.weight": ((H, I), 1)})
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 40960, "vocab_size": 151936,
           "block_size": 16, "num_target_layers": 36,
           "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33][:taps]}}
    (d / "config.json").write_text(json.dumps(cfg))
    write_bf16_safetensors(d / "model.safetensors", t)
    return max(int(np.prod(s)) * 2 for s, _ in t.values())


# Peak RSS from VmHWM: ru_maxrss is inherited across fork+exec on Linux, so a child would
# report the (big) parent's peak.
HWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"

COPY = r'''
import sys, time
src, dst = sys.argv[1], sys.argv[2]
t = time.perf_counter()
with open(src, "rb", buffering=0) as f, open(dst, "wb") as g:
    buf = bytearray(16 << 20); mv = memoryview(buf)
    while True:
        n = f.readinto(buf)
        if not n: break
        g.write(mv[:n])
print(time.perf_counter() - t, HWM)
'''.replace("HWM", HWM)

CONVERT = r'''
import sys, time
from dflash_gguf.convert import convert
t = time.perf_counter()
convert(sys.argv[1], sys.argv[2], format="lucebox", outtype=sys.argv[3], force=True)
print(time.perf_counter() - t, HWM)
'''.replace("HWM", HWM)

IMPORT_ONLY = f"import dflash_gguf.convert; print(0, {HWM})"


def run(code: str, *args: str, fresh: Path | None = None) -> tuple[float, int]:
    if fresh is not None:
        fresh.unlink(missing_ok=True)  # both sides write a new file: no unlink/truncate in the timing
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1]) * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=12288)
    ap.add_argument("--taps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep bench/_work/ afterwards")
    args = ap.parse_args()

    d = WORK / "drafter"
    t0 = time.perf_counter()
    largest = make_drafter(d, args.layers, args.hidden, args.intermediate, args.taps)
    src = d / "model.safetensors"
    size = src.stat().st_size
    print(f"synthetic drafter: {size / 1e9:.2f} GB bf16, {args.layers} layers, hidden {args.hidden}, "
          f"largest tensor {largest / 1e6:.0f} MB (generated in {time.perf_counter() - t0:.1f} s)")

    copy_t, conv = float("inf"), []
    for _ in range(args.repeat):  # interleaved, so background load hits both alike
        copy_t = min(copy_t, run(COPY, str(src), str(WORK / "copy.bin"), fresh=WORK / "copy.bin")[0])
        conv.append(run(CONVERT, str(d), str(WORK / "out.gguf"), "auto", fresh=WORK / "out.gguf"))
    conv_t, conv_rss = min(c[0] for c in conv), max(c[1] for c in conv)
    base_rss = run(IMPORT_ONLY)[1]
    mb = size / 1e6
    print(f"plain copy         {mb / copy_t:8.0f} MB/s  ({copy_t:.2f} s)")
    print(f"convert bf16→bf16  {mb / conv_t:8.0f} MB/s  ({conv_t:.2f} s)")
    print(f"ratio convert/copy {copy_t / conv_t:.2f}x   (target ≥ 0.80x)")
    print(f"peak RSS convert   {conv_rss / 1e6:.0f} MB (interpreter + imports alone: {base_rss / 1e6:.0f} MB); "
          f"largest tensor {largest / 1e6:.0f} MB; budget 3×largest + 300 MB = {(3 * largest + 300e6) / 1e6:.0f} MB")
    if not args.keep:
        shutil.rmtree(WORK)


if __name__ == "__main__":
    main()
