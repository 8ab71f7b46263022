"""Shared pieces for the tinker_core tests: real modules (a torch MLP policy, a normalizing perception
module, a learner that keeps every transition) and a Pendulum-v1 environment."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from tinker_core.module import ModuleBase
from tinker_core.spec import Spec
from tinker_core.torch_module import TorchModule
from tinker_core.transition import Transition, TransitionSpec

PENDULUM_OBS = Spec((3,), "float32", [-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
PENDULUM_ACT = Spec((1,), "float32", -2.0, 2.0)
FEATURES = Spec((3,), "float32")


@dataclass
class MLPConfig:
    hidden: int = 16
    """width of the hidden layer"""
    seed: int = 0
    """torch seed for the initial weights"""
    max_action: float = 2.0
    """the tanh output is scaled to [-max_action, max_action]"""


class MLPPolicy(TorchModule[MLPConfig]):
    """A small deterministic policy: features float32[n] -> action float32[1] in [-2, 2]."""

    config_class = MLPConfig
    input_name, output_name = "obs", "action"

    def __init__(self, config: MLPConfig | None = None, in_spec: Spec = FEATURES, out_dim: int = 1):
        super().__init__(config)
        torch.manual_seed(self.config.seed)
        self.net = nn.Sequential(nn.Linear(in_spec.shape[0], self.config.hidden), nn.Tanh(),
                                 nn.Linear(self.config.hidden, out_dim), nn.Tanh())
        m = self.config.max_action
        self.input_spec = in_spec
        self.output_spec = Spec((out_dim,), "float32", -m, m)
        self.calls = 0

    @torch.no_grad()
    def forward(self, x: np.ndarray) -> np.ndarray:
        self.calls += 1
        y = self.net(torch.from_numpy(np.asarray(x, dtype=np.float32)))
        return (y * self.config.max_action).numpy()


@dataclass
class ScaleConfig:
    scale: float = 0.5
    """every feature is multiplied by this"""


class Normalize(ModuleBase[ScaleConfig]):
    """Perception stand-in that does real work: scales Pendulum observations into features."""

    config_class = ScaleConfig
    input_name, output_name = "obs", "features"

    def __init__(self, config: ScaleConfig | None = None):
        super().__init__(config)
        self.input_spec = PENDULUM_OBS
        self.output_spec = FEATURES

    def forward(self, x: np.ndarray) -> np.ndarray:
        return (x * np.float32(self.config.scale)).astype(np.float32)


class KeepLearner(ModuleBase):
    """A learner that stores every transition it receives and counts them (its state is the count)."""

    input_name = "transition"

    def __init__(self, obs: Spec = PENDULUM_OBS, action: Spec = PENDULUM_ACT):
        super().__init__()
        self.input_spec = TransitionSpec(obs, action)
        self.seen: list[Transition] = []

    def forward(self, t: Transition) -> dict:
        self.seen.append(t)
        return {"count": len(self.seen)}

    def get_state(self) -> dict[str, np.ndarray]:
        return {"count": np.array([len(self.seen)], dtype=np.int64)}

    def set_state(self, state) -> None:
        self.loaded_count = int(state["count"][0])


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env
    env.close()


@pytest.fixture(scope="session")
def parts():
    """The test modules and specs above (test files cannot import conftest under importlib mode)."""
    import types

    torch.set_num_threads(1)
    return types.SimpleNamespace(MLPPolicy=MLPPolicy, MLPConfig=MLPConfig, Normalize=Normalize,
                                 ScaleConfig=ScaleConfig, KeepLearner=KeepLearner, OBS=PENDULUM_OBS,
                                 ACT=PENDULUM_ACT, FEATURES=FEATURES)


SORT_REST_Z = 0.075
"""ArmSort: the table top plus half an object (where a resting object's centre is)"""


@pytest.fixture(scope="session")
def sort_geometry():
    """The simulated camera's nominal two views, the sorter's resting height and bins' inner half-width, as a sort
    bundle records them (`RestingGeometry`)."""
    from tinker_core.loop.resting_geometry import RestingGeometry
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv("sort", camera=True, image_size=64, camera_views=2)
    try:
        projections = env.camera.projections(env.robot.base_position)
    finally:
        env.close()
    return RestingGeometry.from_dict({"projections": projections, "rest_z": SORT_REST_Z, "bin_inner_half": 0.08})
