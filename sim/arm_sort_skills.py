"""Scripted skills for ArmSort (`tinker_sim.tasks.sort`, ``max_objects=SLOTS``), registered by name for hierarchical
policies, like the planar ones:

- ``arm_sort/reach_i`` (i < SLOTS): bring the suction cup onto object slot i with suction on (it grips on contact):
  lift first when low and elsewhere, move above the object at ``HOVER_Z``, then descend onto it;
- ``arm_sort/carry_to_bin_k`` (k < NUM_KINDS): lift straight up, move above bin k at ``HOVER_Z``, release over the
  quadrant of the bin farthest from the objects already in it.

The set ``arm_sort`` is all of them, reaches first. They do what `tinker_sim.scripted.ScriptedSortController` does,
one sub-task each, but memoryless (every choice is read from the observation) and as tensor operations only: the
inverse kinematics is one damped-least-squares step per cycle on the URDF's forward kinematics, written in torch
(no PyBullet), so the skills export into the low level's ONNX graph and the deployed runtime
(`tinker_deploy.hierarchy_runtime`) runs them on onnxruntime, without torch or numpy skill code on the robot.
The layout they read (term offsets and scales, joint limits, the action chain's step) is the default ArmSort's with
``max_objects=SLOTS``: build the env with ``task_kwargs={"max_objects": SLOTS}``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from tinker_core.errors import ConfigError
from tinker_core.hierarchy.skills import register_skill, register_skill_set
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_sim.tasks.sort import BIN_CENTERS, NUM_KINDS, TABLE_TOP

SLOTS = 3
"""object slots of the ArmSort observation the skills read (a curriculum moves num_objects within 1..SLOTS)"""
HOVER_Z = 0.27
"""end-effector link height while moving between places, m (as the scripted controller)"""
TOOL_LENGTH = 0.045
"""distance from the end-effector link frame to the suction face, m: the descent aims the face at the object's top
(1 cm lower, as the scripted controller, pressed the arm into the table's safety margin)"""
ABOVE_XY = 0.01
"""within this xy distance of an object the end effector is above it and descends, m (at 2 cm it came down beside
the object's edge, into the SafetyWrapper's margin around the table)"""
RELEASE_XY = 0.01
"""within this xy distance of its release spot the carried object is released, m (at 3 cm the release near the walls
entered the SafetyWrapper's margin around them)"""
SPOT_OFFSET = 0.04
"""the release spots: a bin's four quadrant centres, this far from its centre in x and y, m (4 cm from each wall:
an object's half size is 2.5 cm). Released over the bin's centre, a second object of the same kind landed on the
first and stayed stacked, not sorted: all 13 objects the scripted high level left unsorted at 3 objects (20
episodes); the carry now releases over the spot farthest from the objects already there."""

LOW_MARGIN = 0.05
"""below HOVER_Z - LOW_MARGIN the end effector is low: it lifts before moving sideways, m"""
DAMPING = 0.05
"""damped least squares: lambda of (J J^T + lambda^2 I)"""
ORIENTATION_GAIN = 1.0
"""weight of the tilt error (the suction face kept pointing down) against the position error"""
DESCENT_STEP = 0.03
"""the descent onto an object aims at most this far below the end effector per cycle, m: the position motors lag
the command, and a full step overshoots by centimetres, into the SafetyWrapper's margin around the table"""


@lru_cache(maxsize=4)
def arm_sort_layout(slots: int = SLOTS) -> dict[str, Any]:
    """Where the skills read each term: ``{name: (start, scale, offset)}``, and the arm's facts (built once from the
    env itself, so the skills and the env cannot disagree)."""
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv(task="sort", task_kwargs={"num_objects": 1, "max_objects": slots})
    try:
        terms, i = {}, 0
        for t in env.obs_terms:
            terms[t["name"]] = (i, np.asarray(t["scale"], np.float32), np.asarray(t["offset"], np.float32))
            i += t["size"]
        c = env.action_chain_config
        if c.mode != "delta":
            raise ConfigError(f"arm_sort skills: expected action_chain mode 'delta', got {c.mode!r}")
        return {"terms": terms, "obs_dim": i, "dof": env.robot.dof, "step_rad": float(c.max_delta * c.scale),
                "urdf": str(env.robot.urdf_path), "joint_names": list(env.joint_names),
                "n_act": int(env.action_space.shape[0])}
    finally:
        env.close()


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a x b on the last axis (written out: exports to every ONNX opset)."""
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    return torch.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], dim=-1)


def spd_solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x with a x = b for symmetric positive definite a [B, n, n], b [B, n]: Cholesky unrolled over the fixed n
    (plain tensor ops, ONNX-exportable)."""
    n = a.shape[-1]
    low: list[list[torch.Tensor]] = [[None] * n for _ in range(n)]  # type: ignore[list-item]
    for i in range(n):
        for j in range(i + 1):
            s = a[..., i, j]
            for k in range(j):
                s = s - low[i][k] * low[j][k]
            low[i][j] = torch.sqrt(torch.clamp(s, min=1e-12)) if i == j else s / low[j][j]
    y: list[torch.Tensor] = []
    for i in range(n):  # L y = b
        s = b[..., i]
        for k in range(i):
            s = s - low[i][k] * y[k]
        y.append(s / low[i][i])
    x: list[torch.Tensor] = [None] * n  # type: ignore[list-item]
    for i in reversed(range(n)):  # L^T x = y
        s = y[i]
        for k in range(i + 1, n):
            s = s - low[k][i] * x[k]
        x[i] = s / low[i][i]
    return torch.stack(x, dim=-1)


class ArmSortSkill(nn.Module):
    """Base: decode the observation, plan ``(ee goal [B, 3], suction [B, 1])`` (`plan`), and turn the goal into the
    delta joint action of one damped-least-squares IK step (position and a downward suction face), scaled as a
    whole into [-1, 1] (the direction kept) (`control`)."""

    controller_id = "arm_sort/dls_ik"
    """skills with one controller_id share `control` (`tinker_core.hierarchy.skills.SkillLibrary` runs it once)"""

    def __init__(self, slots: int = SLOTS):
        super().__init__()
        lay = arm_sort_layout(slots)
        self.terms = lay["terms"]
        self.dof, self.step_rad, self.n_act = lay["dof"], lay["step_rad"], lay["n_act"]
        fk = ForwardKinematics.from_urdf(lay["urdf"], lay["joint_names"])
        steps = fk._steps  # (origin rotation, origin translation, axis, K, K^2, prismatic, index into q or -1)
        if any(s[5] for s in steps):
            raise ConfigError("arm_sort skills: prismatic joints are not supported")
        self.chain = [int(s[6]) for s in steps]
        self.register_buffer("r0", torch.as_tensor(np.stack([s[0] for s in steps]), dtype=torch.float32))
        self.register_buffer("t0", torch.as_tensor(np.stack([s[1] for s in steps]), dtype=torch.float32))
        self.register_buffer("axis", torch.as_tensor(np.stack([s[2] for s in steps]), dtype=torch.float32))
        self.register_buffer("k1", torch.as_tensor(np.stack([s[3] for s in steps]), dtype=torch.float32))
        self.register_buffer("k2", torch.as_tensor(np.stack([s[4] for s in steps]), dtype=torch.float32))
        for name, (_, scale, offset) in self.terms.items():
            self.register_buffer(f"scale_{name}", torch.as_tensor(scale))
            self.register_buffer(f"offset_{name}", torch.as_tensor(offset))

    def term(self, obs: torch.Tensor, name: str) -> torch.Tensor:
        start = self.terms[name][0]
        scale = getattr(self, f"scale_{name}")
        return obs[..., start:start + scale.shape[0]] / scale + getattr(self, f"offset_{name}")

    def kinematics(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ee position [B, 3], ee z axis [B, 3], Jacobian rows [B, 5, dof]: position, then world x/y rotation)."""
        rot = torch.eye(3) + torch.zeros_like(q[:, :1]).unsqueeze(-1)  # [B, 3, 3]
        pos = torch.zeros_like(q[:, :3])
        eye = torch.eye(3)
        origins, axes = [], []
        s, c = torch.sin(q), torch.cos(q)
        for n, i in enumerate(self.chain):
            pos = pos + torch.matmul(rot, self.t0[n])
            rot = torch.matmul(rot, self.r0[n])
            if i < 0:
                continue
            origins.append(pos)
            axes.append(torch.matmul(rot, self.axis[n]))
            rod = eye + s[:, i, None, None] * self.k1[n] + (1.0 - c[:, i, None, None]) * self.k2[n]
            rot = torch.matmul(rot, rod)
        cols_p = [_cross(w, pos - o) for w, o in zip(axes, origins)]
        jac = torch.cat([torch.stack(cols_p, dim=-1), torch.stack(axes, dim=-1)[:, 0:2, :]], dim=1)
        return pos, rot[:, :, 2], jac

    def target(self, obs: torch.Tensor, ee: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(end-effector goal [B, 3] in the base frame, suction [B, 1] in {-1, 1}) for this observation."""
        raise NotImplementedError

    def plan(self, obs: torch.Tensor) -> torch.Tensor:
        """``goal ⊕ suction`` [B, 4]: what this skill wants (the ee read from the observation)."""
        goal, suction = self.target(obs, self.term(obs, "ee_pos"))
        return torch.cat([goal, suction], dim=-1)

    def control(self, obs: torch.Tensor, plan: torch.Tensor) -> torch.Tensor:
        """The env action reaching ``plan`` (one IK step); the same for every arm-sort skill (``controller_id``), so a
        `SkillLibrary` of them picks the plan first and runs this once."""
        q = self.term(obs, "joint_pos")
        ee, z_axis, jac = self.kinematics(q)
        goal, suction = plan[:, 0:3], plan[:, 3:4]
        tilt = torch.stack([-z_axis[:, 1], z_axis[:, 0]], dim=-1)  # (z_ee x -z)_xy: rotate the face down
        err = torch.cat([goal - ee, ORIENTATION_GAIN * tilt], dim=-1)
        jjt = torch.matmul(jac, jac.transpose(1, 2)) + (DAMPING ** 2) * torch.eye(5)
        dq = torch.matmul(jac.transpose(1, 2), spd_solve(jjt, err).unsqueeze(-1)).squeeze(-1)
        a = dq / self.step_rad
        a = a / torch.clamp(a.abs().amax(dim=-1, keepdim=True), min=1.0)
        pad = self.n_act - self.dof - 1
        parts = [a] + ([torch.zeros_like(a[:, :pad])] if pad > 0 else []) + [suction]
        return torch.cat(parts, dim=-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.control(obs, self.plan(obs))

    @staticmethod
    def _at(xy: torch.Tensor, z: float | torch.Tensor) -> torch.Tensor:
        z = z if isinstance(z, torch.Tensor) else torch.full_like(xy[:, :1], z)
        return torch.cat([xy, z], dim=-1)


def _xy_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((a[:, 0:2] - b[:, 0:2]).square().sum(-1, keepdim=True))


class ReachObject(ArmSortSkill):
    """Onto object slot ``slot`` with suction on (see the module doc)."""

    def __init__(self, slot: int, slots: int = SLOTS):
        super().__init__(slots)
        if not 0 <= slot < slots:
            raise ConfigError(f"arm_sort/reach: expected a slot 0..{slots - 1}, got {slot}")
        self.name_pos = f"obj{slot}_pos"

    def target(self, obs: torch.Tensor, ee: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obj = self.term(obs, self.name_pos)
        holding = self.term(obs, "suction_active") > 0.5
        above = _xy_dist(ee, obj) < ABOVE_XY
        low = ee[:, 2:3] < HOVER_Z - LOW_MARGIN
        half = obj[:, 2:3] - TABLE_TOP  # the object's half height above the table top
        grip_z = torch.maximum(obj[:, 2:3] + half + TOOL_LENGTH, ee[:, 2:3] - DESCENT_STEP)
        grip = self._at(obj[:, 0:2], grip_z)
        lift = self._at(ee[:, 0:2], HOVER_Z)
        hover = self._at(obj[:, 0:2], HOVER_Z)
        goal = torch.where(above, grip, torch.where(low, lift, hover))
        on = above | holding
        return goal, torch.where(on, torch.ones_like(half), -torch.ones_like(half))


class CarryToBin(ArmSortSkill):
    """To bin ``kind`` at HOVER_Z, suction on, released once above the free spot (see the module doc)."""

    def __init__(self, kind: int, slots: int = SLOTS):
        super().__init__(slots)
        if not 0 <= kind < NUM_KINDS:
            raise ConfigError(f"arm_sort/carry_to_bin: expected a kind 0..{NUM_KINDS - 1}, got {kind}")
        self.slots = slots
        corners = np.array([[sx, sy] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)]) * SPOT_OFFSET
        self.register_buffer("spots", torch.as_tensor(BIN_CENTERS[kind] + corners, dtype=torch.float32))  # [4, 2]

    def release_spot(self, obs: torch.Tensor, ee: torch.Tensor) -> torch.Tensor:
        """[B, 2]: the spot whose nearest object is farthest away, leaving out the carried object (the one nearest
        the end effector while the suction holds) and absent slots (no kind); the others do not move during a carry,
        so the choice holds for the whole carry (ties go to the first spot)."""
        objs = torch.stack([self.term(obs, f"obj{i}_pos") for i in range(self.slots)], dim=1)  # [B, S, 3]
        present = torch.stack([self.term(obs, f"obj{i}_kind").sum(-1) > 0.5 for i in range(self.slots)], dim=1)
        near = (objs - ee[:, None, :]).square().sum(-1)  # [B, S]; an absent slot reads as the workspace centre
        near = torch.where(present, near, torch.full_like(near, 1e6))
        nearest = near == near.amin(dim=1, keepdim=True)
        holding = self.term(obs, "suction_active") > 0.5  # [B, 1]
        ignore = (~present) | (nearest & holding)  # [B, S]
        gap = (self.spots[None, None, :, :] - objs[:, :, None, 0:2]).square().sum(-1)  # [B, S, 4]
        gap = torch.where(ignore[:, :, None], torch.full_like(gap, 1e6), gap).amin(dim=1)  # [B, 4]
        best = gap.argmax(dim=-1, keepdim=True)  # [B, 1]
        return torch.cat([self.spots[:, 0][best], self.spots[:, 1][best]], dim=-1)

    def target(self, obs: torch.Tensor, ee: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bin_xy = self.release_spot(obs, ee)
        d = _xy_dist(ee, bin_xy)
        above = d < RELEASE_XY
        low = ee[:, 2:3] < HOVER_Z - LOW_MARGIN
        goal = torch.where(low & ~above, self._at(ee[:, 0:2], HOVER_Z), self._at(bin_xy, HOVER_Z))
        return goal, torch.where(above, -torch.ones_like(d), torch.ones_like(d))


def register() -> None:
    names = []
    for i in range(SLOTS):
        register_skill(f"arm_sort/reach_{i}", lambda i=i: ReachObject(i))
        names.append(f"arm_sort/reach_{i}")
    for k in range(NUM_KINDS):
        register_skill(f"arm_sort/carry_to_bin_{k}", lambda k=k: CarryToBin(k))
        names.append(f"arm_sort/carry_to_bin_{k}")
    register_skill_set("arm_sort", names)
