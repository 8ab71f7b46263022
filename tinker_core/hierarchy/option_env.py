"""`OptionEnv`: an env seen from the high level of a hierarchy over scripted skills (a semi-MDP as a gymnasium
env), so any flat learner trains the high level: one step picks a skill (``Discrete(K)``) and runs it in the
wrapped env for ``max_duration`` steps, or until the episode ends.

The reward of one step is the skill's reward discounted inside it, ``sum_k gamma^k r_k`` (as HPPO's high level
sees it, `tinker_core.hierarchy.smdp`); the learner's own discount must then be ``gamma ** max_duration``, which is
exact when every option lasts ``max_duration`` steps: always, except the one an episode ends in (terminated: no
bootstrap, so no error; truncated: exact when the time limit is a multiple of ``max_duration``).

This is how IMPALA (`tinker_core.algos.impala`) trains a hierarchical policy: its actors step ``OptionEnv``s, and
V-trace corrects the policy lag of the high level's decisions. ``env_steps`` counts the wrapped env's steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from tinker_core.errors import ConfigError
from tinker_core.hierarchy.skills import SkillLibrary, expand_skills


class OptionEnv(gym.Wrapper):
    """The wrapped env with scripted skills as its actions (see the module doc)."""

    def __init__(self, env: gym.Env, skills: list[str], max_duration: int = 8, gamma: float = 0.99):
        super().__init__(env)
        if int(max_duration) < 1:
            raise ConfigError(f"OptionEnv.max_duration: expected >= 1, got {max_duration}")
        if not 0.0 < float(gamma) <= 1.0:
            raise ConfigError(f"OptionEnv.gamma: expected 0 < gamma <= 1, got {gamma}")
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"OptionEnv: needs a flat Box observation (the skills read a vector), got {space}")
        self.skill_names = expand_skills(list(skills), "OptionEnv.skills")
        self.library = SkillLibrary(self.skill_names)
        self.max_duration, self.gamma = int(max_duration), float(gamma)
        self.action_space = gym.spaces.Discrete(len(self.skill_names))
        self.env_steps = 0
        """steps of the wrapped env since this wrapper was made"""
        self._obs: np.ndarray | None = None

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        option = int(np.asarray(action).reshape(()))
        if not 0 <= option < len(self.skill_names):
            raise ConfigError(f"OptionEnv.step: expected a skill index 0..{len(self.skill_names) - 1}, got {option}")
        if self._obs is None:
            raise ConfigError("OptionEnv.step: call reset() first")
        total, disc = 0.0, 1.0
        obs, term, trunc, info = self._obs, False, False, {}
        opt = torch.tensor([option])
        k = 0
        for k in range(1, self.max_duration + 1):
            with torch.no_grad():
                a = self.library(torch.as_tensor(np.asarray(obs, np.float32))[None], opt)[0].numpy()
            obs, r, term, trunc, info = self.env.step(a)
            self.env_steps += 1
            total += disc * float(r)
            disc *= self.gamma
            if term or trunc:
                break
        self._obs = obs
        return obs, total, bool(term), bool(trunc), {**info, "duration": k, "option": self.skill_names[option]}
