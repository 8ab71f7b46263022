"""Hot reload of a hierarchical policy (`tinker_deploy.hierarchy_hot_reload.HotSwapHierarchy`): a new export goes
live at the next episode start, never mid-option; an export that reads another observation, or whose level
was changed after export, is refused and the running one keeps running."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import tinker_sim  # noqa: F401  (registers tinker/PlanarSort-v0 and the planar_sort skills)
from tinker_core.algos import HPPO, HPPOConfig
from tinker_deploy.hierarchy import export_hierarchy
from tinker_deploy.hierarchy_hot_reload import HotSwapHierarchy

ENV = "tinker/PlanarSort-v0"


def _export(path, seed: int, env: str = ENV):
    cfg = dict(skills=["planar_sort"]) if env == ENV else dict(num_options=2)
    algo = HPPO(env, HPPOConfig(n_steps=32, net_arch=[16], batch_size=32, seed=seed, **cfg))
    return export_hierarchy(algo.deployable_levels(), algo.hierarchy_metadata(), algo.export_metadata(), path,
                            log=lambda s: None)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    d = tmp_path_factory.mktemp("hier")
    return _export(d / "a", 0), _export(d / "b", 1)


def _decisions(policy, obs: np.ndarray, n: int) -> list[int]:
    out = []
    for _ in range(n):
        policy.forward(obs)
        out.append(policy.policy.option)
    return out


def test_a_new_export_goes_live_at_the_next_episode_start_not_mid_option(exports):
    a, b = exports
    hs = HotSwapHierarchy(a)
    old = hs.policy
    obs = np.zeros(old.input_spec.shape, np.float32)
    hs.reset()
    _decisions(hs, obs, 3)  # an option is running
    assert hs.request_reload(b).result(timeout=60) is True
    _decisions(hs, obs, 3)
    assert hs.policy is old and hs.reloads == 0  # validated, waiting: the running option finishes on its levels
    calls = old.calls
    hs.reset()
    assert hs.policy is not old and hs.reloads == 1 and str(hs.policy.root) == str(b)
    assert hs.policy.option is None and hs.policy.calls == calls  # a fresh decision; the counts carry on
    hs.forward(obs)
    assert hs.policy.high_calls == old.high_calls + 1
    hs.close()


def test_an_export_of_another_observation_or_tampered_is_refused_and_the_running_one_stays(exports, tmp_path):
    a, _ = exports
    other = _export(tmp_path / "other", 2, env="Pendulum-v1")  # another task: another observation and action
    bad = tmp_path / "bad"
    shutil.copytree(a, bad)
    (bad / "low" / "manifest.json").write_text((bad / "low" / "manifest.json").read_text() + "\n")
    hs = HotSwapHierarchy(a)
    running = hs.policy
    assert hs.request_reload(bad).result(timeout=60) is False
    assert "does not match hierarchy.json" in hs.rejected[-1].reason
    assert hs.request_reload(tmp_path / "missing").result(timeout=60) is False
    assert hs.request_reload(other).result(timeout=60) is False
    assert "differs from the running hierarchy" in hs.rejected[-1].reason
    hs.reset()
    assert hs.policy is running and hs.reloads == 0
    hs.close()
