"""llama.cpp's ``convert_hf_to_gguf.py`` (vendored in the llama-cpp-python sdist), run for tests
and fixture scripts: the one driver every ground-truth conversion goes through.

The converter pays ~7 s of imports (torch, transformers) per process, so all the jobs of one
call run in one process that imports once, each job in a fork of it (its own copy of every
module global, as in a separate run), one fork per core at a time. Per job, on request:

* ``header_only``: gguf-py's ``GGUFWriter.write_tensors_to_file`` writes the tensor infos and
  the padding after them with gguf-py's own code, then makes the data section a hole of the
  size the real write would fill; the lazy tensors are dropped unevaluated. Header bytes and
  file size equal a full run's (``tests/convert/test_llamacpp_reference.py`` proves it).
* ``pre``: a BPE pre-tokenizer llama.cpp does not know by its hash gets this name instead of
  the converter's error (a test tokenizer built from pieces has a hash no one published).
* ``chk_ids``: where to save, as JSON, the ids the converter's tokenizer gives for llama.cpp's
  pre-tokenizer check text (the input of its hash).

Each job's stdout and stderr go to its ``log`` file; ``run_jobs`` returns the exit codes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from dflash_gguf.target.chkhsh import CHKTXT

RUNNER = r'''
import json, os, runpy, sys, traceback
src, jobs_path, parallel = sys.argv[1], sys.argv[2], int(sys.argv[3])
# The converter's heavy imports, paid once before forking.
import torch  # noqa: F401
import gguf
from gguf.gguf_writer import GGUFWriter, WriterState
if not os.path.realpath(gguf.__file__).startswith(os.path.realpath(os.path.join(src, "gguf-py")) + os.sep):
    sys.exit(f"imported {gguf.__file__}, not the vendored gguf-py: the patch would miss")
import conversion.base as base
try:
    import transformers.models.auto.tokenization_auto  # noqa: F401
except ImportError:
    pass


def header_only(self, *, progress=False):
    self.write_ti_data_to_file()
    for fout, tensors in zip(self.fout, self.tensors):
        self.write_padding(fout, fout.tell())
        size = fout.tell() + sum(self.ggml_pad(ti.nbytes, self.data_alignment) for ti in tensors.values())
        for ti in tensors.values():
            ti.tensor = None
        fout.flush()
        fout.truncate(size)
    self.state = WriterState.WEIGHTS


def patch_pre(job):
    known = base.TextModel.get_vocab_base_pre

    def pre(self, tokenizer):
        if job["chk_ids"]:
            with open(job["chk_ids"], "w") as f:
                json.dump(list(tokenizer.encode(json.load(open(job["chktxt"], encoding="utf-8")))), f)
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            if not job["pre"]:
                raise
            return job["pre"]
    base.TextModel.get_vocab_base_pre = pre


script = os.path.join(src, "convert_hf_to_gguf.py")
jobs = json.load(open(jobs_path))
codes = [None] * len(jobs)
running = {}  # pid -> job index; a job is single-threaded Python, so one per core at a time
for i, job in enumerate(jobs):
    while len(running) >= parallel:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if job["header_only"]:
                GGUFWriter.write_tensors_to_file = header_only
            if job["pre"] or job["chk_ids"]:
                patch_pre(job)
            sys.argv = [script, *job["argv"]]
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    running[pid] = i
while running:
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes))
'''


@dataclass(frozen=True)
class ConverterRun:
    """One run of the converter: its arguments (after the script name) and its log file."""

    argv: tuple[str, ...]
    log: Path
    header_only: bool = False
    pre: str | None = None
    chk_ids: Path | None = None


def run_jobs(runs: Sequence[ConverterRun], src: Path, *, parallel: int | None = None,
             timeout: float = 1800) -> list[int]:
    """Run every job with the converter in ``src`` (one process, a fork per job); their exit codes.

    Raises:
        AssertionError: the runner itself failed (e.g. the vendored gguf-py was not imported).
    """
    if parallel is None:
        parallel = len(os.sched_getaffinity(0))
    parallel = max(1, min(len(runs), parallel))
    with tempfile.TemporaryDirectory(prefix="llamacpp-jobs-") as tmp:
        chktxt = Path(tmp) / "chktxt.json"
        chktxt.write_text(json.dumps(CHKTXT), encoding="utf-8")
        spec = [{**asdict(r), "argv": list(r.argv), "log": str(r.log), "chk_ids": str(r.chk_ids or ""),
                 "chktxt": str(chktxt)} for r in runs]
        (Path(tmp) / "jobs.json").write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": f"{src / 'gguf-py'}{os.pathsep}{src}",
               # the converter must not reach for the Hub: everything it needs is in its input dirs
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env.pop("NO_LOCAL_GGUF", None)
        r = subprocess.run([sys.executable, "-c", RUNNER, str(src), str(Path(tmp) / "jobs.json"), str(parallel)],
                           env=env, capture_output=True, text=True, cwd=tmp, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"llama.cpp converter runner failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def log_tail(run: ConverterRun, n: int = 3000) -> str:
    return run.log.read_text(errors="replace")[-n:] if run.log.is_file() else "(no log)"
