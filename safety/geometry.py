"""`GeometryGuard`: the end-effector workspace box and the collision prediction for one commanded step.

Both run on a private PyBullet client (`tinker_safety.kinematics.RobotModel`). A step whose end effector would leave
the box is shortened along its segment (bisection) to the edge; if the robot is already outside, a step may not
take it further out. A step that would bring two links, or a link and the known scene, closer than
``collision_margin`` is reported (the wrapper holds and latches the e-stop); where the robot already is within
the margin, a step that does not reduce its clearance is allowed, so it can move away.
"""

from __future__ import annotations

import math

import numpy as np

from tinker_safety.config import SafetyConfig
from tinker_safety.limits import JointLimits
from tinker_safety.status import Outcome, SafetyStatus
from tinker_core.errors import ConfigError

__all__ = ["GeometryGuard"]

_BISECTION_STEPS = 10


class GeometryGuard:
    """Workspace box and collision checks of one robot (either may be disabled in the config)."""

    def __init__(self, limits: JointLimits, config: SafetyConfig):
        c = self.config = config
        if not limits.urdf_path:
            raise ConfigError("SafetyWrapper: the workspace box and the collision check need the robot's URDF; "
                              "build with SafetyWrapper.from_urdf(path) or disable both in the SafetyConfig")
        from tinker_safety.kinematics import RobotModel

        self.model = RobotModel(limits.urdf_path, limits.names, c.ee_link, c.scene if c.collision_check else (),
                                c.self_collision_ignore)
        self.ws_min = self.ws_max = None
        if c.workspace_enabled:
            self.ws_min, self.ws_max = tuple(c.workspace_min), tuple(c.workspace_max)

    def keep_in_workspace(self, q: np.ndarray, cmd: np.ndarray, status: SafetyStatus) -> tuple[np.ndarray, bool]:
        """``(command, shortened)``: the step shortened along its segment until the end effector is inside the box."""
        if self.ws_min is None:
            return cmd, False
        model = self.model
        end = model.ee_position(cmd)
        out = self._outside(end)
        if out == 0.0:
            return cmd, False
        allowed = self._outside(model.ee_position(q)) + 1e-9
        if out <= allowed:
            return cmd, False
        delta = cmd - q
        ok, bad = 0.0, 1.0
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (ok + bad)
            if self._outside(model.ee_position(q + mid * delta)) <= allowed:
                ok = mid
            else:
                bad = mid
        status.add(Outcome.WORKSPACE, f"end effector would reach ({end[0]:.3f}, {end[1]:.3f}, {end[2]:.3f}) m, "
                                      f"{out:.3f} m outside the workspace box {list(self.ws_min)}..{list(self.ws_max)} m; "
                                      f"step shortened to {ok:.3f} of its length")
        # between q and cmd on every joint, so every limit cmd met still holds (rounding included)
        return np.clip(q + ok * delta, np.minimum(q, cmd), np.maximum(q, cmd)), True

    def _outside(self, p: np.ndarray) -> float:
        """Distance from point ``p`` to the workspace box, m (0 inside)."""
        s = 0.0
        for x, lo, hi in zip(p.tolist(), self.ws_min, self.ws_max):
            d = lo - x if x < lo else (x - hi if x > hi else 0.0)
            s += d * d
        return math.sqrt(s)

    def predict_collision(self, q: np.ndarray, cmd: np.ndarray) -> str:
        """A reason if the step from ``q`` to ``cmd`` comes closer than the margin to contact, else ''.

        Checks the end of the step first, then points along it no more than ``collision_step`` apart.
        """
        c = self.config
        if not c.collision_check:
            return ""
        model = self.model
        delta = cmd - q
        n = max(1, math.ceil(float(np.abs(delta).max()) / c.collision_step))
        now, now_known = None, False  # clearance at q, computed only if needed
        for k in range(n, 0, -1):
            hit = model.closest(q + (k / n) * delta if k < n else cmd, c.collision_margin)
            if hit is None:
                continue
            if not now_known:
                now, now_known = model.closest(q, c.collision_margin), True
            if now is None or hit.distance < now.distance - 1e-6:
                return (f"collision predicted: {hit.between} would be {hit.distance * 1000:.1f} mm apart "
                        f"(margin {c.collision_margin * 1000:.1f} mm) at {k}/{n} of the step")
        return ""

    def close(self) -> None:
        self.model.close()
