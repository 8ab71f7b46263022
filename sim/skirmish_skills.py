"""Scripted squad skills for `tinker_sim.skirmish.SkirmishEnv`, registered by name for hierarchical policies
(the set ``skirmish``, in this order):

- ``skirmish/attack_nearest``: each unit takes its nearest opponent; out of range it walks to it, in range it
  stands and fires at it;
- ``skirmish/focus_weakest``: each unit fires at the weakest opponent within its range (several units in range
  of the same group concentrate on one target); with none in range it walks to its nearest;
- ``skirmish/retreat``: each unit runs from its nearest opponent (away from the arena's walls near them), not
  firing (moving units cannot);
- ``skirmish/regroup``: each unit walks to the squad's centroid; once within ``REGROUP_RADIUS`` of it, it stands
  and fires at its nearest opponent.

Each is a tensor function of the observation (ONNX-exportable), reading positions from the layout
`tinker_sim.skirmish` declares; dead units' actions are ignored by the env.
"""

from __future__ import annotations

import torch
from torch import nn

from tinker_core.hierarchy.skills import register_skill, register_skill_set
from tinker_sim.skirmish import (
    ACTION_FIELDS, MAX_OPPONENTS, OUT_OF_RANGE, SQUAD_SIZE, UNIT_FIELDS, opponent_offset, unit_offset,
)

UNIT_RANGE = 0.35
"""the env's default ``unit_range`` (the skills assume it)"""
ENGAGE = 0.9 * UNIT_RANGE
"""a unit walks to its target until this close, then stands"""
REGROUP_RADIUS = 0.1
WALL_MARGIN = 0.7
"""retreat: beyond this |x| or |y| a push back towards the middle is added"""

SKILL_NAMES = ("attack_nearest", "focus_weakest", "retreat", "regroup")


class SquadSkill(nn.Module):
    """Shared parsing: unit positions [B, S, 2] and alive, opponent positions [B, M, 2], hp and alive, and the
    unit-opponent distances [B, S, M] (dead opponents at ``OUT_OF_RANGE``)."""

    def parse(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u0, o0 = unit_offset(0), opponent_offset(0)
        units = obs[..., u0:u0 + UNIT_FIELDS * SQUAD_SIZE].reshape(*obs.shape[:-1], SQUAD_SIZE, UNIT_FIELDS)
        opps = obs[..., o0:o0 + UNIT_FIELDS * MAX_OPPONENTS].reshape(*obs.shape[:-1], MAX_OPPONENTS, UNIT_FIELDS)
        upos, opos, ohp, oalive = units[..., 0:2], opps[..., 0:2], opps[..., 2], opps[..., 3]
        dist = torch.sqrt((upos.unsqueeze(-2) - opos.unsqueeze(-3)).square().sum(-1) + 1e-12)
        dist = torch.where(oalive.unsqueeze(-2) > 0.5, dist, torch.full_like(dist, OUT_OF_RANGE))
        return upos, opos, ohp, oalive, dist

    @staticmethod
    def pick(opos: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Opponent positions [B, S, 2] for per-unit opponent indices ``idx`` [B, S]."""
        return opos.gather(-2, idx.unsqueeze(-1).expand(*idx.shape, 2))

    @staticmethod
    def action(v: torch.Tensor, aim: torch.Tensor, fire: torch.Tensor) -> torch.Tensor:
        """[B, S, 2] velocity, [B, S, 2] aim, [B, S, 1] fire -> env action [B, S * 5]."""
        a = torch.cat([v, aim, fire], dim=-1)
        return a.reshape(*a.shape[:-2], SQUAD_SIZE * ACTION_FIELDS)

    @staticmethod
    def engage(upos: torch.Tensor, target: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
        """Walk to ``target`` while farther than ``ENGAGE``, fire at it once within it."""
        d = dist.unsqueeze(-1)
        far = d > ENGAGE
        v = torch.where(far, (target - upos) / d.clamp_min(1e-6), torch.zeros_like(upos))
        return SquadSkill.action(v, target, torch.where(far, -torch.ones_like(d), torch.ones_like(d)))


class AttackNearest(SquadSkill):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        upos, opos, _, _, dist = self.parse(obs)
        d, idx = dist.min(-1)
        return self.engage(upos, self.pick(opos, idx), d)


class FocusWeakest(SquadSkill):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        upos, opos, ohp, _, dist = self.parse(obs)
        d_near, near = dist.min(-1)
        in_range = dist <= UNIT_RANGE
        score = torch.where(in_range, ohp.unsqueeze(-2) + 1e-3 * dist, torch.full_like(dist, OUT_OF_RANGE))
        weak = score.argmin(-1)
        any_in = in_range.any(-1)
        idx = torch.where(any_in, weak, near)
        d = torch.where(any_in, torch.zeros_like(d_near), d_near)  # in range: stand and fire
        return self.engage(upos, self.pick(opos, idx), d)


class Retreat(SquadSkill):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        upos, opos, _, _, dist = self.parse(obs)
        d, idx = dist.min(-1)
        near = self.pick(opos, idx)
        away = (upos - near) / d.unsqueeze(-1).clamp_min(1e-6)
        wall = -torch.sign(upos) * torch.clamp((upos.abs() - WALL_MARGIN) / (1.0 - WALL_MARGIN), 0.0, 1.0)
        v = away + 1.5 * wall
        v = v / torch.sqrt(v.square().sum(-1, keepdim=True) + 1e-12).clamp_min(1e-6)
        return self.action(v, near, -torch.ones_like(d.unsqueeze(-1)))


class Regroup(SquadSkill):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        upos, opos, _, _, dist = self.parse(obs)
        centroid = obs[..., 0:2].unsqueeze(-2)
        err = centroid - upos
        gap = torch.sqrt(err.square().sum(-1, keepdim=True) + 1e-12)
        far = gap > REGROUP_RADIUS
        v = torch.where(far, err / gap.clamp_min(1e-6), torch.zeros_like(err))
        _, idx = dist.min(-1)
        return self.action(v, self.pick(opos, idx), torch.where(far, -torch.ones_like(gap), torch.ones_like(gap)))


_CLASSES = {"attack_nearest": AttackNearest, "focus_weakest": FocusWeakest, "retreat": Retreat, "regroup": Regroup}


def register() -> None:
    names = []
    for name in SKILL_NAMES:
        register_skill(f"skirmish/{name}", _CLASSES[name])
        names.append(f"skirmish/{name}")
    register_skill_set("skirmish", names)
