"""`LocatedObjects` writes the sorter's object terms as ArmSort defines them, from positions alone."""

import numpy as np
import pytest
import torch
from torch import nn

from tinker_core.errors import ConfigError
from tinker_core.nn.located_objects import LocatedObjects
from tinker_core.nn.locator import LocatorConfig


class SeenPositions(nn.Module):
    """A test double for the image model (this test checks the geometry, not the CNN): returns the positions set
    on it, kind 0 then kind 1, as a sort locator's first outputs."""

    def __init__(self):
        super().__init__()
        self.config = LocatorConfig(targets=2, center=[0.0] * 6, half=[1.0] * 6, prior_rgb=None)
        self.positions = torch.zeros(1, 6)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.positions


def _geometry():
    from tinker_sim.tasks.sort import BIN_CENTERS, BIN_INNER_HALF, REST_Z, RIM_Z

    return dict(bins=BIN_CENTERS.tolist(), rest_z=REST_Z, bin_inner_half=BIN_INNER_HALF, rim_z=RIM_Z)


def test_true_positions_give_the_terms_the_env_computes_through_whole_sorting_episodes():
    """Driven by the shipped sorter on nominal ArmSort, every object slot of the located state equals the env's own
    slot of the object of that kind (position, relative, kind, to its bin, sorted), carried objects included."""
    from tinker_deploy.pretrained import default_bundle
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv("sort")
    policy = OnnxPolicy.from_bundle(default_bundle("tinker/ArmSort-v0"))
    seen = SeenPositions()
    located = LocatedObjects(seen, env.obs_terms, **_geometry())
    first = located.first
    states = {"held": 0, "sorted": 0}
    try:
        for seed in (1000, 1001):
            obs, _ = env.reset(seed=seed)
            for _ in range(120):
                t = env.task
                order = [int(np.flatnonzero(t.kinds == k)[0]) for k in range(2)]
                seen.positions = torch.tensor(np.concatenate([t.positions[j] for j in order]),
                                              dtype=torch.float32).unsqueeze(0)
                state = torch.tensor(obs, dtype=torch.float32).unsqueeze(0)
                out = located({"state": state, "image": torch.zeros(1, 8, 16, 3)})[0].numpy()
                for k, j in enumerate(order):
                    ours, env_slot = out[first + 12 * k:first + 12 * (k + 1)], obs[first + 12 * j:first + 12 * (j + 1)]
                    np.testing.assert_allclose(ours, env_slot, atol=1e-5, err_msg=f"seed {seed}, kind {k}")
                np.testing.assert_array_equal(out[:first], obs[:first])
                states["held"] += int(t.held is not None)
                states["sorted"] += int(t.sorted.sum())
                obs, _, term, trunc, _ = env.step(policy(obs))
                if term or trunc:
                    break
    finally:
        env.close()
    assert states["held"] > 10 and states["sorted"] > 10, states  # carried and sorted objects were compared


def test_a_locator_that_does_not_fit_the_sorter_is_refused():
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv("sort")
    try:
        one = SeenPositions()
        one.config = LocatorConfig(prior_rgb=None)
        with pytest.raises(ConfigError, match="finds 1 thing"):
            LocatedObjects(one, env.obs_terms, **_geometry())
        with pytest.raises(ConfigError, match="no \\['obj0_pos'"):
            LocatedObjects(SeenPositions(), [t for t in env.obs_terms if t["name"] != "obj0_pos"], **_geometry())
    finally:
        env.close()
