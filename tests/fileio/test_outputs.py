"""fileio.outputs: which output paths are refused, how an output is published, what is left behind."""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import sys

import pytest

from dflash_gguf.errors import OutputError, UsageError
from dflash_gguf.fileio import outputs
from dflash_gguf.fileio.outputs import atomic_output, check_output, check_report, write_text


def _mknod_char(path) -> None:
    """A character device with /dev/null's numbers (root only)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")


def test_absent_output_is_accepted(tmp_path):
    out = check_output(tmp_path / "o.gguf")
    assert out.path == tmp_path / "o.gguf" and out.stale_removed == []


@pytest.mark.parametrize("force", [False, True])
def test_a_character_device_is_never_replaced(tmp_path, force):
    dev = tmp_path / "null"
    _mknod_char(dev)
    with pytest.raises(OutputError, match="a character device, not a regular file"):
        check_output(dev, force=force)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_fifo_a_directory_and_a_link_to_a_device_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "d").mkdir()
    dev = tmp_path / "null"
    _mknod_char(dev)
    (tmp_path / "link").symlink_to(dev)
    for p, kind in ((fifo, "a FIFO"), (tmp_path / "d", "a directory"), (tmp_path / "link", "a character device")):
        with pytest.raises(OutputError, match=kind):
            check_output(p, force=True)


def test_an_existing_file_needs_force(tmp_path):
    p = tmp_path / "o.gguf"
    p.write_bytes(b"mine")
    with pytest.raises(OutputError, match="already exists; pass --force"):
        check_output(p)
    assert check_output(p, force=True).force


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "in-dir"])
def test_an_input_is_refused_however_it_is_named(tmp_path, how):
    d = tmp_path / "drafter"
    d.mkdir()
    src = d / "model.safetensors"
    src.write_bytes(b"weights")
    out = {"same": src, "symlink": tmp_path / "s.gguf", "hardlink": tmp_path / "h.gguf", "in-dir": src}[how]
    if how == "symlink":
        out.symlink_to(src)
    if how == "hardlink":
        os.link(src, out)
    inputs = (d,) if how == "in-dir" else (src,)
    with pytest.raises(UsageError, match="one of this command's inputs"):
        check_output(out, inputs=inputs, force=True)
    assert src.read_bytes() == b"weights"


def test_a_new_file_in_the_input_directory_is_fine(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert check_output(tmp_path / "drafter.gguf", inputs=(tmp_path,)).path.name == "drafter.gguf"


def test_names_up_to_the_limit_are_written_and_longer_ones_refused(tmp_path):
    for n in (242, 250, 255):
        p = tmp_path / ("x" * (n - 5) + ".gguf")
        with atomic_output(check_output(p)) as f:
            f.write(b"data")
        assert p.read_bytes() == b"data"
    with pytest.raises(OutputError, match="the file name is 256 bytes"):
        check_output(tmp_path / ("y" * 251 + ".gguf"))
    assert outputs_left(tmp_path) == []


def test_a_name_taken_while_we_worked_is_not_replaced_without_force(tmp_path):
    p = tmp_path / "o.gguf"
    out = check_output(p)
    with pytest.raises(OutputError, match="created by someone else while we worked"):
        with atomic_output(out) as f:
            f.write(b"ours")
            p.write_bytes(b"theirs")  # the other run published first
    assert p.read_bytes() == b"theirs"
    assert outputs_left(tmp_path) == []


def test_with_force_a_device_that_appeared_meanwhile_is_still_refused(tmp_path):
    p = tmp_path / "o.gguf"
    out = check_output(p, force=True)
    with pytest.raises(OutputError, match="a FIFO"):
        with atomic_output(out) as f:
            f.write(b"ours")
            os.mkfifo(p)
    assert stat.S_ISFIFO(os.lstat(p).st_mode)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError])
def test_any_exception_removes_the_temp_file(tmp_path, exc):
    with pytest.raises(exc):
        with atomic_output(check_output(tmp_path / "o.gguf")) as f:
            f.write(b"half")
            raise exc()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("code, hint", [(errno.ENOSPC, "free space"), (errno.EFBIG, "file size limit"),
                                        (errno.EROFS, "read-only")])
def test_an_os_error_while_writing_is_one_output_error(tmp_path, code, hint):
    with pytest.raises(OutputError, match=hint) as info:
        with atomic_output(check_output(tmp_path / "o.gguf")):
            raise OSError(code, os.strerror(code))
    assert str(tmp_path / "o.gguf") in str(info.value) and "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_stale_temp_files_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".o.gguf.{dead.pid}.abcd_123.tmp"
    live = tmp_path / f".o.gguf.{os.getppid()}.abcd_123.tmp"
    other = tmp_path / f".other.gguf.{dead.pid}.abcd_123.tmp"
    for p in (stale, live, other):
        p.write_bytes(b"x")
    out = check_output(tmp_path / "o.gguf")
    assert out.stale_removed == [] and stale.exists()  # the check alone removes nothing
    with atomic_output(out) as f:
        f.write(b"new")
    assert out.stale_removed == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_a_report_replaces_a_file_and_writes_into_a_fifo_in_place(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("old")
    write_text(p, "new\n")
    assert p.read_text() == "new\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert check_report(fifo) is None
    write_text(fifo, "piped\n")
    assert reader.communicate(timeout=10)[0] == b"piped\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_report_on_a_full_device_is_one_line(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(OutputError, match="No space left on device"):
        write_text("/dev/full", "x" * 100_000)


def test_a_report_on_a_full_disk_leaves_the_old_one(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_text("old report")
    real = outputs.atomic_output

    @contextlib.contextmanager
    def full_disk(out, flag):
        with real(out, flag) as f:
            f.write(b"{")
            raise OSError(errno.ENOSPC, "No space left on device")
            yield f  # never reached: the write failed
    monkeypatch.setattr(outputs, "atomic_output", full_disk)
    with pytest.raises(OutputError, match="No space left"):
        write_text(p, "new report")
    assert p.read_text() == "old report"
    assert outputs_left(tmp_path) == []


def outputs_left(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(".tmp"))
