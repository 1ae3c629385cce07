"""reference/replay.py: a recorded trajectory's rounds replayed, input for input, through a
drafter or a callable; the rounds' inputs, the logit and token comparisons, and the refusals."""
from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.reference import StepInputs, generate, teacher_forced  # noqa: E402
from dflash_gguf.reference.replay import StepLogits, TeacherForcedResult, step_inputs  # noqa: E402
from tests.reference.test_loop import PROMPT, models  # noqa: E402,F401  (the loop tests' tiny target and drafter)


def test_teacher_forced_replay(models):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 40, record=True)
    same = teacher_forced(drafter, target, r)
    assert len(same.steps) == len(r.steps)
    assert same.max_abs_diff == 0.0 and same.token_agreement == 1.0

    other = copy.deepcopy(drafter)
    with torch.no_grad():
        other.layers[1].mlp.down_proj.weight.mul_(1.05)
    nudged = teacher_forced(other, target, r)
    assert nudged.max_abs_diff > 1e-4

    recorded = {s.start: s.draft_logits for s in r.steps}

    def external(inp: StepInputs):
        assert inp.context.shape[0] > 0 and inp.block[0] == (PROMPT + r.new_ids)[inp.start]
        return recorded[inp.start]

    assert teacher_forced(external, target, r).max_abs_diff == 0.0
    with pytest.raises(ValueError, match="record=True"):
        teacher_forced(drafter, target, generate(drafter, target, PROMPT, 10))


def test_step_inputs_are_the_recorded_rounds(models):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 30, record=True)
    inputs = step_inputs(r)
    drafted = [s for s in r.steps if s.draft]
    assert len(inputs) == len(drafted) > 0
    n_feat = drafter.fc.in_features
    for inp, s in zip(inputs, drafted):
        assert (inp.start, inp.block, inp.draft, inp.draft_context) == (s.start, s.block, s.draft, None)
        assert inp.context is s.context and inp.context.shape[1] == n_feat
        assert inp.block[0] == (PROMPT + r.new_ids)[inp.start] 
        assert 1 < len(inp.block) <= 4 and inp.block[1:] == [drafter.mask_token_id] * (len(inp.block) - 1)
    # contiguous: each round's context covers the positions committed since the previous one
    assert inputs[0].context.shape[0] == len(PROMPT)
    for a, b in zip(inputs, inputs[1:]):
        assert b.start - a.start == b.context.shape[0]


def test_a_gap_in_the_trajectory_is_refused(models):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 30, record=True)
    gapped = dataclasses.replace(r, steps=r.steps[1:])  # the first round's context is missing
    with pytest.raises(ValueError, match="not contiguous at position"):
        teacher_forced(drafter, target, gapped)


def test_a_sampled_trajectory_has_no_token_agreement(models):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 20, temperature=1.0, seed=3, record=True)
    tf = teacher_forced(drafter, target, r)
    assert tf.token_agreement is None and all(s.reference_tokens is None for s in tf.steps)
    assert tf.max_abs_diff == 0.0  # the same drafter: the same logits


def test_result_summaries_by_hand():
    def step(tokens, ref, diff):
        return StepLogits(start=0, logits=torch.zeros(len(tokens), 4), tokens=tokens, reference_tokens=ref,
                          max_abs_diff=diff)

    tf = TeacherForcedResult([step([1, 2, 3], [1, 0, 3], 0.5), step([2], [2], None), step([0, 0], [1, 1], 2.0)])
    assert tf.max_abs_diff == 2.0
    assert tf.token_agreement == pytest.approx(3 / 6)
    empty = TeacherForcedResult([step([1], None, None)])
    assert empty.max_abs_diff is None and empty.token_agreement is None
