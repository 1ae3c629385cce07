"""LLAMA_TRACE step lines -> per-task (drafted, accepted) steps, counted as llama-server counts them."""
import os

from dflash_gguf.bench import trace
from dflash_gguf.bench.trace import LogFollower, parse


def _line(task, text, fn="update_slots"):
    return f"slot {fn:>12}: id  0 | task {task} | {text}"


def test_plain_steps_in_order_per_task():
    log = "\n".join([
        _line(3, "processing task", "launch_slot_"),
        _line(3, "accepted  3/15 draft tokens"),
        _line(4, "accepted 15/15 draft tokens"),  # another task interleaved
        _line(3, "accepted  0/15 draft tokens"),
        _line(3, "      total time =      12.00 ms /    40 tokens", "print_timing"),
    ])
    tasks = parse(log)
    assert tasks[3].steps == [(15, 3), (15, 0)] and tasks[3].done
    assert tasks[4].steps == [(15, 15)] and not tasks[4].done
    assert (tasks[3].drafted, tasks[3].accepted) == (30, 3)


def test_restore_checkpoint_counts_the_replay_like_the_server():
    # drafted 15, 4 accepted -> checkpoint restored, the 5 kept tokens re-verified as a replay draft:
    # the server counts 15 drafted (at draft time), 5 - 1 = 4 accepted, one verification step.
    log = "\n".join([
        _line(7, "accepted  4/15 draft tokens (restore checkpoint)"),
        _line(7, "accepted  5/ 5 draft tokens"),
        _line(7, "accepted 15/15 draft tokens"),
        _line(7, "total time = 1 ms / 2 tokens", "print_timing"),
    ])
    t = parse(log)[7]
    assert t.steps == [(15, 4), (15, 15)]
    assert t.unreplayed == 0


def test_restore_without_replay_is_counted_as_nothing_accepted():
    t = parse("\n".join([_line(1, "accepted  2/15 draft tokens (restore checkpoint)"),
                         _line(1, "total time = 1 ms / 2 tokens", "print_timing")]))[1]
    assert t.steps == [(15, 0)] and t.unreplayed == 1


def test_ansi_colours_and_unrelated_lines_are_ignored():
    log = "\x1b[32m" + _line(2, "accepted  1/ 3 draft tokens") + "\x1b[0m\nmain: server is listening\nrandom | task text"
    assert parse(log)[2].steps == [(3, 1)]


def test_follower_hands_out_complete_lines_once(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"startup\n")
    f = LogFollower(log)
    f.mark()
    with open(log, "ab", buffering=0) as w:
        w.write(b"one\ntwo (half")
        assert f.lines() == "one\n"  # the line being written waits
        f.advance()
        w.write(b" written)\n")
        assert f.lines() == "two (half written)\n"


def test_follower_reads_only_the_newest_part(tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "LOG_READ_MAX", 64)
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    f = LogFollower(log)
    f.mark()
    log.write_bytes(b"x" * 1000 + b"\n" + _line(1, "accepted  1/ 3 draft tokens").encode() + b"\n")
    assert f.lines() == ""  # the one complete line is longer than a look: nothing half-read is parsed
    log.write_bytes(b"x" * 1000 + b"\nold\nnew\n")
    f.mark()
    with open(log, "ab") as w:
        w.write(b"y" * 100 + b"\nlast\n")
    assert f.lines() == "last\n"  # older lines beyond the window are skipped, from a line start


def test_follower_and_tail_read_only_regular_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    f = LogFollower(fifo)
    f.mark()
    assert f.lines() == "" and trace.read_tail(fifo) == b""  # returns at once: no writer is waited for
    assert trace.read_tail("/dev/zero") == b"" and trace.regular_size("/dev/zero") == 0


def test_tail_starts_at_a_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"a" * 100 + b"\nend of log\n")
    assert trace.read_tail(log, 20) == b"end of log\n"


def test_absurd_numbers_in_step_lines_are_not_steps():
    log = "\n".join([_line(1, "accepted " + "9" * 5000 + "/15 draft tokens"), _line(2, "accepted 16/15 draft tokens"),
                     _line("9" * 5000, "accepted 1/15 draft tokens"), _line(3, "accepted 1/15 draft tokens")])
    assert {k: t.steps for k, t in parse(log).items()} == {3: [(15, 1)]}
