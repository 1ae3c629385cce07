"""`bench` on the command line (cli/bench.py): the table and the JSON on stdout against the fake
llama-server, the flag checks made before a server is looked for, the pairing checks made before
one is started, and the helpers that split --server-args, name --server URLs and draw the table's
cells."""
import json
from types import SimpleNamespace

import pytest

from dflash_gguf.cli._options import split_server_args as _split_args
from dflash_gguf.cli.bench import _named_url, _pm, _spark
from dflash_gguf.errors import UsageError
from tests.bench.conftest import TARGET  # the fixtures come through tests/cli/conftest.py
from tests.conftest import FIXTURES


def test_table_on_stdout(cli, tmp_path, fake_bin, fake_env, drafters):
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--drafter", drafters["good"],
                       "--suite", "maths", "--limit", 1, "--n-predict", 8, "--thinking", "off")
    assert code == 0, se
    assert "good.gguf" in so and "no-think" in so and "speed-up" in so and "│ think" not in so

def test_json_to_stdout(cli, fake_bin, fake_env, drafters):
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--drafter", drafters["good"],
                       "--suite", "chat", "--limit", 1, "--n-predict", 8, "--json")
    assert code == 0, se
    assert json.loads(so)["schema"] == "dflash-gguf.bench/1"


@pytest.mark.parametrize("args,code,says", [
    (["--target", TARGET, "--server-log", "x.log"], 2, "--server-log reads the log of a running server: use it with --server"),
    # the report path is checked by fileio.outputs.check_report, as every output: an OutputError
    (["--target", TARGET, "--report", "/nonexistent-dir/r.json"], 5, "--report /nonexistent-dir/r.json: directory /nonexistent-dir does not exist"),
    # --json took a path before 0.2: now a usage error that names --report
    (["--target", TARGET, "--json", "r.json"], 2, "bench --json r.json: --json takes no value now (it prints JSON on stdout, as in every command); to write a file use --report r.json"),
    (["--target", TARGET, "--json", "-"], 2, "bench --json -: --json takes no value now (it prints JSON on stdout, as in every command); to write a file use --report FILE.json"),
    (["--target", "/nonexistent/t.gguf"], 2, "--target /nonexistent/t.gguf: no such file"),
    (["--target", TARGET, "--drafter", "/nonexistent/d.gguf"], 2, "--drafter /nonexistent/d.gguf: no such file"),
    (["--server", "ftp://h:1"], 2, "--server 'ftp://h:1': expected [NAME=]http://HOST:PORT"),
    (["--target", TARGET, "--server-args", "-ngl '99"], 2, "--server-args \"-ngl '99\": cannot split it into flags"),
])
def test_refused_before_a_server_is_looked_for(cli, fake_env, args, code, says):
    got, so, se = cli("bench", "--server-bin", "/nonexistent/llama-server", *args)
    assert got == code and says in se and len(se.strip().splitlines()) == 1
    assert so == "" and not fake_env.exists()


def test_a_pair_that_does_not_fit_is_refused_before_a_server_starts(cli, fake_bin, fake_env, drafters):
    """What `check DRAFTER --target TARGET` refuses (exit 13), bench refuses too, starting nothing:
    a Qwen3 drafter against a Llama target (another vocabulary, taps past its one layer)."""
    llama = FIXTURES / "guards" / "llama-3.1-8b-instruct.gguf"
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", llama, "--drafter", drafters["good"],
                       "--suite", "chat", "--limit", 1, "--n-predict", 8)
    assert code == 13 and so == "" and not fake_env.exists()  # the fake writes its pid file when started
    lines = se.strip().splitlines()
    assert lines[0] == (f"error: {drafters['good']} does not fit the target {llama}: 2 pairing errors (what "
                        "dflash-gguf check DRAFTER --target TARGET reports); no server was started")
    assert [line.split()[:2] for line in lines[1:]] == [["error", "pair-vocab-mismatch:"], ["error", "pair-taps-depth:"]]
    assert all(line.endswith("(good.gguf)") for line in lines[1:])
    # the same findings as check's (between its header line and its verdict line)
    code, so, _ = cli("check", drafters["good"], "--target", llama)
    *found, verdict = so.splitlines()[1:]
    assert code == 13 and [line.strip() for line in found] == [
        line.strip().removesuffix("(good.gguf)").strip() for line in lines[1:]]
    assert verdict.startswith("check: FAIL (exit 13): 1 file, 2 errors, 0 warnings; first: pair-vocab-mismatch in good.gguf")


def test_split_args():
    assert _split_args(None) == () and _split_args("") == ()
    assert _split_args('-ngl 99 --alias "my model"') == ("-ngl", "99", "--alias", "my model")
    with pytest.raises(UsageError, match="cannot split it into flags"):
        _split_args("-a 'b")


def test_named_urls():
    assert _named_url("http://127.0.0.1:8080", 0) == ("server", "http://127.0.0.1:8080")
    assert _named_url("http://h:1", 2) == ("server3", "http://h:1")  # unnamed ones numbered by position
    assert _named_url("fast=http://h:1/v1", 0) == ("fast", "http://h:1/v1")
    assert _named_url("http://h:1/?a=b", 1) == ("server2", "http://h:1/?a=b")  # '=' inside a URL is not a name
    with pytest.raises(UsageError, match="expected \\[NAME=\\]http://HOST:PORT"):
        _named_url("fast=h:1", 0)


def test_table_cells():
    assert _pm(None) == "-"
    assert _pm(SimpleNamespace(mean=1.23456, sd=0.5, values=[1.2])) == "1.235"  # one run: no spread
    assert _pm(SimpleNamespace(mean=2.0, sd=0.25, values=[1.75, 2.25]), ".2f", "x") == "2.00x ± 0.25"
    assert _spark([]) == "-" and _spark([0, 0]) == "-"
    # eighths of the largest count, rounded; an empty bucket is a blank
    assert _spark([0, 1, 2, 4, 8]) == " ▂▃▅█"
