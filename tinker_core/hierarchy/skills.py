"""Scripted skills registered by name, usable as the low-level options of a hierarchical policy.

A skill is a torch module ``obs [B, D] -> env action [B, A]`` written with tensor operations only (no
Python branching on values), so it exports to ONNX like a learned policy. A package registers its skills
when imported (``import tinker_sim`` registers ``planar_sort/reach_0`` ... and the set ``planar_sort``);
``register_skill_set`` names a list of skills that a config can ask for by one name.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from tinker_core.errors import ConfigError

_SKILLS: dict[str, Callable[[], nn.Module]] = {}
_SETS: dict[str, list[str]] = {}


def register_skill(name: str, factory: Callable[[], nn.Module]) -> None:
    """Register ``factory`` (called with no arguments, returns the skill module) under ``name``."""
    if not name or not isinstance(name, str):
        raise ConfigError(f"register_skill: expected a non-empty name, got {name!r}")
    _SKILLS[name] = factory


def register_skill_set(name: str, skills: list[str]) -> None:
    """Name an ordered list of registered skills (a config's ``skills: [NAME]`` expands to it)."""
    unknown = [s for s in skills if s not in _SKILLS]
    if unknown:
        raise ConfigError(f"register_skill_set({name!r}): unknown skills {unknown}")
    _SETS[name] = list(skills)


def registered_skills() -> list[str]:
    return sorted(_SKILLS) + sorted(f"{s} (set)" for s in _SETS)


def expand_skills(names: list[str], where: str = "skills") -> list[str]:
    """Skill names with set names replaced by their members, in order; unknown names are an error."""
    out: list[str] = []
    for i, n in enumerate(names):
        if n in _SETS:
            out += _SETS[n]
        elif n in _SKILLS:
            out.append(n)
        else:
            raise ConfigError(f"{where}[{i}]: unknown skill {n!r}; registered: {registered_skills()} (skills register "
                              "when their package is imported, e.g. import tinker_sim)")
    return out


def make_skill(name: str) -> nn.Module:
    if name not in _SKILLS:
        raise ConfigError(f"skill {name!r} is not registered; registered: {registered_skills()}")
    return _SKILLS[name]()


class SkillLibrary(nn.Module):
    """K scripted skills as one low level: ``(obs [B, D], option [B]) -> action [B, A]``. Every skill runs on the
    batch and the option picks each row's action (a gather, so the graph has no data-dependent branches).

    Skills that share a controller (each has ``plan(obs) -> [B, P]``, ``control(obs, plan) -> action`` and the same
    ``controller_id``; ``forward`` is ``control(obs, plan(obs))``) run their plans, the option picks one, and the
    controller runs once: the same actions, and the exported graph holds the controller once, not K times."""

    def __init__(self, names: list[str]):
        super().__init__()
        if not names:
            raise ConfigError("SkillLibrary: expected at least one skill, got []")
        self.names = list(names)
        self.skills = nn.ModuleList([make_skill(n) for n in self.names])
        for p in self.parameters():
            p.requires_grad_(False)
        ids = {getattr(s, "controller_id", None) for s in self.skills}
        self.shared_control = len(ids) == 1 and None not in ids

    def forward(self, obs: torch.Tensor, option: torch.Tensor) -> torch.Tensor:
        if self.shared_control:
            plans = torch.stack([s.plan(obs) for s in self.skills], dim=1)  # [B, K, P]
            idx = option.long().reshape(-1, 1, 1).expand(-1, 1, plans.shape[-1])
            return self.skills[0].control(obs, plans.gather(1, idx).squeeze(1))
        acts = torch.stack([s(obs) for s in self.skills], dim=1)  # [B, K, A]
        idx = option.long().reshape(-1, 1, 1).expand(-1, 1, acts.shape[-1])
        return acts.gather(1, idx).squeeze(1)
