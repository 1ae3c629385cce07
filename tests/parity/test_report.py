"""The report's llama-server acceptance numbers and llama-perplexity KL summaries: present under the
names bench uses, and consistent with the rounds they summarize."""
import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.parity import ParityOptions, run_parity  # noqa: E402
from dflash_gguf.reference import tiny  # noqa: E402
from tests.parity.conftest import gguf_of, parity  # noqa: E402

# vocab 8 and these seeds accept 0..3 drafts per round (tests/reference/test_loop.py's pair)
TARGET = tiny.target_config(vocab=8, layers=4, tie=False)
PROMPTS = [[1, 2, 3, 4, 5], [2, 7, 1, 1]]
ACCEPTANCE = {"steps", "drafted", "accepted", "acceptance_rate", "mean_acceptance_length", "per_position",
              "histogram", "drift"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("accepting")
    return (tiny.save_target(root / "t", TARGET, seed=1),
            tiny.save_drafter(root / "d", tiny.drafter_config(TARGET, block_size=4), seed=8, residual=0.3))


def _check(acc, rounds):
    """acc (Acceptance JSON) against the (drafted, accepted) rounds it was built from."""
    steps = len(rounds)
    assert set(acc) >= ACCEPTANCE and acc["steps"] == steps > 0
    assert acc["drafted"] == sum(d for d, _ in rounds) and acc["accepted"] == sum(a for _, a in rounds)
    assert acc["acceptance_rate"] == pytest.approx(acc["accepted"] / acc["drafted"])
    assert acc["mean_acceptance_length"] == pytest.approx(1 + acc["accepted"] / steps)
    assert len(acc["per_position"]) == 3 and len(acc["histogram"]) == 4  # block 4: 3 drafts a round
    assert sum(acc["histogram"]) == steps
    for i, share in enumerate(acc["per_position"]):
        assert share * steps == pytest.approx(sum(a > i for _, a in rounds))
    assert acc["histogram"] == [sum(a == k for _, a in rounds) for k in range(4)]


def _server_rounds(prompt_ids, run):
    """(drafted, accepted) per round as llama-server counts them: rounds without drafts left out,
    and a draft trimmed to the tokens still to predict less one (the run hit its token limit)."""
    limit = len(prompt_ids) + len(run["new_ids"])
    start, rounds = len(prompt_ids), []
    for s, produced in zip(run["steps"], run["acceptance_lengths"]):
        drafted = min(len(s["draft"]), limit - start - 2)
        if drafted > 0:
            rounds.append((drafted, min(s["accepted"], drafted)))
        start += produced
    return rounds


def test_acceptance_and_target_divergence_per_prompt_and_pooled(pair):
    rep = run_parity(*pair, PROMPTS, options=ParityOptions(max_new_tokens=40, device="cpu")).to_json()
    pooled_rounds = []
    for p in rep["prompts"]:
        ref = p["reference"]
        rounds = _server_rounds(p["prompt_ids"], ref)
        _check(ref["acceptance"], rounds)
        assert ref["acceptance"]["acceptance_rate"] == ref["acceptance_rate"]  # one definition
        kl = ref["target_divergence"]  # every drafted position, trimmed or not
        assert kl["positions"] == sum(len(s["draft"]) for s in ref["steps"])
        # greedy: an accepted draft is the target's argmax and the drafter's, so it shares the top
        assert kl["same_top"] * kl["positions"] >= ref["acceptance"]["accepted"]
        pooled_rounds += rounds
    pooled = rep["pooled"]["reference"]
    assert rep["pooled"]["prompts"] == 2 and "runs" not in pooled["acceptance"]
    _check(pooled["acceptance"], pooled_rounds)
    assert pooled["target_divergence"]["positions"] == sum(len(s["draft"]) for p in rep["prompts"]
                                                           for s in p["reference"]["steps"])
    assert pooled["acceptance"]["accepted"] > 0  # the checks above are not vacuous


def test_several_runs_give_each_runs_spread(pair):
    opts = ParityOptions(max_new_tokens=30, device="cpu", temperature=0.8, runs=3, seed=5)
    rep = run_parity(*pair, PROMPTS, options=opts)
    runs = rep.to_json()["pooled"]["reference"]["acceptance"]["runs"]
    assert len(runs["acceptance_rate"]["values"]) == len(runs["mean_acceptance_length"]["values"]) == 3
    # run r pooled over both prompts, from the rounds the report kept
    for r, value in enumerate(runs["acceptance_rate"]["values"]):
        rounds = [x for p in rep.prompts for x in p.reference.run_steps[r]]
        assert value == pytest.approx(sum(a for _, a in rounds) / sum(d for d, _ in rounds))
    assert runs["acceptance_rate"]["sd"] > 0


def test_gguf_drafter_kl_against_the_reference_and_the_terminal(cli, tmp_path):
    g = gguf_of(cli, tmp_path)
    code, rep, so, se = parity(cli, tmp_path, "--drafter-gguf", g)
    assert code == 0, se
    (d,) = rep["drafters"]
    lp = d["logit_parity"]
    kl = lp["kl_divergence"]
    # the summary and the older scalar fields are one computation
    # teacher-forced on every position the reference drafted (a draft the server would trim included)
    assert kl["positions"] == lp["positions"] == sum(len(s["draft"]) for s in rep["reference"]["steps"])
    assert kl["mean"] == lp["mean_kl"] and kl["max"] == lp["max_kl"] and kl["same_top"] == lp["top1_agreement"]
    assert 0 <= kl["min"] <= kl["median"] <= kl["p99"] <= kl["max"] < 1e-3
    pooled = rep["pooled"]["drafters"][0]
    assert pooled["logit_divergence"] == kl and set(pooled["acceptance"]) >= ACCEPTANCE
    assert "target_divergence" in pooled and "logit_divergence" not in rep["pooled"]["reference"]
    assert "KL(target ‖ drafter)" in so and "acc per pos" in so and "KL(reference ‖ GGUF), teacher-forced" in so


def test_rounds_near_the_token_limit_count_as_llama_server_counts_them():
    """Prompt of 4, limit 4 + 12 = 16. A round starting at 12 (the last committed token) has 3
    positions left, one of them the target's own: the server drafts 2 there, not 7; a round at
    14 has no room for a draft at all and is no speculative step."""
    from types import SimpleNamespace as NS

    from dflash_gguf.parity.report import _drafting_rounds

    steps = [NS(start=4, draft=[0] * 7, accepted=7), NS(start=12, draft=[0] * 7, accepted=5),
             NS(start=14, draft=[0] * 7, accepted=0)]
    run = NS(prompt_ids=[0] * 4, new_ids=[0] * 12, steps=steps, stopped=False)
    assert _drafting_rounds(run) == [(7, 7), (2, 2)]
    # a stop token ended it: the server drafted whole blocks, it could not know
    assert _drafting_rounds(NS(**{**vars(run), "stopped": True})) == [(7, 7), (7, 5), (7, 0)]
