"""`bench`: drafters in a real runtime — acceptance as the server counted it, speed-up over no draft."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import Interrupted, PairingError, UsageError
from ._app import app
from ._common import err, error_line, esc, finding_line, note, out, print_json, warn, write_report
from ._options import ServerArgsOpt, split_server_args


@app.command("bench")
def bench_cmd(
    target: Annotated[Optional[Path], typer.Option("--target", help="Target GGUF that llama-server loads (-m).")] = None,
    drafter: Annotated[Optional[list[Path]], typer.Option("--drafter", help="Drafter GGUF (repeatable): one server per drafter (-md, --spec-type draft-dflash/draft-dspark).")] = None,
    suite: Annotated[Optional[list[str]], typer.Option("--suite", help="chat | code | maths | humaneval | FILE.jsonl (repeatable; default chat).")] = None,
    runs: Annotated[int, typer.Option("--runs", help="Repeat the whole suite N times: mean ± sd over runs.")] = 1,
    n_predict: Annotated[int, typer.Option("--n-predict", help="Tokens to generate per prompt.")] = 128,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy (default); > 0 samples, seeded.")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="Base seed of sampled runs (each run and prompt gets its own).")] = 0,
    thinking: Annotated[str, typer.Option("--thinking", help="auto | on | off | both: chat template's enable_thinking (auto = both where the template has the switch).")] = "auto",
    raw: Annotated[bool, typer.Option("--raw", help="Send prompts as raw text, never through the chat template.")] = False,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Use the first N prompts of each suite.")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Always generate --n-predict tokens.")] = False,
    server_bin: Annotated[Optional[Path], typer.Option("--server-bin", help="llama-server binary (default: $DFLASH_LLAMA_SERVER, then PATH).")] = None,
    server_args: ServerArgsOpt = None,
    port: Annotated[Optional[int], typer.Option("--port", help="Port for llama-server (default: a free one).")] = None,
    ctx_size: Annotated[Optional[int], typer.Option("--ctx-size", help="llama-server -c (default: max(4096, n-predict + 2048)).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="llama-server -t.")] = None,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", help="Drafts per step (--spec-draft-n-max; default: the drafter's whole block, where llama-server alone drafts 3).")] = None,
    max_memory: Annotated[Optional[float], typer.Option("--max-memory", help="GiB the model files may take (default 90% of MemAvailable; inf = no guard).")] = None,
    no_baseline: Annotated[bool, typer.Option("--no-baseline", help="Skip the no-draft baseline (no speed-up then).")] = False,
    server: Annotated[Optional[list[str]], typer.Option("--server", help="[NAME=]URL of a running server to measure instead of launching (repeatable).")] = None,
    baseline_server: Annotated[Optional[str], typer.Option("--baseline-server", help="URL of a running no-draft server (the speed-up's reference with --server).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="With --server: llama.cpp | vllm | sglang.")] = "llama.cpp",
    server_log: Annotated[Optional[Path], typer.Option("--server-log", help="With --server (llama.cpp): its log, written with LLAMA_TRACE=1 --log-file, for per-step numbers.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Unmeasured requests after each server start.")] = 1,
    startup_timeout: Annotated[float, typer.Option("--startup-timeout", help="Seconds to wait for /health.")] = 300.0,
    request_timeout: Annotated[float, typer.Option("--request-timeout", help="Seconds one request may take.")] = 600.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout (instead of the tables).")] = False,
    report_to: Annotated[Optional[Path], typer.Option("--report", help="Also write the JSON report to this file (.json).")] = None,
    plots: Annotated[Optional[Path], typer.Option("--plots", help="Write PNG plots into this directory (needs matplotlib).")] = None,
) -> None:
    """Run prompt suites through llama-server with each drafter and without, and report acceptance and speed-up.

    Example: dflash-gguf bench --target T.gguf --drafter a.gguf --drafter b.gguf --suite code --runs 3 --report r.json --plots plots/
    """
    from ..bench import BenchOptions, build_report, run_bench
    from ..bench.options import validate
    from ..bench.server import find_server_bin

    if plots is not None:
        from ..bench.plots import require_matplotlib

        require_matplotlib()  # before an hour of running, not after
    if report_to is not None:
        from ..fileio.outputs import check_report

        check_report(report_to, inputs=(target, *(drafter or ())))  # now, not after the run
    if server_log is not None and not server:
        raise UsageError("--server-log reads the log of a running server: use it with --server")
    servers = tuple(_named_url(s, i) for i, s in enumerate(server or []))
    launching = not servers and baseline_server is None
    opts = BenchOptions(
        target=target, drafters=tuple(drafter or ()), servers=servers, baseline_server=baseline_server,
        server_log=server_log, engine=engine, suites=tuple(suite or ("chat",)), limit=limit, runs=runs,
        n_predict=n_predict, temperature=temperature, seed=seed, ignore_eos=ignore_eos, thinking=thinking, raw=raw,
        baseline=not no_baseline, max_memory_gib=max_memory, server_args=split_server_args(server_args),
        port=port, ctx_size=ctx_size, threads=threads, draft_max=draft_max, warmup=warmup, startup_timeout=startup_timeout,
        request_timeout=request_timeout)
    validate(opts)  # every value, before a server is looked for or started
    if launching:
        for p, role in [(target, "--target"), *[(d, "--drafter") for d in opts.drafters]]:
            if p is not None and not p.is_file():
                raise UsageError(f"{role} {p}: no such file")
        opts.server_bin = find_server_bin(server_bin)
    try:
        result = run_bench(opts, _progress())
    except KeyboardInterrupt:
        raise Interrupted("interrupted: the server bench started was stopped; no report written") from None
    except PairingError as exc:  # the error line, then each finding as `check` lists it
        error_line(exc)
        for f in exc.findings:
            err.print(finding_line(f, with_file=True), markup=False)
        raise typer.Exit(exc.exit_code) from None
    report = build_report(result)
    if plots is not None:
        from ..bench.plots import write_plots

        write_plots(report, plots)
    if report_to is not None:
        write_report(report_to, report.to_json(), (target, *opts.drafters))
    if json_out:
        print_json(report.to_json())
    else:
        _render(report)
    for n in result.notes:
        note(f"note: {n}")
    for c in result.configs:
        for n in c.notes:
            warn(f"{esc(c.name)}: {esc(n)}")
    if report.plots:
        note("plots: " + ", ".join(report.plots))


def _named_url(text: str, i: int) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or name.startswith("http"):
        name, url = f"server{i + 1}" if i else "server", text
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--server {text!r}: expected [NAME=]http://HOST:PORT")
    return name, url


def _progress():
    """Progress on stderr: a bar per configuration on a terminal, a line per configuration otherwise."""
    state: dict = {}

    def emit(e) -> None:
        if e.kind == "start":
            state["t0"] = time.monotonic()
            if err.is_terminal:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                state["bar"] = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                        TimeElapsedColumn(), console=err.console, transient=True)
                state["bar"].start()
                state["task"] = state["bar"].add_task(f"bench {e.config}", total=e.total)
            else:
                note(f"bench: {e.config}: {e.total} requests")
        elif e.kind == "step" and "bar" in state:
            state["bar"].advance(state["task"])
        elif e.kind == "end":
            if "bar" in state:
                state.pop("bar").stop()
            note(f"bench: {e.config}: done in {time.monotonic() - state.get('t0', time.monotonic()):.1f} s")

    return emit


def _pm(s, fmt: str = ".3f", unit: str = "") -> str:
    """mean ± sd (just the mean for one run)."""
    if s is None:
        return "-"
    return f"{s.mean:{fmt}}{unit}" + (f" ± {s.sd:{fmt}}" if len(s.values) > 1 else "")


_SPARK = "▁▂▃▄▅▆▇█"


def _spark(hist) -> str:
    if not hist or not sum(hist):
        return "-"
    top = max(hist)
    return "".join(_SPARK[min(7, round(7 * n / top))] if n else " " for n in hist)


def _render(report) -> None:
    from rich.table import Table

    st = report.result.settings
    temp = "greedy" if st["temperature"] == 0 else f"temperature {st['temperature']}, seed {st['seed']}"
    t = Table(title=f"bench: {esc(Path(st['target']).name if st['target'] else st['engine'])}, "
                    f"{st['runs']} run(s), {st['n_predict']} tokens, {temp}")
    for c in ("suite", "mode", "config", "accept rate", "mean len", "acc by position (1..6)", "hist 0..n",
              "drift first→last", "tok/s", "speed-up", "same text"):
        t.add_column(c, overflow="fold")
    for r in report.rows:
        pos = "-" if not r.per_position else " ".join(f"{s.mean:.2f}" for s in r.per_position[:6])
        drift = "-" if not r.drift else f"{r.drift['first'].mean:.2f}→{r.drift['last'].mean:.2f}"
        same = "-" if r.same_as_baseline is None else f"{r.same_as_baseline[0]}/{r.same_as_baseline[1]}"
        t.add_row(esc(r.suite), r.mode, esc(r.config), _pm(r.acceptance_rate), _pm(r.mean_length, ".2f"), pos,
                  _spark(r.histogram), drift, _pm(r.tokens_per_s, ".1f"), _pm(r.speedup, ".2f", "x"),
                  same)
    out.print(t)
    for c in report.comparisons:
        d = c.get("mean_acceptance_length")
        if d is None:
            continue
        if d["delta"] == 0 and d["sigma"] == 0:
            verdict = "identical"
        else:
            verdict = "real (> 1σ)" if d["real"] else "within 1σ: not a real difference"
        out.print(f"{c['suite']} · {c['mode']}: {c['b']} vs {c['a']}: mean length {d['delta']:+.3f} "
                  f"(σ {d['sigma']:.3f}, {verdict})", markup=False)
