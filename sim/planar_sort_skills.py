"""Scripted skills for `tinker_sim.planar_sort.PlanarSortEnv`, registered by name for hierarchical policies:

- ``planar_sort/reach_i`` (i < MAX_OBJECTS): move the gripper to object slot i with suction on (picks it on
  arrival; does nothing useful when the slot is empty or sorted, which the high level must learn);
- ``planar_sort/carry_to_bin_k`` (k < NUM_KINDS): move to bin k with suction on and release once over it.

The set ``planar_sort`` is all of them, reaches first. Each is a tensor function of the observation (ONNX-
exportable), reading positions from the observation layout `planar_sort` declares.
"""

from __future__ import annotations

import torch
from torch import nn

from tinker_core.hierarchy.skills import register_skill, register_skill_set
from tinker_sim.planar_sort import BIN_CENTERS, MAX_OBJECTS, NUM_KINDS, slot_offset

RELEASE_RADIUS = 0.05
"""carry: suction turns off within this distance of the bin centre"""
GAIN = 1.0 / 0.2
"""velocity command per metre of error (full speed beyond one step's reach at nominal speed 0.2)"""


class MoveTo(nn.Module):
    """Drive the gripper (obs[0:2]) towards a target with suction on, or off once within ``release_radius``
    (``release_radius`` < 0: never off)."""

    def __init__(self, release_radius: float):
        super().__init__()
        self.release_radius = float(release_radius)

    def target(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        err = self.target(obs) - obs[..., 0:2]
        v = torch.clamp(err * GAIN, -1.0, 1.0)
        dist = torch.sqrt(err.square().sum(-1, keepdim=True))
        suction = torch.where(dist < self.release_radius, -torch.ones_like(dist), torch.ones_like(dist))
        return torch.cat([v, suction], dim=-1)


class ReachObject(MoveTo):
    def __init__(self, slot: int):
        super().__init__(-1.0)
        self.k = slot_offset(slot)

    def target(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., self.k:self.k + 2]


class CarryToBin(MoveTo):
    def __init__(self, kind: int):
        super().__init__(RELEASE_RADIUS)
        self.register_buffer("bin", torch.as_tensor(BIN_CENTERS[kind], dtype=torch.float32))

    def target(self, obs: torch.Tensor) -> torch.Tensor:
        return self.bin.expand(obs.shape[:-1] + (2,))


def register() -> None:
    names = []
    for i in range(MAX_OBJECTS):
        register_skill(f"planar_sort/reach_{i}", lambda i=i: ReachObject(i))
        names.append(f"planar_sort/reach_{i}")
    for k in range(NUM_KINDS):
        register_skill(f"planar_sort/carry_to_bin_{k}", lambda k=k: CarryToBin(k))
        names.append(f"planar_sort/carry_to_bin_{k}")
    register_skill_set("planar_sort", names)
