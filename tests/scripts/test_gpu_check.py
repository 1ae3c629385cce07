"""scripts/gpu_check.py's own logic, on the CPU: which carried wheels go in, how pytest's counts and
the parity comparison are judged, the time limit on a command, and the one-line refusal without CUDA."""
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gc  # dataclasses look their module up
_spec.loader.exec_module(gc)


def test_wheel_names_and_our_pins():
    assert gc.wheel_name(Path("markdown_it_py-4.3.0-py3-none-any.whl")) == ("markdown-it-py", "4.3.0")
    assert gc.wheel_name(Path("shellingham-1.5.4-py2.py3-none-any.whl")) == ("shellingham", "1.5.4")
    pins = gc.our_pins(ROOT / "pyproject.toml")
    assert pins["gguf"] == "==0.19.0" and pins["typer"] == ">=0.28,<0.29" and pins["dflash"] == "==0.1.0"


@pytest.mark.parametrize("installed,spec,want", [
    (None, "==0.19.0", True),       # missing: carried
    (None, "", True),
    ("0.18.0", "==0.19.0", True),   # outside our pin: carried
    ("0.30.1", ">=0.28,<0.29", True),
    ("0.28.0", ">=0.28,<0.29", False),  # satisfies it: the machine's own is kept
    ("2.20.0", "", False),          # no pin (a dependency's dependency): any version does
])
def test_needs_install(installed, spec, want):
    assert gc.needs_install(installed, spec) is want


def _junit(tmp_path, **counts):
    p = tmp_path / "j.xml"
    attrs = " ".join(f'{k}="{v}"' for k, v in counts.items())
    p.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" {attrs}/></testsuites>')
    return gc.junit_counts(p)


def test_gpu_tests_judged(tmp_path):
    ok = _junit(tmp_path, tests=3, failures=0, errors=0, skipped=0)
    assert gc.judge_tests(ok, "cuda") == ("ok", "3 passed, 0 failed, 0 skipped")
    skipped = _junit(tmp_path, tests=3, failures=0, errors=0, skipped=3)
    assert gc.judge_tests(skipped, "cpu")[0] == "ok"  # the dry run: no CUDA, so they skip
    assert gc.judge_tests(skipped, "cuda")[0] == "failed"  # on a GPU a skip is a check not made
    assert gc.judge_tests(_junit(tmp_path, tests=3, failures=1, errors=1, skipped=0), "cuda") == (
        "failed", "1 passed, 2 failed, 0 skipped")
    assert gc.judge_tests(_junit(tmp_path, tests=0, failures=0, errors=0, skipped=0), "cuda")[0] == "failed"


def test_the_gpu_tests_are_found():
    files = {p.relative_to(ROOT).as_posix() for p in gc.gpu_test_files()}
    assert "tests/parity/test_run.py" in files and "tests/scripts/test_gpu_check.py" not in files


def _dump(d: Path, rounds, logits_shift=0.0, context_scale=200.0):
    """A parity --dump folder: one safetensors file per round, as dflash_gguf/parity/dumps.py writes."""
    from safetensors.numpy import save_file

    d.mkdir()
    steps = []
    for k, (start, draft, accepted) in enumerate(rounds):
        name = f"prompt00_step{k:04d}.safetensors"
        rng = np.random.default_rng(k)
        save_file({"context": (rng.standard_normal((2, 8)) * context_scale).astype(np.float32),
                   "block_ids": np.array([5, 9, 9, 9], dtype=np.int64),
                   "positions": np.arange(start, start + 4, dtype=np.int64),
                   "draft_logits": (rng.standard_normal((3, 16)) * 10 + logits_shift).astype(np.float32)},
                  str(d / name))
        steps.append({"file": name, "start": start, "q": 4, "draft": draft, "accepted": accepted, "bonus": 1})
    (d / "index.json").write_text(json.dumps({"version": 1, "entries": [{"prompt": 0, "steps": steps}]}))
    return d


ROUNDS = [(8, [1, 2, 3], 3), (12, [4, 5, 6], 1)]


def test_same_dumps_pass_and_the_bound_scales_with_the_tensor(tmp_path):
    a = _dump(tmp_path / "a", ROUNDS)
    problems, tensors = gc.compare_dumps(a, _dump(tmp_path / "b", ROUNDS))
    assert problems == [] and gc.judge_tensors(tensors) == []
    assert tensors["block_ids"]["exact"] and gc.bound(tensors["block_ids"]) == 0.0
    ctx = tensors["context"]
    assert not ctx["exact"] and ctx["max_abs"] == 0.0 and gc.bound(ctx) == pytest.approx(gc.REL_BOUND * ctx["scale"])
    assert gc.bound({"exact": False, "scale": 0.2}) == gc.REL_BOUND  # magnitudes below 1 count as 1


def test_logits_over_the_bound_fail(tmp_path):
    a = _dump(tmp_path / "a", ROUNDS)
    _, within = gc.compare_dumps(a, _dump(tmp_path / "b", ROUNDS, logits_shift=1e-4))
    assert gc.judge_tensors(within) == []
    _, over = gc.compare_dumps(a, _dump(tmp_path / "c", ROUNDS, logits_shift=0.5))
    (msg,) = gc.judge_tensors(over)
    assert msg.startswith("draft_logits: max |Δ| 0.5")


def test_diverging_rounds_are_named(tmp_path):
    a = _dump(tmp_path / "a", ROUNDS)
    problems, _ = gc.compare_dumps(a, _dump(tmp_path / "b", [ROUNDS[0], (12, [4, 5, 7], 2)]))
    assert problems == ["drafting rounds differ from round 1 (2 against 2)"]


def _report(ids, lengths):
    def row(name):
        return {"name": name, "new_ids": ids, "acceptance_lengths": lengths}
    return {"reference": row("reference"), "drafters": [row("fixtures/runtime/drafter.gguf")]}


def test_reports_compared_per_prompt_and_drafter():
    a = {"prompts": [_report([1, 2, 3], [2, 1]), _report([4, 5], [2])]}
    assert gc.compare_reports(a, a) == []
    b = {"prompts": [_report([1, 2, 3], [2, 1]), _report([4, 6], [2])]}
    assert gc.compare_reports(a, b) == ["prompt 1, reference: output ids differ from token 1",
                                        "prompt 1, drafter.gguf: output ids differ from token 1"]
    assert gc.compare_reports(_report([1], [1]), _report([1], [1])) == []  # one prompt: no "prompts" list


def test_a_command_over_its_limit_is_stopped_with_its_children(tmp_path):
    ctx = gc.Ctx("cpu", tmp_path, tmp_path, False, {"PATH": "/usr/bin:/bin"})
    t0 = time.monotonic()
    rc = gc.run_logged(ctx, "x.log", ["sh", "-c", "sleep 30 & echo $! > child; sleep 30; echo $((6 * 7))"], 1,
                       cwd=tmp_path)
    assert rc is None and time.monotonic() - t0 < 10
    log = (tmp_path / "x.log").read_text()
    assert "stopped after 1 s" in log and "42" not in log
    # the background sleep was killed too: gone, or a zombie waiting for a reaper (SIGKILL lands
    # asynchronously, so give it a moment)
    stat = Path(f"/proc/{(tmp_path / 'child').read_text().strip()}/stat")
    for _ in range(50):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the command's child outlived its time limit")
    assert gc.ran(None, 1, "x") == "x: over its 1 s limit" and gc.ran(3, 1, "x") == "x: exit 3" and gc.ran(0, 1, "x") is None


def test_missing_wheel_folder_fails_the_install_step(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "WHEELS", ROOT / ".cache" / "no-such-folder")
    r = gc.step_install(gc.Ctx("cuda", tmp_path, tmp_path, True, {}), 10)
    assert r.status == "failed" and "make gpu-wheels" in r.detail


def test_no_cuda_is_one_line_and_exit_2(capsys, tmp_path):
    torch = sys.modules.get("torch") or (importlib.util.find_spec("torch") and __import__("torch"))
    if torch and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert gc.main(["--logs", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("gpu-check: ")
    assert list(tmp_path.iterdir()) == []  # refused before any step
