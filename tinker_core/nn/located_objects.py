"""`LocatedObjects`: a sorter's state observation with every object term computed from the camera (no simulator).

A locator (`tinker_core.nn.locator.TargetLocator` with ``targets`` = the number of kinds) finds one object of
each kind: its i-th thing is the kind-i object, so object slot i is that object and its kind term is the one-hot
of i. An object that is not held rests on the table or a bin's floor, at a height the robot knows (``rest_z``):
a triangulating locator's image points then give its x and y at that height
(`tinker_core.nn.locator.triangulate_at_height`), and only a held object is triangulated freely. A height from
two 64-pixel views is off by a centimetre or more, and the arm, told an object is lower than it is, drives the
suction cup into the table. From the positions and what the robot measures (forward kinematics' ``ee_pos``, the
suction state) it writes each slot's terms as the task defines them (`tinker_sim.tasks.sort.SortTask.observe`):

- ``obj<i>_pos``, ``obj<i>_minus_ee``, ``obj<i>_bin_minus_obj`` (to the resting point in the bin of its kind);
- ``obj<i>_kind``: one-hot of i;
- ``obj<i>_sorted``: the camera sees it inside its bin (within the bin's inner half-width, below its rim) and it
  is not held (suction on with the object within ``held_radius`` of the end effector): the success sensor "an
  object detected in a bin by the camera".

The geometry (bins, rim height) is given by the composition root from the task that owns it; nothing here reads
the simulator. ``value = (raw - offset) * scale``, clipped to +-``bound``, as `tinker_core.loop.observation`.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn as nn

from tinker_core.errors import ConfigError
from tinker_core.loop.observation import ObservationAssembly
from tinker_core.loop.resting_hold import HELD_RADIUS_M
from tinker_core.nn.locator import triangulate, triangulate_at_height

OBJECT_TERMS = ("pos", "minus_ee", "kind", "bin_minus_obj", "sorted")
"""each object slot's terms, in the observation's order"""


class LocatedObjects(nn.Module):
    """``{"image", "state"}`` -> the state with every ``obj<i>_*`` term from ``locator`` (module docstring)."""

    def __init__(self, locator: nn.Module, obs_terms: Sequence[Any], bins: Sequence[Sequence[float]], rest_z: float,
                 bin_inner_half: float, rim_z: float, held_radius: float = HELD_RADIUS_M, bound: float = 10.0):
        """``bins``: per kind, the centre (x, y) of its bin (base frame, m); ``rest_z``: the height of a resting
        object's centre (m; a sorted one rests at its bin's centre at this height); ``bin_inner_half``: the bins'
        inner half-width (m); ``rim_z``: an object whose centre is lower than this is in a bin it is above (m);
        ``held_radius``: a held object's centre is this close to the end effector (m)."""
        super().__init__()
        self.locator = locator
        cfg = locator.config
        kinds = len(bins)
        if cfg.targets != kinds or cfg.target_size != 3 * kinds:
            raise ConfigError(f"LocatedObjects: the locator finds {cfg.targets} thing(s) of "
                              f"{cfg.target_size // max(cfg.targets, 1)} values; the sorter has {kinds} kinds, one "
                              f"3D position each")
        asm = ObservationAssembly(list(obs_terms))
        starts = {n: s.start for n, s in asm.slots.items()}
        sizes = dict(zip(asm.names, asm.sizes))
        want = [f"obj{i}_{t}" for i in range(kinds) for t in OBJECT_TERMS]
        missing = [n for n in want + ["ee_pos", "suction_active"] if n not in starts]
        if missing:
            raise ConfigError(f"LocatedObjects: the observation has no {missing} (its terms: {asm.names}); expected "
                              f"a sorter with {kinds} object slots")
        pos = starts[want[0]]
        for n in want:
            if starts[n] != pos:
                raise ConfigError(f"LocatedObjects: expected the object terms {want} one after another, {n} is at "
                                  f"{starts[n]}, not {pos}")
            pos += sizes[n]
        if sizes["obj0_kind"] != kinds:
            raise ConfigError(f"LocatedObjects: obj0_kind has {sizes['obj0_kind']} values, the sorter {kinds} kinds")
        self.first, self.last, self.kinds, self.bound = starts[want[0]], pos, kinds, float(bound)
        self.ee = starts["ee_pos"]
        self.suction = starts["suction_active"]
        span = slice(self.first, self.last)

        def buf(name: str, value: Any) -> None:
            self.register_buffer(name, torch.as_tensor(value, dtype=torch.float32))

        buf("offset", asm.offset[span])
        buf("scale", asm.scale[span])
        buf("ee_offset", asm.offset[self.ee:self.ee + 3])
        buf("ee_scale", asm.scale[self.ee:self.ee + 3])
        buf("goals", [[float(x), float(y), float(rest_z)] for x, y in bins])
        buf("onehot", torch.eye(kinds))
        self.bin_inner_half, self.rim_z, self.held_radius = float(bin_inner_half), float(rim_z), float(held_radius)
        self.rest_z = float(rest_z)
        self.triangulates = getattr(cfg, "projections", None) is not None

    def raw_objects(self, obs: dict) -> torch.Tensor:
        """The object terms' raw values (B, kinds * 12): positions from the image, the rest derived."""
        state, image = obs["state"], obs["image"]
        b, k = state.shape[0], self.kinds
        if self.triangulates:
            seen, cams = self.locator.image_points(image), self.locator.projections
            free = torch.stack([triangulate(seen[:, :, i], cams) for i in range(k)], dim=1)  # (B, k, 3)
            resting = torch.stack([triangulate_at_height(seen[:, :, i], cams, self.rest_z) for i in range(k)], dim=1)
        else:
            free = resting = self.locator(image)[:, :3 * k].reshape(b, k, 3)
        ee = state[:, self.ee:self.ee + 3] / self.ee_scale + self.ee_offset
        suction = (state[:, self.suction:self.suction + 1] > 0.5).float()  # (B, 1)
        near = (torch.linalg.vector_norm(free - ee.unsqueeze(1), dim=2) < self.held_radius).float()
        held = suction * near  # (B, k)
        found = held.unsqueeze(2) * free + (1.0 - held.unsqueeze(2)) * resting
        inside = ((found[:, :, :2] - self.goals[:, :2]).abs() < self.bin_inner_half).float().amin(dim=2)
        low = (found[:, :, 2] < self.rim_z).float()
        done = inside * low * (1.0 - held)
        parts = [found, found - ee.unsqueeze(1), self.onehot.expand(b, k, k), self.goals - found, done.unsqueeze(2)]
        return torch.cat(parts, dim=2).reshape(b, -1)

    def forward(self, obs: dict) -> torch.Tensor:
        state = obs["state"]
        values = torch.clamp((self.raw_objects(obs) - self.offset) * self.scale, -self.bound, self.bound)
        return torch.cat([state[:, :self.first], values, state[:, self.last:]], dim=1)
