"""A candidate whose bundle cannot be written (onnxruntime and torch disagree beyond the tolerance, a full disk) is
not published, and the learner goes on training; the export's parity check runs on the robot's own observations.
Found when the sorter's learner stopped at its second publish: its export had drawn inputs from the spec's bounds
(+-10), where the actor differed from torch by 1.8e-5 against a tolerance of 1e-5."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from tinker_core.errors import BundleError
from tinker_core.learner import Learner, LearnerConfig


def _learner(publisher) -> Learner:
    from tinker_cli.learner import make_algo
    from tinker_core.transport import free_endpoints

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p, control_endpoint=c,
                        env_id="Pendulum-v1", batch_size=16, warmup=10, publish_every=0, param_sync_every=0,
                        checkpoint_every=0, gate_episodes=1, gate_min_success=0.0,
                        algo_kwargs={"net_arch": [16], "torch_threads": 1})
    return Learner(cfg, functools.partial(make_algo, "sac", "Pendulum-v1", None, cfg.algo_kwargs, "cpu", 0),
                   publisher, lambda: gym.make("Pendulum-v1")).open()


def test_an_export_that_fails_publishes_nothing_and_the_learner_goes_on(pendulum, tmp_path):
    seen = []

    def failing(algo, version, recorded_obs):
        seen.append(recorded_obs)
        raise BundleError("actor: onnxruntime differs from torch by 1.83e-05 (max abs), above the tolerance 1e-05")

    learner = _learner(failing)
    try:
        for t in pendulum(30, source="real"):
            learner.ingested[learner.replay.add(t)] += 1
        res = learner.try_publish()
        assert res["published"] is False and "the bundle was not written: actor: onnxruntime differs" in res["reason"]
        assert learner.version == 0 and learner.published == []
        (obs,) = seen  # the robot's own observations, as stored
        np.testing.assert_array_equal(obs, np.stack([t.obs for t in pendulum(30, source="real")]))
        before = learner.updates
        for _ in range(200):
            learner.tick()
            if learner.updates > before + 3:
                break
        assert learner.updates > before + 3  # still training
    finally:
        learner.close(checkpoint=False)


def test_a_publisher_of_the_older_two_argument_form_still_publishes_and_a_wrong_one_is_refused_at_once(pendulum,
                                                                                                       tmp_path):
    from tinker_core.errors import ConfigError

    written = []

    def old(algo, version):  # written before the learner passed its recorded observations
        d = tmp_path / f"v{version}"
        d.mkdir()
        (d / "policy.onnx").write_bytes(b"not checked here")
        written.append(version)
        return d

    learner = _learner(old)
    try:
        for t in pendulum(30, source="real"):
            learner.ingested[learner.replay.add(t)] += 1
        res = learner.try_publish()
        assert res.get("published", True) is not False and res["version"] == 1, res
        assert written == [1] and learner.published[0]["bundle"] == str(tmp_path / "v1")
    finally:
        learner.close(checkpoint=False)
    with pytest.raises(ConfigError, match=r"publisher: .* takes \(algo\); expected \(algo, version, recorded_obs\)"):
        _learner(lambda algo: tmp_path)
