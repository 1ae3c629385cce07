"""bench/options.py: every option's value and every combination checked before anything starts,
each refusal one UsageError naming the flag; the settings block of the report."""
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_gguf.bench.options import MAX_TIMEOUT_S, BenchOptions, memory_limit, settings, validate
from dflash_gguf.errors import UsageError

LAUNCH = BenchOptions(target=Path("t.gguf"), drafters=(Path("d.gguf"),))
ATTACH = BenchOptions(servers=(("server", "http://127.0.0.1:8080"),))


def test_good_options_pass():
    validate(LAUNCH)
    validate(ATTACH)
    validate(replace(ATTACH, engine="vllm", baseline_server="https://h:1/v1", thinking="both", runs=3, warmup=0,
                     port=65535, temperature=0.0, max_memory_gib=math.inf, startup_timeout=MAX_TIMEOUT_S))
    validate(replace(LAUNCH, drafters=(), baseline=True))  # a baseline alone is something to run


@pytest.mark.parametrize("change,says", [
    (dict(runs=0), "--runs 0: must be at least 1"),
    (dict(n_predict=-1), "--n-predict -1: must be at least 1"),
    (dict(draft_max=0), "--draft-max 0: must be at least 1"),
    (dict(limit=0), "--limit 0: must be at least 1"),
    (dict(ctx_size=0), "--ctx-size 0: must be at least 1"),
    (dict(threads=0), "--threads 0: must be at least 1"),
    (dict(warmup=-1), "--warmup -1: must be at least 0"),
    (dict(port=0), "--port 0: must be at least 1"),
    (dict(port=65536), "--port 65536: a TCP port is 1-65535"),
    (dict(startup_timeout=0.0), "--startup-timeout 0.0: give seconds"),
    (dict(request_timeout=math.nan), "--request-timeout nan: give seconds"),
    (dict(request_timeout=MAX_TIMEOUT_S * 2), "--request-timeout"),
    (dict(temperature=-0.1), "--temperature -0.1"),
    (dict(temperature=math.inf), "--temperature inf"),
    (dict(max_memory_gib=-1.0), "--max-memory -1.0"),
    (dict(thinking="maybe"), "--thinking 'maybe': choose auto, on, off or both"),
    (dict(engine="tgi"), "--engine 'tgi': choose llama.cpp, vllm, sglang"),
    (dict(engine="vllm"), "--engine vllm: bench launches llama-server only"),
    (dict(target=None), "give --target T.gguf"),
    (dict(drafters=(), baseline=False), "nothing to run"),
])
def test_each_bad_launch_option_names_its_flag(change, says):
    with pytest.raises(UsageError) as e:
        validate(replace(LAUNCH, **change))
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("change,says", [
    (dict(servers=(("a", "ftp://h"),)), "--server 'ftp://h': expected http://HOST:PORT"),
    (dict(servers=(("a", "http://h:99999"),)), "--server 'http://h:99999': not a URL"),
    (dict(baseline_server="http://h:0"), "--baseline-server 'http://h:0': port 0"),
    (dict(target=Path("t.gguf")), "--server measures the model its server already loaded"),
    (dict(drafters=(Path("d.gguf"),)), "drop --target/--drafter"),
])
def test_each_bad_server_option_names_its_flag(change, says):
    with pytest.raises(UsageError) as e:
        validate(replace(ATTACH, **change))
    assert says in str(e.value)


def test_a_baseline_server_alone_is_not_a_launch():
    opts = BenchOptions(baseline_server="http://h:1")
    assert not opts.launching and LAUNCH.launching and not ATTACH.launching
    validate(opts)


def test_the_server_log_must_be_a_regular_file(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    validate(replace(ATTACH, server_log=log))
    with pytest.raises(UsageError, match="--server-log .*: not a regular file"):
        validate(replace(ATTACH, server_log=tmp_path))
    with pytest.raises(UsageError, match="--server-log .*nope.log: No such file"):
        validate(replace(ATTACH, server_log=tmp_path / "nope.log"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):  # refused without opening it (which would block)
        validate(replace(ATTACH, server_log=fifo))


def test_memory_limit_from_the_flag_or_the_default(monkeypatch):
    from dflash_gguf.bench import memory

    assert memory_limit(replace(LAUNCH, max_memory_gib=2.5)) == (2.5 * (1 << 30), "--max-memory")
    monkeypatch.setattr(memory, "default_limit", lambda: (123.0, "the default"))
    assert memory_limit(LAUNCH) == (123.0, "the default")


def test_settings_are_json_and_record_what_was_asked():
    opts = replace(LAUNCH, server_bin=Path("/bin/llama-server"), server_args=("-ngl", "99"), suites=("chat", "code"))
    doc = settings(opts, math.inf, "--max-memory")
    text = json.dumps(doc, allow_nan=False)  # an infinite limit is null: JSON has no Infinity
    assert json.loads(text)["max_memory_bytes"] is None and doc["max_memory_from"] == "--max-memory"
    assert doc["target"] == "t.gguf" and doc["drafters"] == ["d.gguf"] and doc["server_bin"] == "/bin/llama-server"
    assert doc["suites"] == ["chat", "code"] and doc["server_args"] == ["-ngl", "99"]
    assert settings(ATTACH, 2.0, "x")["servers"] == [{"name": "server", "url": "http://127.0.0.1:8080"}]
    assert settings(ATTACH, None, "none")["max_memory_bytes"] is None and settings(ATTACH, 2.0, "x")["target"] is None
