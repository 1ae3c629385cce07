#!/usr/bin/env python3
"""gpu-check: the CUDA paths of `parity` and the benchmarks, on a GPU machine with no registry.

    make gpu-wheels        # beforehand, where pip works: fills .cache/gpu-wheels/
    make gpu-check         # on the GPU machine, with that folder in the checkout
    python3 scripts/gpu_check.py --device cpu --no-install   # the same steps, CPU against CPU

Steps, each with a time limit and all of them within MAX_TOTAL_S:
  install         our package from the checkout, offline (pip --no-index), plus the carried wheels
                  the machine's Python lacks or holds outside our pins
  gpu-tests       the tests marked `gpu`
  parity          `dflash-gguf parity` on the GPU and on the CPU, same prompts: same output ids and
                  drafting rounds, every dumped tensor within REL_BOUND of the CPU's
  bench-parity    benchmarks/bench_parity.py on the GPU (ours against z-lab's dflash_generate)
  bench-diagnose  benchmarks/bench_diagnose.py on the GPU, once it exists
Then one summary. Exit 0 when no step failed, 1 when one did, 2 when there is no CUDA device.

Only the standard library is imported up front, so the no-GPU message comes out anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".cache" / "gpu-wheels"
MAX_TOTAL_S = 450  # 7.5 minutes, so the whole run with start-up and the summary stays under 8
MIN_STEP_S = 15  # a step with less time left than this is not started
# Float32 with TF32 off: CPU and cuBLAS/SDPA differ only in reduction order, ~1e-6 of a tensor's
# magnitude per op, ~1e-5 through a model; 1e-3 of the magnitude is 100x that, while a silent drop
# to TF32 or half precision (2^-10, 2^-8 per product) lands near or above it.
REL_BOUND = 1e-3
RUNTIME = ROOT / "fixtures" / "runtime"  # the trained target/drafter pair (fixtures/make_runtime_pair.py)
# Two prompts: the first is the opening of the text the pair was trained on (long accepted rounds),
# the second arbitrary ids (rejections, partial acceptance). Ids, not text: no tokenizer needed.
PROMPTS = [
    [318, 220, 75, 72, 70, 71, 83, 71, 78, 84, 82, 68, 220, 74, 68, 68, 79, 258, 355, 307, 83, 68, 337, 68, 220, 75,
     326, 353, 273, 220, 292, 70, 220, 68, 308, 88, 312, 72, 70, 71, 83, 13, 220, 46, 77, 220, 66, 320, 76, 312],
    [1, 5, 9, 33, 71, 100, 7, 250, 19, 400, 3, 77],
]
NEW_TOKENS = 48
# bench_parity.py's defaults on the GPU; on the CPU (the dry run) a model small enough to take seconds
BENCH_CPU_SIZES = ["--hidden", "64", "--layers", "4", "--heads", "4", "--kv-heads", "2", "--vocab", "512",
                   "--prompts", "1", "--prompt-len", "16", "--max-new-tokens", "16", "--trials", "1", "--repeat", "1"]


@dataclass
class Result:
    status: str  # "ok" | "failed" | "skipped"
    detail: str = ""
    numbers: dict = field(default_factory=dict)  # into summary.json


@dataclass
class Ctx:
    device: str  # "cuda", or "cpu" for the dry run
    logs: Path
    work: Path
    install: bool
    env: dict


@dataclass
class Step:
    name: str
    budget_s: float
    run: Callable[[Ctx, float], Result]  # gets the seconds it may take


# --- running commands -----------------------------------------------------------------------------

def run_logged(ctx: Ctx, log: str, cmd: list[str], limit: float, *, cwd: Path = ROOT,
               env: dict | None = None) -> int | None:
    """Run ``cmd`` (in the checkout) with its output appended to logs/``log``; the exit code, or None
    when it ran past ``limit`` seconds. Its own process group, so a timeout ends its children too
    (pytest's, the benchmark's)."""
    with open(ctx.logs / log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env or ctx.env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended just now
                pass
            proc.wait()
            f.write(f"\n[gpu-check: stopped after {limit:.0f} s]\n")
            return None


def ran(rc: int | None, limit: float, what: str) -> str | None:
    """Why a command failed, or None if it exited 0."""
    if rc is None:
        return f"{what}: over its {limit:.0f} s limit"
    return None if rc == 0 else f"{what}: exit {rc}"


# --- install --------------------------------------------------------------------------------------

def wheel_name(path: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return re.sub(r"[-_.]+", "-", name).lower(), version


def our_pins(pyproject: Path) -> dict[str, str]:
    """Distribution name -> version specifier, from our core dependencies and the test extra."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip vendors tomli
        from pip._vendor import tomli as tomllib

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    pins = {}
    for req in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", req)
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2).split(";")[0].strip()
    return pins


def needs_install(installed: str | None, spec: str) -> bool:
    """A carried wheel goes in where the machine lacks the package or holds a version outside our
    pin; one that satisfies the pin is kept, since the rest of that Python was installed against it."""
    if installed is None:
        return True
    if not spec:
        return False
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.specifiers import SpecifierSet
    return not SpecifierSet(spec).contains(installed, prereleases=True)


def installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def step_install(ctx: Ctx, limit: float) -> Result:
    if not ctx.install:
        return Result("skipped", "--no-install: the package as already installed")
    wheels = sorted(WHEELS.glob("*.whl"))
    if not wheels:
        return Result("failed", f"no wheels in {WHEELS.relative_to(ROOT)}: run `make gpu-wheels` where pip works "
                                "and bring the folder along")
    pins = our_pins(ROOT / "pyproject.toml")
    carried, kept = [], []
    for w in wheels:
        name, version = wheel_name(w)
        if name == "setuptools":  # only pip's isolated build of our package uses it (--find-links)
            continue
        have = installed_version(name)
        if needs_install(have, pins.get(name, "")):
            carried.append((w, f"{name} {version}"))
        else:
            kept.append(f"{name} {have}")
    t0 = time.monotonic()
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
           "--find-links", str(WHEELS)]
    if carried:
        why = ran(run_logged(ctx, "install.log", [*pip, *(str(w) for w, _ in carried)], limit), limit, "pip install wheels")
        if why:
            return Result("failed", why)
    # editable: the tests and benchmarks run from this checkout, and so does the installed package
    left = limit - (time.monotonic() - t0)
    why = ran(run_logged(ctx, "install.log", [*pip, "-e", str(ROOT)], left), left, "pip install -e .")
    if why:
        return Result("failed", why)
    # In a fresh interpreter (this one has looked the packages up already), outside the checkout and
    # without the PYTHONPATH the other steps get: the installed package alone must be this checkout.
    probe = ("import pathlib, dflash_gguf, gguf, numpy, safetensors, typer, rich, numba; "
             f"p = pathlib.Path(dflash_gguf.__file__).resolve(); print(p); assert p.is_relative_to({str(ROOT)!r}), p")
    env = {k: v for k, v in ctx.env.items() if k != "PYTHONPATH"}
    left = limit - (time.monotonic() - t0)
    why = ran(run_logged(ctx, "install.log", [sys.executable, "-c", probe], left, cwd=ctx.work, env=env), left,
              "importing the installed package")
    if why:
        return Result("failed", why + " (see install.log: a dependency missing, or another copy installed)")
    detail = "dflash-gguf editable from the checkout; carried: " + (", ".join(n for _, n in carried) or "none")
    if kept:
        detail += "; the machine's own: " + ", ".join(kept)
    return Result("ok", detail, {"carried": [n for _, n in carried], "kept": kept})


# --- gpu-tests ------------------------------------------------------------------------------------

def gpu_test_files() -> list[Path]:
    """The test modules holding a `gpu` mark: collecting the whole suite would take longer than
    running these, and would fail on modules that need packages this machine may not have."""
    return sorted(p for p in (ROOT / "tests").rglob("test_*.py") if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def junit_counts(xml_path: Path) -> dict[str, int]:
    """tests / failures / errors / skipped, summed over pytest's junit XML."""
    root = ET.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def judge_tests(c: dict[str, int], device: str) -> tuple[str, str]:
    """A `gpu` test skips only without CUDA: on a GPU a skip means the check did not happen."""
    passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    text = f"{passed} passed, {c['failures'] + c['errors']} failed, {c['skipped']} skipped"
    if c["tests"] == 0:
        return "failed", "no gpu-marked test collected"
    if c["failures"] or c["errors"]:
        return "failed", text
    if c["skipped"] and device == "cuda":
        return "failed", text + " (a gpu test skipped on a CUDA machine)"
    return "ok", text


def step_gpu_tests(ctx: Ctx, limit: float) -> Result:
    files = gpu_test_files()
    xml = ctx.work / "gpu-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *(str(f.relative_to(ROOT)) for f in files)]
    rc = run_logged(ctx, "gpu-tests.log", cmd, limit)
    if rc is None or not xml.is_file():
        return Result("failed", ran(rc, limit, "pytest") or f"pytest exit {rc}, no report")
    counts = junit_counts(xml)
    status, text = judge_tests(counts, ctx.device)
    return Result(status, f"{text} in {len(files)} modules", counts)


# --- parity: the GPU against the CPU --------------------------------------------------------------

def compare_reports(a: dict, b: dict) -> list[str]:
    """Per prompt, the reference's and each GGUF drafter's output ids and acceptance lengths."""
    pa, pb = a.get("prompts") or [a], b.get("prompts") or [b]
    if len(pa) != len(pb):
        return [f"{len(pa)} prompts against {len(pb)}"]
    problems = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        for rx, ry in zip([x["reference"], *x["drafters"]], [y["reference"], *y["drafters"]]):
            who = f"prompt {i}, {Path(rx['name']).name}"
            if rx["new_ids"] != ry["new_ids"]:
                at = next((k for k, (s, t) in enumerate(zip(rx["new_ids"], ry["new_ids"])) if s != t),
                          min(len(rx["new_ids"]), len(ry["new_ids"])))
                problems.append(f"{who}: output ids differ from token {at}")
            elif rx["acceptance_lengths"] != ry["acceptance_lengths"]:
                problems.append(f"{who}: same ids, different acceptance lengths")
    return problems


def compare_dumps(a: Path, b: Path) -> tuple[list[str], dict[str, dict]]:
    """Two `parity --dump` folders of the same prompts: (problems, per tensor name its max |Δ|,
    its magnitude (max |x| in ``a``) and whether it must match exactly (integer tensors))."""
    import numpy as np
    from safetensors.numpy import load_file

    def rounds(d: Path) -> list[tuple]:
        index = json.loads((d / "index.json").read_text(encoding="utf-8"))
        return [(e["prompt"], s["file"], s["start"], s["draft"], s["accepted"], s["bonus"])
                for e in index["entries"] for s in e["steps"]]

    ra, rb = rounds(a), rounds(b)
    problems = []
    if ra != rb:
        k = next((k for k, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
        problems.append(f"drafting rounds differ from round {k} ({len(ra)} against {len(rb)})")
    tensors: dict[str, dict] = {}
    for f in sorted({r[1] for r in ra} & {r[1] for r in rb}):
        ta, tb = load_file(str(a / f)), load_file(str(b / f))
        for name, x in ta.items():
            y = tb.get(name)
            if y is None or y.shape != x.shape:
                problems.append(f"{f}: {name} missing or of another shape")
                continue
            t = tensors.setdefault(name, {"max_abs": 0.0, "scale": 0.0,
                                          "exact": not np.issubdtype(x.dtype, np.floating)})
            if x.size:
                t["max_abs"] = max(t["max_abs"], float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()))
                t["scale"] = max(t["scale"], float(np.abs(x.astype(np.float64)).max()))
    return problems, tensors


def bound(t: dict) -> float:
    """What a tensor may differ by: nothing for ids and positions, REL_BOUND of its magnitude
    (at least of 1) for floats."""
    return 0.0 if t["exact"] else REL_BOUND * max(1.0, t["scale"])


def judge_tensors(tensors: dict[str, dict]) -> list[str]:
    if not tensors:
        return ["no tensors compared"]
    return [f"{n}: max |Δ| {t['max_abs']:.3g} over the bound {bound(t):.3g}"
            for n, t in sorted(tensors.items()) if t["max_abs"] > bound(t)]


def step_parity(ctx: Ctx, limit: float) -> Result:
    prompts = ctx.work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    base = [sys.executable, "-m", "dflash_gguf", "parity", "--target", str(RUNTIME / "target"),
            "--drafter", str(RUNTIME / "drafter"), "--drafter-gguf", str(RUNTIME / "drafter.gguf"),
            "--prompts-file", str(prompts), "--max-new-tokens", str(NEW_TOKENS), "--dtype", "float32"]
    t0 = time.monotonic()
    runs = {}
    # the device under test first: it is the one that may not work at all
    for label, dev in (("gpu", ctx.device), ("cpu", "cpu")):
        left = limit - (time.monotonic() - t0)
        dump, rep = ctx.work / f"dump-{label}", ctx.work / f"parity-{label}.json"
        rc = run_logged(ctx, "parity.log", [*base, "--device", dev, "--dump", str(dump), "--report", str(rep)], left)
        why = ran(rc, left, f"parity --device {dev}")
        if why:
            return Result("failed", why + (" (30: not lossless)" if rc == 30 else ""))
        runs[label] = (json.loads(rep.read_text(encoding="utf-8"))["payload"], dump)  # the envelope's report
    (g, gdump), (c, cdump) = runs["gpu"], runs["cpu"]
    problems = []
    if not g["device"].startswith(ctx.device):
        problems.append(f"asked for {ctx.device}, ran on {g['device']}")
    problems += compare_reports(c, g)
    dump_problems, tensors = compare_dumps(cdump, gdump)
    problems += dump_problems + judge_tensors(tensors)
    # the GGUF drafter against the reference drafter, teacher-forced, both on the device under test
    gguf_abs = max(d["logit_parity"]["max_abs"] for p in (g.get("prompts") or [g]) for d in p["drafters"])
    if "draft_logits" in tensors and gguf_abs > bound(tensors["draft_logits"]):
        problems.append(f"GGUF drafter on {ctx.device}: max |Δlogit| {gguf_abs:.3g} against the reference drafter")
    deltas = ", ".join(f"{n} {t['max_abs']:.2g} (≤ {bound(t):.2g})" for n, t in sorted(tensors.items()) if not t["exact"])
    tok_s = {k: sum(p["reference"]["tokens_per_s"] for p in (r.get("prompts") or [r])) / len(PROMPTS)
             for k, (r, _) in runs.items()}
    detail = (f"{len(PROMPTS)} prompts × {NEW_TOKENS} tokens, "
              + ("same ids and rounds" if not problems else "; ".join(problems))
              + f"; max |Δ| gpu−cpu: {deltas}; GGUF drafter on {ctx.device} max |Δlogit| {gguf_abs:.2g}"
              + f"; reference {tok_s['gpu']:.0f} tok/s on {ctx.device}, {tok_s['cpu']:.0f} on cpu")
    numbers = {"tensors": {n: {**t, "bound": bound(t)} for n, t in tensors.items()}, "gguf_max_abs": gguf_abs,
               "tokens_per_s": tok_s, "problems": problems,
               "mean_acceptance_length": g["pooled"]["reference"]["acceptance"]["mean_acceptance_length"]}
    return Result("failed" if problems else "ok", detail, numbers)


# --- benchmarks -----------------------------------------------------------------------------------

def step_bench_parity(ctx: Ctx, limit: float) -> Result:
    import importlib.util

    missing = [m for m in ("transformers", "dflash") if importlib.util.find_spec(m) is None]
    if missing:
        return Result("failed", f"needs {' and '.join(missing)} (z-lab's side): dflash comes with `make gpu-wheels`, "
                                "transformers must be the machine's own")
    out = ctx.work / "bench_parity.json"
    sizes = [] if ctx.device == "cuda" else BENCH_CPU_SIZES
    rc = run_logged(ctx, "bench-parity.log", [sys.executable, "benchmarks/bench_parity.py", "--device", ctx.device,
                                              *sizes, "--json", str(out)], limit)
    if not out.is_file():  # it writes its JSON whether or not the outputs agree
        return Result("failed", ran(rc, limit, "bench_parity.py") or "no JSON written")
    r = json.loads(out.read_text(encoding="utf-8"))
    ours, zlab = r["ours"], r[r["against"]]
    detail = (f"ours {ours['tokens_per_s']:.0f} tok/s, z-lab {zlab['tokens_per_s']:.0f} tok/s"
              + (f", {r['speed_ratio']:.2f}x" if r["speed_ratio"] else "")
              + f"; identical outputs: {r['identical_outputs']}; peak {ours['peak_bytes'] / 2**20:.0f} / "
              f"{zlab['peak_bytes'] / 2**20:.0f} MiB ({ours['peak_kind']})")
    numbers = {k: r[k] for k in ("identical_outputs", "speed_ratio", "cpu_time_ratio", "machine", "sizes")}
    numbers.update(ours_tokens_per_s=ours["tokens_per_s"], zlab_tokens_per_s=zlab["tokens_per_s"])
    return Result("ok" if rc == 0 and r["identical_outputs"] else "failed", detail, numbers)


def step_bench_diagnose(ctx: Ctx, limit: float) -> Result:
    """Picked up once benchmarks/bench_diagnose.py exists, run as bench_parity.py is (--device, --json)."""
    script = ROOT / "benchmarks" / "bench_diagnose.py"
    if not script.is_file():
        return Result("skipped", "absent: benchmarks/bench_diagnose.py does not exist yet")
    out = ctx.work / "bench_diagnose.json"
    rc = run_logged(ctx, "bench-diagnose.log", [sys.executable, str(script.relative_to(ROOT)), "--device", ctx.device,
                                                "--json", str(out)], limit)
    why = ran(rc, limit, "bench_diagnose.py")
    return Result("failed", why) if why else Result("ok", "exit 0; its numbers in bench-diagnose.log")


STEPS = [
    Step("install", 90, step_install),
    Step("gpu-tests", 120, step_gpu_tests),
    Step("parity", 120, step_parity),
    Step("bench-parity", 180, step_bench_parity),
    Step("bench-diagnose", 90, step_bench_diagnose),
]


# --- the run --------------------------------------------------------------------------------------

def device_line(device: str) -> tuple[str | None, str]:
    """(what the run is on, None when it cannot run; why not)."""
    try:
        import torch
    except ImportError:
        return None, f"torch does not import in {sys.executable}"
    if device == "cpu":
        return f"cpu (dry run, CPU against CPU), torch {torch.__version__}", ""
    if not torch.cuda.is_available():
        return None, f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    return (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"float32 matmul precision {torch.get_float32_matmul_precision()}, NVIDIA_TF32_OVERRIDE=0"), ""


def summary(results: list[tuple[Step, Result, float]], head: str, total: float) -> str:
    lines = [f"gpu-check on {head}: {total:.0f} s (limit {MAX_TOTAL_S} s)"]
    for step, r, secs in results:
        lines.append(f"  {step.name:15s} {r.status:8s} {secs:6.1f} s  {r.detail}")
    failed = [s.name for s, r, _ in results if r.status == "failed"]
    lines.append("gpu-check: " + (f"FAILED ({', '.join(failed)})" if failed else "passed"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: run every step CPU against CPU, to try the script where there is no GPU")
    ap.add_argument("--no-install", dest="install", action="store_false",
                    help="use the package as installed (skips the install step)")
    ap.add_argument("--logs", type=Path, default=ROOT / "out" / "gpu-check",
                    help="one log per step and summary.json (default: out/gpu-check)")
    args = ap.parse_args(argv)

    head, why = device_line(args.device)
    if head is None:
        print(f"gpu-check: {why}; run it on a machine with an NVIDIA GPU and a CUDA torch "
              "(--device cpu tries the steps CPU against CPU)", file=sys.stderr)
        return 2
    args.logs.mkdir(parents=True, exist_ok=True)
    for old in args.logs.glob("*.log"):
        old.unlink()
    # TF32 off in every child, whatever torch's flags say (NVIDIA's libraries read this); no child
    # may try the network (transformers would, for a model id it does not find locally)
    # The checkout first on every child's path: the code under test is this tree's, whatever copy
    # the machine has installed (the install step checks the installed one separately).
    env = {**os.environ, "NVIDIA_TF32_OVERRIDE": "0", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PIP_NO_INPUT": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"gpu-check on {head}; logs in {args.logs}", flush=True)
    start = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        ctx = Ctx(args.device, args.logs, Path(tmp), args.install, env)
        for step in STEPS:
            left = MAX_TOTAL_S - (time.monotonic() - start)
            t0 = time.monotonic()
            if left < MIN_STEP_S:
                r = Result("failed", f"not run: {left:.0f} s of the {MAX_TOTAL_S} s left")
            else:
                limit = min(step.budget_s, left)
                print(f"  {step.name} (up to {limit:.0f} s)", flush=True)
                try:
                    r = step.run(ctx, limit)
                except Exception as exc:  # a step's own bug or a malformed report: that step fails, the rest run
                    r = Result("failed", f"{type(exc).__name__}: {exc}")
            results.append((step, r, time.monotonic() - t0))
    total = time.monotonic() - start
    for step, r, _ in results:  # where a failure shows, before the summary
        log = args.logs / f"{step.name}.log"
        if r.status == "failed" and log.is_file():
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            print(f"--- last lines of {log.name}\n" + "\n".join(tail))
    text = summary(results, head, total)
    (args.logs / "summary.json").write_text(json.dumps({
        "device": head, "seconds": total, "rel_bound": REL_BOUND,
        "steps": [{"name": s.name, "status": r.status, "seconds": t, "detail": r.detail, "numbers": r.numbers}
                  for s, r, t in results]}, indent=1, default=str) + "\n", encoding="utf-8")
    print(text)
    return 1 if any(r.status == "failed" for _, r, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
