"""Hostile output paths, signals and full disks, as a user's shell would bring them: whole
processes, asserting a documented exit code on one line, nothing of the user's replaced, no temp
file left behind."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.errors import EXIT_OK, Interrupted, OutputError, UsageError
from tests.conftest import FIXTURES, skip_if_missing_package
from tests.redteam.harness import CLI, assert_bounded, assert_one_line_error, fingerprint, leftovers, run_cli

DRAFTER = FIXTURES / "drafters" / "qwen3-flat"
TARGET_DIR = FIXTURES / "targets" / "qwen3-tiny"
TARGET_GGUF = FIXTURES / "targets" / "llama-tiny.gguf"
EXIT_OUTPUT, EXIT_USAGE = OutputError.exit_code, UsageError.exit_code


@pytest.fixture
def drafter(tmp_path) -> Path:
    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    return d


@pytest.fixture
def gguf(tmp_path) -> Path:
    """A small drafter GGUF of ours, for quantize and retarget."""
    out = tmp_path / "d.gguf"
    r = run_cli(["convert", DRAFTER, "--target-dir", TARGET_DIR, "-o", out])
    assert r.code == EXIT_OK, str(r)
    return out


def convert(drafter: Path, out, *extra) -> list:
    return ["convert", drafter, "--target-dir", TARGET_DIR, "-o", out, *extra]


def _char_device(path: Path) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("mknod needs root")
    return path


@pytest.mark.parametrize("kind", ["chardev", "fifo", "directory", "link-to-chardev"])
@pytest.mark.parametrize("command", ["convert", "quantize", "retarget"])
def test_non_regular_outputs_are_never_replaced(tmp_path, drafter, gguf, kind, command):
    node = tmp_path / "node"
    if kind == "chardev":
        _char_device(node)
    elif kind == "fifo":
        os.mkfifo(node)
    elif kind == "directory":
        node.mkdir()
        (node / "keep").write_text("mine")
    else:
        _char_device(tmp_path / "dev")
        node.symlink_to(tmp_path / "dev")
    before = fingerprint([node, tmp_path / "dev", node / "keep"])
    args = {"convert": convert(drafter, node, "--force"),
            "quantize": ["quantize", gguf, node, "q8_0", "--force"],
            "retarget": ["retarget", gguf, "-o", node, "--format", "dflash-draft", "--force"]}[command]
    r = run_cli(args, timeout=120)
    if command == "convert" and kind == "directory":
        # llama.cpp's converter writes into a directory given as --outfile, under its default name
        # (docs/convert.md); what the directory held is kept
        assert r.code == EXIT_OK, str(r)
        assert sorted(p.name for p in node.iterdir()) == ["Drafter-140K-BF16.gguf", "keep"]
        assert (node / "keep").read_text() == "mine" and leftovers(tmp_path) == []
        return
    assert_one_line_error(r, EXIT_OUTPUT)
    assert "not a regular file" in r.stderr
    assert fingerprint([node, tmp_path / "dev", node / "keep"]) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("which", ["model.safetensors", "config.json", "hardlink", "symlink", "target-gguf"])
def test_convert_never_overwrites_its_inputs(tmp_path, drafter, which):
    target = tmp_path / "target.gguf"
    shutil.copy(TARGET_GGUF, target)
    if which == "hardlink":
        out = tmp_path / "h.gguf"
        os.link(drafter / "model.safetensors", out)
    elif which == "symlink":
        out = tmp_path / "s.gguf"
        out.symlink_to(drafter / "config.json")
    elif which == "target-gguf":
        out = target
    else:
        out = drafter / which
    files = [*drafter.iterdir(), target]
    before = fingerprint(files)
    args = ["convert", drafter, "--target-gguf", target, "-o", out, "--force", "--format", "llama.cpp"]
    r = run_cli(args, timeout=120)
    assert_one_line_error(r, EXIT_USAGE)
    assert "one of this command's inputs" in r.stderr
    assert fingerprint(files) == before


@pytest.mark.parametrize("command", ["quantize", "retarget"])
def test_quantize_and_retarget_refuse_a_hard_link_to_their_input(tmp_path, gguf, command):
    link = tmp_path / "same.gguf"
    os.link(gguf, link)
    before = fingerprint([gguf])
    args = (["quantize", gguf, link, "q8_0", "--force"] if command == "quantize" else
            ["retarget", gguf, "-o", link, "--format", "dflash-draft", "--force"])
    r = run_cli(args, timeout=120)
    assert_one_line_error(r, EXIT_USAGE)
    assert fingerprint([gguf]) == before


def test_two_converts_to_one_new_name_cannot_both_succeed(tmp_path, drafter):
    """Started together, without --force: one writes, the other is refused (exit 5), whichever
    order their checks and publications come in."""
    out = tmp_path / "same.gguf"
    procs = [subprocess.Popen([*CLI, *map(str, convert(drafter, out))], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(3)]
    results = [(p.wait(timeout=120), p.stderr.read().decode()) for p in procs]
    for _, se in results:
        skip_if_missing_package(se)  # --target-dir without the [tokenizers] extra
    codes = sorted(code for code, _ in results)
    assert codes == [EXIT_OK, EXIT_OUTPUT, EXIT_OUTPUT], results
    assert all("Traceback" not in se for _, se in results)
    assert leftovers(tmp_path) == []
    assert run_cli(["check", out]).code == EXIT_OK


def test_a_directory_whose_default_name_is_a_directory_is_exit_5(tmp_path, drafter):
    """-o DIR means DIR/<default name> (llama.cpp's converter); a directory in that place is
    never replaced, --force or not."""
    d = tmp_path / "outdir"
    (d / "Drafter-140K-BF16.gguf").mkdir(parents=True)
    r = run_cli(convert(drafter, d, "--force"), timeout=120)
    assert_one_line_error(r, EXIT_OUTPUT)
    assert "not a regular file" in r.stderr
    assert [p.name for p in d.iterdir()] == ["Drafter-140K-BF16.gguf"] and (d / "Drafter-140K-BF16.gguf").is_dir()


@pytest.mark.parametrize("n_bytes", [242, 250, 255])
def test_long_names_within_the_limit_are_written(tmp_path, drafter, n_bytes):
    out = tmp_path / ("é" * ((n_bytes - 5) // 2) + "x" * ((n_bytes - 5) % 2) + ".gguf")
    assert len(os.fsencode(out.name)) == n_bytes
    r = run_cli(convert(drafter, out), timeout=120)
    assert r.code == EXIT_OK, str(r)
    assert out.is_file() and leftovers(tmp_path) == []


def test_a_name_over_255_bytes_is_one_line(tmp_path, drafter):
    r = run_cli(convert(drafter, tmp_path / ("n" * 251 + ".gguf")), timeout=120)
    assert_one_line_error(r, EXIT_OUTPUT)
    assert "256 bytes" in r.stderr


def test_a_file_size_limit_mid_write_is_exit_5_and_leaves_nothing(tmp_path, gguf):
    """EFBIG, the way ``ulimit -f`` makes a write fail; the full-disk case below needs a mount."""
    out = tmp_path / "q.gguf"
    r = run_cli(["quantize", gguf, out, "q8_0"], timeout=120, file_size_limit=64 << 10)
    assert_one_line_error(r, EXIT_OUTPUT)
    assert "writing failed" in r.stderr
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (root only): a real ENOSPC."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("force", [False, True])
def test_a_full_disk_is_exit_5_and_keeps_what_was_there(tmp_path, drafter, tiny_disk, force):
    out = tiny_disk / "d.gguf"
    if force:
        out.write_bytes(b"the previous file")
    r = run_cli(convert(drafter, out, *(["--force"] if force else [])), timeout=120)
    assert_one_line_error(r, EXIT_OUTPUT)
    assert "No space left on device" in r.stderr
    assert leftovers(tiny_disk) == []
    assert (out.read_bytes() == b"the previous file") if force else not out.exists()


def _big_gguf(path: Path) -> Path:
    """An F32 tensor whose Q4_K_M on the numpy path takes seconds: time to be interrupted."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.ffn_up.weight", np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _default_signals() -> None:
    # A command started in the background by a non-interactive shell (a CI step, `make … &`)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler; nohup does
    # the same to SIGHUP. The test is about what the command does when the signal arrives.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start_and_wait_for_temp(args, directory: Path, env=None) -> subprocess.Popen:
    p = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **(env or {})}, start_new_session=True, preexec_fn=_default_signals)
    deadline = time.monotonic() + 60
    while not leftovers(directory) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.02)
    assert leftovers(directory), f"no temp file appeared (exit {p.poll()}): {p.stderr.read()[-2000:] if p.poll() is not None else ''}"
    time.sleep(0.2)
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_write_removes_the_partial_output(tmp_path, sig):
    src = _big_gguf(tmp_path / "big.gguf")
    out = tmp_path / "q.gguf"
    p = _start_and_wait_for_temp(["quantize", src, out, "q4_k_m", "--threads", "1"], tmp_path,
                                 env={"DFLASH_GGUF_NUMBA": "0"})
    t0 = time.monotonic()
    p.send_signal(sig)
    _, se = p.communicate(timeout=60)
    se = se.decode()
    assert p.returncode == Interrupted.exit_code, se
    assert time.monotonic() - t0 < 30
    assert "Traceback" not in se and [ln for ln in se.splitlines() if ln.startswith("error:")] == [
        f"error: {Interrupted.__doc__.replace('Ctrl-C', 'Ctrl-C' if sig == signal.SIGINT else sig.name)}"]
    assert not out.exists() and leftovers(tmp_path) == []


def test_convert_interrupted_by_sigterm_leaves_nothing(tmp_path):
    """A real-size published drafter (a sparse checkpoint) to Q8_0: seconds of work to interrupt."""
    from tests.convert.published import sparse_checkpoint

    d = tmp_path / "zlab"
    sparse_checkpoint("zlab-qwen3-8b-dflash-b16", d, side_files=False)
    out = tmp_path / "o.gguf"
    p = _start_and_wait_for_temp(["convert", d, "--format", "lucebox", "-t", "q8_0", "-o", out], tmp_path)
    p.send_signal(signal.SIGTERM)
    _, se = p.communicate(timeout=60)
    assert p.returncode == Interrupted.exit_code, se.decode()
    assert not out.exists() and leftovers(tmp_path) == []


def test_the_temp_file_of_a_killed_run_is_removed_by_the_next(tmp_path):
    src = _big_gguf(tmp_path / "big.gguf")
    out = tmp_path / "q.gguf"
    p = _start_and_wait_for_temp(["quantize", src, out, "q4_k_m", "--threads", "1"], tmp_path,
                                 env={"DFLASH_GGUF_NUMBA": "0"})
    os.killpg(p.pid, signal.SIGKILL)  # nothing runs on SIGKILL: the temp file stays
    p.communicate(timeout=30)
    assert len(leftovers(tmp_path)) == 1
    r = run_cli(["quantize", src, out, "q8_0"], timeout=120)
    assert r.code == EXIT_OK, str(r)
    assert "removed a temp file left by an interrupted run" in r.stderr
    assert leftovers(tmp_path) == [] and out.is_file()


def test_header_only_commands_stay_small_on_outputs_they_refuse(tmp_path, drafter):
    """The refusals above come before any work: a refused convert is as cheap as a dry run."""
    _char_device(tmp_path / "null")
    r = run_cli(convert(drafter, tmp_path / "null", "--force"), timeout=60)
    assert_one_line_error(r, EXIT_OUTPUT)
    assert_bounded(r, rss_mib=400, wall_s=30)
