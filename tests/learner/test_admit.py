"""A live action beyond its bound by a float32 rounding (-1.0000001 for -1) is clipped into the replay; further out it
is refused and counted. Before this the update's spec check stopped the learner on the first such row (the sorter's
suction, saturated at -1 in the ROS loop)."""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np
import pytest

from tinker_core.errors import ValidationError
from tinker_core.learner import Learner, LearnerConfig
from tinker_core.learner.admit import admit_action
from tinker_core.spec import Spec


def test_rounding_is_clipped_and_more_is_refused_naming_the_value(pendulum):
    spec = Spec((2,), np.float32, low=-1.0, high=1.0)
    t = pendulum(1)[0]
    t = dataclasses.replace(t, action=np.array([-1.0000001, 0.5], np.float32))
    np.testing.assert_array_equal(admit_action(t, spec).action, [-1.0, 0.5])
    assert admit_action(dataclasses.replace(t, action=np.array([0.2, 0.5], np.float32)), spec) is not None
    with pytest.raises(ValidationError, match=r"transition.action\[1\]: expected a value in \[-1, 1\], got 1.5"):
        admit_action(dataclasses.replace(t, action=np.array([0.0, 1.5], np.float32)), spec)
    with pytest.raises(ValidationError, match=r"transition.action\[0\]"):
        admit_action(dataclasses.replace(t, action=np.array([np.nan, 0.0], np.float32)), spec)


def test_the_learner_keeps_training_past_both(pendulum, tmp_path):
    from tinker_cli.learner import make_algo
    from tinker_core.transport import TransitionSender, free_endpoints

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p, control_endpoint=c,
                        env_id="Pendulum-v1", batch_size=16, warmup=20, publish_every=0, param_sync_every=0,
                        checkpoint_every=0, algo_kwargs={"net_arch": [16], "torch_threads": 1})
    learner = Learner(cfg, functools.partial(make_algo, "sac", "Pendulum-v1", None, cfg.algo_kwargs, "cpu", 0)).open()
    try:
        ts = pendulum(40)
        edge = [dataclasses.replace(x, action=np.array([-2.0000002], np.float32)) for x in ts[:20]]  # bound -2
        far = [dataclasses.replace(ts[20], action=np.array([3.0], np.float32))]
        tx = TransitionSender(cfg.transitions_endpoint)
        tx.send_many(edge + far + ts[21:])
        deadline = time.monotonic() + 30
        while learner.updates < 5 and time.monotonic() < deadline:
            learner.tick()
        assert learner.updates >= 5
        assert learner.rejected == 1 and "transition.action[0]" in learner.last_reject and "got 3.0" in learner.last_reject
        assert len(learner.replay) == 39
        tx.close()
    finally:
        learner.close(checkpoint=False)
