"""LLAMA_TRACE step lines -> per-task (drafted, accepted) steps, counted as llama-server counts them."""
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


def test_follower_hands_out_complete_lines_once():
    buf = [b"startup\n"]
    f = LogFollower(lambda off: b"".join(buf)[off:], lambda: len(b"".join(buf)))
    f.mark()
    buf.append(b"one\ntwo (half")
    assert f.lines() == "one\n"  # the line being written waits
    f.advance()
    buf.append(b" written)\n")
    assert f.lines() == "two (half written)\n"
