"""HTTP helpers and the engines' counters: Prometheus text, vLLM deltas, error messages."""
import pytest

from dflash_gguf.bench.client import RequestFailed, call, parse_prometheus, vllm_counters
from dflash_gguf.bench.server import free_port

METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 70.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 31.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:num_requests_running{engine="0",model_name="a,b"} 0.0
"""


def test_prometheus_samples_with_labels():
    s = parse_prometheus(METRICS)
    assert ("vllm:spec_decode_num_drafts_total", {"engine": "1", "model_name": "m"}, 2.0) in s
    assert ("vllm:num_requests_running", {"engine": "0", "model_name": "a,b"}, 0.0) in s  # comma inside quotes


def test_vllm_counters_sum_engines_and_positions():
    c = vllm_counters(METRICS)
    assert c["seen"] and c["drafts"] == 12 and c["draft_tokens"] == 70 and c["accepted"] == 31
    assert c["per_pos"] == {0: 9.0, 1: 8.0}


def test_vllm_counters_without_total_suffix_and_absent():
    assert vllm_counters("vllm:spec_decode_num_drafts 3\n")["drafts"] == 3
    assert not vllm_counters("vllm:num_requests_running 0\n")["seen"]


def test_connection_refused_is_a_lost_request():
    with pytest.raises(RequestFailed) as e:
        call(f"http://127.0.0.1:{free_port()}", "/health", timeout=2)
    assert e.value.lost
