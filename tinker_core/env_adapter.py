"""`EnvModule`: a gymnasium environment as a pipeline module (input: action, output: observation)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_core.module import ModuleBase
from tinker_core.spec import spec_from_space


class EnvModule(ModuleBase):
    """Wraps a ``gymnasium.Env``; its specs come from the env's spaces."""

    input_name = "action"
    output_name = "obs"

    def __init__(self, env: Any, name: str = "env"):
        super().__init__()
        self.env = env
        self.name = name
        self.input_spec = spec_from_space(env.action_space)
        self.output_spec = spec_from_space(env.observation_space)

    def reset_env(self, seed: int | None = None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        if self.input_spec is not None and self.input_spec.shape == () and isinstance(action, np.ndarray):
            action = action.item()
        return self.env.step(action)

    def forward(self, action: np.ndarray) -> Any:
        return self.step(action)[0]

    def close(self) -> None:
        self.env.close()
