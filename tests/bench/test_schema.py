"""The engines' answer schemas (bench/schema.py): what is accepted, and one line for the rest."""
import math

import pytest

from dflash_gguf.bench import schema
from dflash_gguf.bench.schema import BadAnswer, Completion
from dflash_gguf.bench.transport import RequestFailed

TIMINGS = {"prompt_n": 3, "predicted_n": 4, "predicted_ms": 10.0, "draft_n": 6, "draft_n_accepted": 3}


def _refused(fn, *args, match: str | None = None) -> str:
    with pytest.raises(BadAnswer, match=match) as e:
        fn(*args)
    msg = str(e.value)
    assert "\n" not in msg and not e.value.lost
    assert isinstance(e.value, RequestFailed)  # run's _guard turns it into exit 40
    return msg


def test_decode_json_bounds():
    assert schema.decode_json(b'{"a": [1, 2.5, "x"]}', "GET /x") == {"a": [1, 2.5, "x"]}
    _refused(schema.decode_json, b'{"a": "\xff"}', "GET /x", match="not UTF-8")
    _refused(schema.decode_json, b"7" * 5000, "GET /x", match="5000 digits")
    _refused(schema.decode_json, b"[" * 100_000 + b"]" * 100_000, "GET /x", match="nested deeper")
    _refused(schema.decode_json, b"[" * 65 + b"]" * 65, "GET /x", match="nested deeper")
    schema.decode_json(b"[" * 64 + b"]" * 64, "GET /x")
    _refused(schema.decode_json, b"<html>", "GET /x", match="not JSON")


def test_llama_completion_accepts_what_llama_server_sends():
    c = schema.llama_completion({"content": "hi", "timings": TIMINGS}, 0.5)
    assert (c.text, c.prompt_n, c.predicted_n, c.decode_s, c.drafted, c.accepted) == ("hi", 3, 4, 0.01, 6, 3)
    c = schema.llama_completion({"timings": {"predicted_n": 4.0}}, 0.5)  # no draft_n: nothing drafted
    assert (c.predicted_n, c.drafted, c.accepted, c.text) == (4, 0, 0, "")


@pytest.mark.parametrize("answer,match", [
    ([], "the answer is a list"),
    ({"timings": "predicted_n"}, "no timings.predicted_n"),
    ({"timings": {"predicted_n": [4]}}, "predicted_n is a list"),
    ({"timings": {"predicted_n": "4"}}, "predicted_n is a string"),
    ({"timings": {"predicted_n": True}}, "predicted_n is a boolean"),
    ({"timings": {"predicted_n": 4.5}}, "whole number"),
    ({"timings": {"predicted_n": -1}}, "outside 0"),
    ({"timings": {"predicted_n": 4, "predicted_ms": math.nan}}, "predicted_ms"),
    ({"timings": {"predicted_n": 4, "predicted_ms": -3}}, "predicted_ms"),
    ({"timings": {"predicted_n": 4, "draft_n": -3, "draft_n_accepted": 1}}, "draft_n is the number -3"),
    ({"timings": {"predicted_n": 4, "draft_n": 2, "draft_n_accepted": 5}}, "5 draft tokens accepted of 2"),
    ({"content": 5, "timings": {"predicted_n": 4}}, "content is the number 5"),
])
def test_llama_completion_refusals(answer, match):
    _refused(schema.llama_completion, answer, 0.1, match=match)


def test_llama_template_and_props():
    assert schema.llama_template({"prompt": "<s>hi"}) == "<s>hi"
    _refused(schema.llama_template, {"prompt": 1}, match="prompt is the number 1")
    _refused(schema.llama_template, ["x"], match="is a list")
    assert schema.llama_props({"chat_template": "t", "build_info": "b", "other": [1]}) == \
        {"chat_template": "t", "build_info": "b"}
    _refused(schema.llama_props, {"chat_template": 5}, match="chat_template")
    _refused(schema.llama_props, [], match="GET /props")


def test_vllm_models_and_completions():
    assert schema.vllm_model({"data": [{"id": "m"}]}) == "m"
    for bad in ({"data": "abc"}, {"data": []}, {"data": [{"id": 5}]}, {"data": [[]]}, []):
        _refused(schema.vllm_model, bad)
    c = schema.vllm_completion({"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": 2}},
                               True, 0.2)
    assert (c.text, c.predicted_n, c.prompt_n, c.decode_s) == ("x", 2, None, None)
    _refused(schema.vllm_completion, {"choices": {"text": "x"}}, False, 0.1, match="no choices")
    _refused(schema.vllm_completion, {"choices": [{"text": "x"}], "usage": {"completion_tokens": "2"}}, False, 0.1,
             match="completion_tokens is a string")
    _refused(schema.vllm_completion, {"choices": [{"text": "x"}], "usage": [1]}, False, 0.1, match="usage is a list")


def _page(drafts, tokens, accepted, *per_pos):
    lines = [f"vllm:spec_decode_num_drafts_total {drafts}", f"vllm:spec_decode_num_draft_tokens_total {tokens}",
             f"vllm:spec_decode_num_accepted_tokens_total {accepted}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    return schema.vllm_counters("\n".join(lines) + "\n")


def test_vllm_counter_deltas():
    c = schema.vllm_delta(Completion("", None, 4, None, 0.1), _page(1, 10, 2, 1, 1), _page(3, 16, 5, 3, 2), "POST /v1/x")
    assert (c.verify_steps, c.drafted, c.accepted, c.per_position) == (2, 6, 3, [2, 1])
    with pytest.raises(BadAnswer, match="went down"):
        schema.vllm_delta(Completion("", None, 4, None, 0.1), _page(5, 10, 2), _page(3, 10, 2), "POST /v1/x")
    with pytest.raises(BadAnswer, match="accepted of"):
        schema.vllm_delta(Completion("", None, 4, None, 0.1), _page(0, 0, 0), _page(1, 2, 3), "POST /v1/x")
    with pytest.raises(BadAnswer, match="reached in more steps"):
        schema.vllm_delta(Completion("", None, 4, None, 0.1), _page(0, 0, 0, 0), _page(1, 3, 1, 2), "POST /v1/x")


@pytest.mark.parametrize("line,match", [
    ("vllm:spec_decode_num_drafts_total -5", "finite number"),
    ("vllm:spec_decode_num_drafts_total NaN", "finite number"),
    ("vllm:spec_decode_num_draft_tokens_total +Inf", "finite number"),
    ("vllm:spec_decode_num_accepted_tokens_total " + "9" * 5000, "finite number"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="abc"} 1', "position 'abc'"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="99999999"} 1', "position '99999999'"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="²"} 1', "position"),
])
def test_vllm_counter_refusals(line, match):
    _refused(schema.vllm_counters, line + "\n", match=match)


def test_other_metrics_are_not_ours_to_judge():
    c = schema.vllm_counters("vllm:num_requests_running -1\nvllm:cache_usage NaN\ngarbage line {\n")
    assert not c["seen"]


def test_sglang_generate():
    meta = {"prompt_tokens": 3, "completion_tokens": 4, "e2e_latency": 0.5, "spec_verify_ct": 2,
            "spec_accept_token_num": 3, "spec_draft_token_num": 6, "spec_accept_histogram": [0, 1, 1]}
    c = schema.sglang_generate([{"text": "x", "meta_info": meta}], 9.0)
    assert (c.wall_s, c.verify_steps, c.accepted, c.drafted, c.histogram) == (0.5, 2, 3, 6, [0, 1, 1])
    assert schema.sglang_generate({"text": "x"}, 9.0).wall_s == 9.0


@pytest.mark.parametrize("answer,match", [
    ([], "empty list"),
    ({"text": "x", "meta_info": [1]}, "meta_info is a list"),
    ({"text": "x", "meta_info": {"spec_verify_ct": "three"}}, "spec_verify_ct is a string"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accept_token_num": -1}}, "outside 0"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accept_token_num": 5, "spec_draft_token_num": 2}},
     "accepted of 2"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accept_histogram": [10 ** 15]}}, "outside 0"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accept_histogram": "[1]"}}, "expected a list"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accept_histogram": [0] * 2000}}, "2000 bins"),
    ({"text": "x", "meta_info": {"spec_verify_ct": 1 << 40}}, "verification steps"),
    ({"text": "x", "meta_info": {"e2e_latency": "slow"}}, "e2e_latency"),
])
def test_sglang_refusals(answer, match):
    _refused(schema.sglang_generate, answer, 0.1, match=match)
