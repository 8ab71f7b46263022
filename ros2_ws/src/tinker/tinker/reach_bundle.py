"""A hand-built reaching policy for ArmReach, exported as a real deploy bundle (perception + actor).

For the ROS 2 tests, the control-loop benchmark and smoke runs where no trained checkpoint exists.
Perception: a small CNN on the camera image plus the state vector, ``features = [state, tanh(cnn(image))]``;
actor: a linear map from the state's ``target_minus_ee`` term through the pseudo-inverse of the arm's
Jacobian at its home pose (a linearized inverse-kinematics controller), so the arm really moves
toward its target. Exported with `tinker_deploy.export.export_bundle` (checks, parity, manifest with the
sim env's own obs terms, joint names, action chain and control period). Needs the training install (torch).

Channels (``says``/``hears``, `tinker_core.multiagent.channels.ChannelSpec`): a robot that hears a channel has
a ``channel/NAME`` observation term per channel after the env's own (as the in-process `Channels` wrapper
builds its observation), passed through into the features; a sender's actor outputs its joint action and then
a message, ``tanh`` of a fixed random map of the features (so it changes with the robot's state), with a
``channel/NAME`` action term. Hand-built, not trained: what the graph must carry, not what to say.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

N_IMAGE_FEATURES = 8


def _jacobian_pinv(env) -> np.ndarray:
    """(dof, 3) pseudo-inverse of the end-effector position Jacobian at the home pose (finite differences)."""
    robot = env.robot
    q0 = robot.home.copy()
    robot.reset_joints(q0)
    e0 = robot.ee_position()
    jac = np.zeros((3, robot.dof))
    for i in range(robot.dof):
        q = q0.copy()
        q[i] += 1e-4
        robot.reset_joints(q)
        jac[:, i] = (robot.ee_position() - e0) / 1e-4
    robot.reset_joints(q0)
    return np.linalg.pinv(jac)


def build_reach_bundle(out: str | os.PathLike, image_size: int = 64, gain: float = 0.5, policy_version: int = 1,
                       control_period: float = 0.05, seed: int = 0, camera: bool = True, log=lambda s: None,
                       says=None, hears=()) -> Path:
    """Export the bundle to directory ``out``; ``gain`` scales the actor (a different gain = a new actor,
    same perception: what an online fine-tuning update looks like). ``camera=False``: state-only
    observation (the perception part is an MLP on the state), for robots run without the camera."""
    import torch
    from torch import nn

    from tinker_deploy.export import export_bundle
    from tinker_sim.arm_env import ArmEnv
    from tinker_core.spec import DictSpec, Spec

    env = ArmEnv(task="reach", camera=camera, image_size=image_size, control_period=control_period)
    try:
        env.reset(seed=seed)
        terms = list(env.obs_terms) + [ch.term_record() for ch in hears]
        sizes = [t["size"] for t in terms]
        starts = np.cumsum([0] + sizes)
        k = [t["name"] for t in terms].index("target_minus_ee")
        tme = slice(int(starts[k]), int(starts[k + 1]))
        tme_scale = np.asarray(terms[k]["scale"], dtype=np.float64)
        n_state = int(starts[-1])
        pinv = _jacobian_pinv(env)
        chain = env.action_chain_config
        dof = env.robot.dof
        obs_spec = DictSpec({"image": Spec((image_size, image_size, 3), "uint8", 0, 255),
                             "state": Spec((n_state,), "float32")}) if camera else Spec((n_state,), "float32")
        feature_spec = Spec((n_state + N_IMAGE_FEATURES,), "float32")
        n_msg = says.size if says is not None else 0
        action_spec = Spec((dof + n_msg,), "float32", -1.0, 1.0)
        action_terms = list(env.action_terms) + ([says.term_record()] if says is not None else [])
        metadata = {
            "obs_spec": obs_spec, "action_spec": action_spec, "feature_spec": feature_spec,
            "obs_terms": terms, "action_terms": action_terms, "joint_names": env.joint_names,
            "action_chain_config": chain, "control_period": env.control_period, "env_id": "tinker/ArmReach-v0",
        }
        # action (normalized) a -> delta q = a * scale * max_delta; want delta q = gain * pinv @ (target - ee)
        w = np.zeros((dof, n_state + N_IMAGE_FEATURES))
        w[:, tme] = gain * pinv / tme_scale[None, :] / (chain.scale * chain.max_delta)
    finally:
        env.close()

    torch.manual_seed(seed)

    class Perception(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, N_IMAGE_FEATURES))

        def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
            x = image.permute(0, 3, 1, 2).float() / 255.0
            return torch.cat([state, torch.tanh(self.conv(x))], dim=-1)

    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(n_state + N_IMAGE_FEATURES, dof, bias=False)
            with torch.no_grad():
                self.lin.weight.copy_(torch.as_tensor(w, dtype=torch.float32))
            self.say = nn.Linear(n_state + N_IMAGE_FEATURES, n_msg) if n_msg else None

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            act = torch.clamp(self.lin(features), -1.0, 1.0)
            return act if self.say is None else torch.cat([act, torch.tanh(self.say(features))], dim=-1)

    class Dict2Args(nn.Module):
        """export passes dict observations as a dict: unpack them by name."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, obs):
            return self.inner(obs["image"], obs["state"])

    class StatePerception(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(n_state, N_IMAGE_FEATURES)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.cat([obs, torch.tanh(self.lin(obs))], dim=-1)

    perception = Dict2Args(Perception()) if camera else StatePerception()
    parts = {"perception": perception.eval(), "actor": Actor().eval()}
    return export_bundle(parts, metadata, out, policy_version=policy_version, log=log)
