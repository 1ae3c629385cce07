"""`parity` on the command line (cli/parity.py): the flag checks made before anything runs (a GGUF
where the checkpoint goes, torch missing, the old `--json PATH`), the report on stdout or in a file,
and the text lines (ending with the verdict line) against the JSON envelope of the same run."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from dflash_gguf.cli.parity import _kl_cells
from tests.conftest import DRAFTERS, FIXTURES, ROOT
from tests.parity.conftest import PROMPT, QWEN


@pytest.mark.parametrize("args,needle", [
    ((), "exactly one of"),
    (("--prompt-ids", "1,x"), "comma-separated"),
    (("--prompt-ids", "1,99999"), "outside the target's vocabulary"),
])
def test_bad_inputs_are_one_line(cli, tmp_path, args, needle):
    if "vocabulary" in needle:  # checked against the loaded target: the run needs torch
        pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--device", "cpu", *args)
    assert code == 2 and needle in se and "Traceback" not in se


@pytest.mark.parametrize("args,says", [
    (("--prompt-ids", "1,5", "--dtype", "float16"), "--dtype 'float16': choose float32 or bfloat16"),
    (("--prompt-ids", "1,5", "--target-quant", "q3_k"), "--target-quant 'q3_k': choose q8_0 or q4_k_m"),
    (("--prompt-ids", "1,5", "--prompt", "hi"), "give exactly one of --prompt-ids, --prompt, --prompts-file"),
    (("--prompt-ids", "1,5", "--report", DRAFTERS / "qwen3-flat" / "config.json"), "is one of this command's inputs"),
    # --json took a path before 0.2: now a flag, and the old spelling a usage error naming --report
    (("--prompt-ids", "1,5", "--json", "r.json"), "parity --json r.json: --json takes no value now (it prints JSON on "
                                                  "stdout, as in every command); to write a file use --report r.json"),
    (("--prompt-ids", "1,5", "--json", "-"), "to write a file use --report FILE.json"),
])
def test_refused_before_the_run(cli, args, says):
    code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--device", "cpu", *args)
    assert code == 2 and says in se and so == "" and len(se.strip().splitlines()) == 1


# The CLI in a fresh interpreter where `import torch` fails as it does without the [torch] extra.
_NO_TORCH = ("import sys; sys.modules['torch'] = None; sys.argv = ['dflash-gguf', *sys.argv[1:]]; "
             "from dflash_gguf.cli import main; main()")


def test_without_torch_one_line_names_the_extra():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", _NO_TORCH, "parity", "--target", str(QWEN), "--drafter",
                        str(DRAFTERS / "qwen3-flat"), "--prompt-ids", "1,5", "--device", "cpu"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: parity needs the 'torch' package: pip install 'dflash-gguf[torch]'"]


@pytest.mark.parametrize("name", ["d.gguf", "drafter.bin"])  # by its suffix, or by its magic
def test_a_gguf_given_as_the_checkpoint_points_at_drafter_gguf(cli, tmp_path, name):
    gguf = shutil.copyfile(FIXTURES / "guards" / "qwen3-8b-dflash.gguf", tmp_path / name)
    code, so, se = cli("parity", "--target", QWEN, "--drafter", gguf, "--prompt-ids", "1,5", "--device", "cpu")
    assert code == 2 and so == ""
    assert se.strip().splitlines() == [
        f"error: --drafter {gguf}: a GGUF file; --drafter takes the original checkpoint directory "
        "(config.json + safetensors), the reference: pass GGUFs to compare with --drafter-gguf"]


def test_kl_cells_as_llama_perplexity_prints_them():
    assert _kl_cells({"positions": 0}) == ("-",) * 5
    kl = {"positions": 9, "mean": 0.0125, "mean_uncertainty": 0.0004, "median": 0.01, "p99": None, "max": 3.0,
          "same_top": 0.875, "same_top_uncertainty": 0.0123}
    assert _kl_cells(kl) == ("0.0125 ± 0.0004", "0.01", "inf", "3", "87.50 ± 1.23 %")


def test_the_text_report_is_the_json_report(cli, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    rep = tmp_path / "r.json"
    code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt-ids", PROMPT,
                       "--max-new-tokens", 10, "--device", "cpu", "--report", rep)
    assert code == 0, se
    env = json.loads(rep.read_text())
    assert env["command"] == "parity" and env["exit_code"] == 0 and env["verdict"] == "pass"
    doc = env["payload"]
    a = doc["pooled"]["reference"]["acceptance"]
    line = (f"reference: acc per pos {' '.join(f'{x:.2f}' for x in a['per_position'])}; "
            f"histogram (0..{len(a['histogram']) - 1} accepted) {' '.join(map(str, a['histogram']))}; "
            f"drift {a['drift']['first']:.3f} → {a['drift']['last']:.3f}")
    assert line in so.splitlines()
    n = len(PROMPT.split(","))
    assert so.splitlines()[0].startswith(f"prompt of {n} tokens, 10 new, block {doc['settings']['block_size']}")
    assert so.splitlines()[-1] == env["summary"] == "parity: PASS: 1 file, 0 errors, 0 warnings"
    # --json: the JSON envelope alone on stdout, the same numbers
    code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt-ids", PROMPT,
                       "--max-new-tokens", 10, "--device", "cpu", "--json")
    assert code == 0, se
    again = json.loads(so)["payload"]
    assert again["reference"]["new_ids"] == doc["reference"]["new_ids"]
    assert again["pooled"]["reference"]["acceptance"]["histogram"] == a["histogram"]
