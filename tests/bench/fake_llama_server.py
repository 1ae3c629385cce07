"""A stand-in for llama-server (and, with FAKE_ENGINE, for vLLM and SGLang) for the bench tests.

It takes llama-server's flags (``-m``, ``-md``, ``--spec-type``, ``--host``, ``--port``, others
ignored), serves ``/health``, ``/props``, ``/apply-template`` and ``/completion`` with
deterministic ``timings``, and writes llama-server's log lines (``LLAMA_TRACE`` step lines
included) to stderr, so the real parsing and process handling run against it. What it
"drafts" is a pure function of the prompt, the drafter's file name and the seed, so a test can
recompute every count.

Environment switches (all optional):
  FAKE_ENGINE=vllm|sglang  speak vLLM's (/v1/completions + /metrics) or SGLang's (/generate) API
  FAKE_PIDFILE=PATH        write our pid there at start
  FAKE_EXIT_AT_START=N     print an error and exit N before listening
  FAKE_NEVER_HEALTHY=1     /health answers 503 forever
  FAKE_LOAD_S=SECONDS      /health answers 503 for this long (model "loading")
  FAKE_DIE_AT=N            SIGKILL ourselves while handling the Nth /completion (1-based)
  FAKE_DELAY=SECONDS       sleep this long in every /completion
  FAKE_IGNORE_TERM=1       ignore SIGTERM (bench must escalate to SIGKILL)
  FAKE_RESTORE=1           log partial acceptances as "(restore checkpoint)" + a replay line
  FAKE_TRACE_OFF_BY_ONE=1  log one accepted token more than timings report
  FAKE_LOG_LAG=SECONDS     write a request's log lines this long after answering it
  FAKE_NO_TEMPLATE=1       /props reports no chat template
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

N_DRAFT = 15  # block size 16; llama-server drafts only 3 unless --spec-draft-n-max says more
MS_PER_TOKEN = 4.0   # the target alone
MS_PER_STEP = 6.0    # one draft + verify round


def parse_args(argv: list[str]) -> dict:
    a = {"host": "127.0.0.1", "port": 8080, "model": None, "draft": None, "spec_type": None, "n_max": 3}
    it = iter(argv)
    for x in it:
        if x in ("-m", "--model"):
            a["model"] = next(it)
        elif x in ("-md", "--model-draft", "--spec-draft-model"):
            a["draft"] = next(it)
        elif x == "--spec-type":
            a["spec_type"] = next(it)
        elif x == "--host":
            a["host"] = next(it)
        elif x == "--port":
            a["port"] = int(next(it))
        elif x == "--spec-draft-n-max":
            a["n_max"] = min(int(next(it)), N_DRAFT)
    return a


def unit(*parts) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") / 2 ** 64


def drafter_quality(draft: str | None) -> float:
    if not draft:
        return 0.0
    name = os.path.basename(draft)
    return 0.8 if "good" in name else 0.5 if "bad" not in name else 0.2


def plan(prompt: str, n_predict: int, draft: str | None, seed: int, temperature: float,
         n_max: int = N_DRAFT) -> list[tuple[int, int]]:
    """(drafted, accepted) per verification step until n_predict tokens exist."""
    q = drafter_quality(draft)
    if "<think>" in prompt:
        q = min(0.95, q * 1.3)
    steps, made = [], 0
    while made < n_predict:
        room = n_predict - made - 1  # the last token of a step is the target's own
        n = min(n_max, room)
        if n <= 0:
            made += 1  # a plain decode step, no draft
            steps.append((0, 0))
            continue
        k = 0
        while k < n and unit(prompt, len(steps), k, seed if temperature > 0 else 0) < q:
            k += 1
        steps.append((n, k))
        made += k + 1
    return steps


class State:
    task = 0
    completions = 0
    started = time.monotonic()


def log(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def slot(task: int, fn: str, text: str) -> str:
    return f"slot {fn[:12]:>12}: id  0 | task {task} | {text}"


def make_handler(args: dict, env: dict):
    engine = env.get("FAKE_ENGINE", "llama.cpp")
    counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * args["n_max"]}

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a) -> None:  # keep the log to llama-server's lines
            pass

        def send(self, code: int, obj, ctype="application/json") -> None:
            body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def body(self) -> dict:
            n = int(self.headers.get("Content-Length", 0))
            return json.loads(self.rfile.read(n) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/health":
                loading = time.monotonic() - State.started < float(env.get("FAKE_LOAD_S", 0))
                if env.get("FAKE_NEVER_HEALTHY") or loading:
                    return self.send(503, {"error": {"code": 503, "message": "Loading model"}})
                return self.send(200, {"status": "ok"})
            if self.path == "/props":
                tmpl = "" if env.get("FAKE_NO_TEMPLATE") else "{{ fake }}"
                return self.send(200, {"chat_template": tmpl, "build_info": "fake-0", "model_path": args["model"]})
            if self.path == "/metrics" and engine == "vllm":
                lines = ["# TYPE vllm:spec_decode_num_drafts_total counter",
                         f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {counters["drafts"]}.0',
                         f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {counters["draft_tokens"]}.0',
                         f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {counters["accepted"]}.0']
                lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}.0'
                          for i, v in enumerate(counters["per_pos"])]
                return self.send(200, "\n".join(lines) + "\n", "text/plain")
            if self.path == "/v1/models":
                return self.send(200, {"data": [{"id": "fake-model"}]})
            self.send(404, {"error": {"code": 404, "message": "File Not Found"}})

        def do_POST(self) -> None:
            b = self.body()
            if self.path == "/apply-template":
                msg = b["messages"][-1]["content"]
                think = (b.get("chat_template_kwargs") or {}).get("enable_thinking", True)
                return self.send(200, {"prompt": f"<user>{msg}</user><assistant>" + ("<think>" if think else "")})
            if self.path in ("/completion", "/v1/completions", "/v1/chat/completions", "/generate"):
                return self.complete(b)
            self.send(404, {"error": {"code": 404, "message": "File Not Found"}})

        def complete(self, b: dict) -> None:
            State.completions += 1
            if State.completions == int(env.get("FAKE_DIE_AT", 0)):
                log("GGML_ASSERT(fake) failed: simulated crash")
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(float(env.get("FAKE_DELAY", 0)))
            if self.path == "/v1/chat/completions":
                prompt = b["messages"][-1]["content"]
                if (b.get("chat_template_kwargs") or {}).get("enable_thinking", True):
                    prompt += "<think>"
            else:
                prompt = b.get("prompt", b.get("text", ""))
            sp = b.get("sampling_params") or {}
            n_predict = int(b.get("n_predict", b.get("max_tokens", sp.get("max_new_tokens", 16))))
            temperature = float(b.get("temperature", sp.get("temperature", 0)))
            seed = int(b.get("seed", sp.get("sampling_seed", 0)) or 0)
            steps = plan(prompt, n_predict, args["draft"], seed, temperature, args["n_max"]) if args["draft"] else []
            drafted = sum(d for d, _ in steps)
            accepted = sum(a for _, a in steps)
            text = "".join(chr(97 + int(unit(prompt, i) * 26)) for i in range(n_predict))
            State.task += 1
            task = State.task
            lines = [slot(task, "launch_slot_", "processing task")]
            for d, a in steps:
                if d == 0:
                    continue
                if env.get("FAKE_RESTORE") and a < d:
                    lines.append(slot(task, "update_slots", f"accepted {a:2d}/{d:2d} draft tokens (restore checkpoint)"))
                    lines.append(slot(task, "update_slots", f"accepted {a + 1:2d}/{a + 1:2d} draft tokens"))
                else:
                    lines.append(slot(task, "update_slots", f"accepted {a:2d}/{d:2d} draft tokens"))
            if env.get("FAKE_TRACE_OFF_BY_ONE") and steps:
                lines.append(slot(task, "update_slots", "accepted  1/ 1 draft tokens"))
            pred_ms = (len(steps) * MS_PER_STEP) if steps else n_predict * MS_PER_TOKEN
            lines.append(slot(task, "print_timing", f"      total time = {pred_ms + 5:10.2f} ms / {n_predict + 8:5d} tokens"))
            if drafted:
                lines.append(slot(task, "print_timing", f"draft acceptance = {accepted / drafted:0.5f} "
                                                         f"({accepted:5d} accepted / {drafted:5d} generated), mean len = "
                                                         f"{1 + accepted / max(len(steps), 1):5.2f}"))
            lines.append(slot(task, "release", "stop processing: n_tokens = 0, truncated = 0"))
            lag = float(env.get("FAKE_LOG_LAG", 0))
            if lag:
                threading.Timer(lag, lambda: [log(x) for x in lines]).start()
            else:
                for x in lines:
                    log(x)
            counters["drafts"] += sum(1 for d, _ in steps if d)
            counters["draft_tokens"] += drafted
            counters["accepted"] += accepted
            for d, a in steps:
                for i in range(a):
                    counters["per_pos"][i] += 1
            if engine == "vllm":
                usage = {"prompt_tokens": 8, "completion_tokens": n_predict}
                choice = {"message": {"content": text}} if self.path.endswith("chat/completions") else {"text": text}
                return self.send(200, {"choices": [choice], "usage": usage})
            if engine == "sglang":
                n_steps = len(steps)
                hist = [0] * (args["n_max"] + 1)
                for d, a in steps:
                    hist[a] += 1
                return self.send(200, {"text": text, "meta_info": {
                    "prompt_tokens": 8, "completion_tokens": n_predict, "e2e_latency": pred_ms / 1000,
                    "spec_verify_ct": n_steps, "spec_accept_token_num": accepted, "spec_draft_token_num": drafted,
                    "spec_accept_histogram": hist}})
            timings = {"prompt_n": 8, "prompt_ms": 5.0, "predicted_n": n_predict, "predicted_ms": pred_ms,
                       "predicted_per_second": n_predict / pred_ms * 1000}
            if drafted:
                timings.update(draft_n=drafted, draft_n_accepted=accepted)
            self.send(200, {"content": text, "tokens_predicted": n_predict, "stop_type": "limit", "timings": timings})

    return H


def main() -> None:
    env = os.environ
    args = parse_args(sys.argv[1:])
    if env.get("FAKE_PIDFILE"):
        with open(env["FAKE_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    if env.get("FAKE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log(f"build: fake (llama-server stand-in), model {args['model']}, draft {args['draft']}, "
        f"spec-type {args['spec_type']}")
    if env.get("LLAMA_TRACE"):
        log(f"srv    load_model: LLAMA_TRACE = {env['LLAMA_TRACE']}")
    if env.get("FAKE_EXIT_AT_START"):
        log("error: failed to load model (simulated)")
        sys.exit(int(env["FAKE_EXIT_AT_START"]))
    if args["model"] and not os.path.exists(args["model"]):
        log(f"error: failed to open {args['model']}")
        sys.exit(1)
    try:
        httpd = HTTPServer((args["host"], args["port"]), make_handler(args, env))
    except OSError:
        log(f"srv    start: couldn't bind HTTP server socket, hostname: {args['host']}, port: {args['port']}")
        sys.exit(1)
    log(f"main: server is listening on http://{args['host']}:{args['port']}")
    httpd.serve_forever()


if __name__ == "__main__":
    main()
