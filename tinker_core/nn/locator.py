"""`TargetLocator`: a small CNN that finds a target in camera views and returns its 3D position.

Each view (the image is ``views`` square views side by side, uint8 HWC as the camera gives it) goes through a
shared full-resolution convolutional trunk (one 3x3 layer, then per-pixel layers: a small target is a few pixels)
ending in ``keypoints`` heatmaps; a spatial soft-argmax with a learned temperature turns each heatmap into an
expected image position (x, y in -1..1). An MLP maps all views' keypoints to the target position, in the
frame and units of the labels it was trained on (ArmReach: base frame, m), through ``center + half * out``.
Trained by supervision in simulation (true positions as labels); exported to ONNX like any module.

Given the camera's model (``projections``), the locator triangulates instead: one heatmap per view for each thing
it finds, and the position is the point whose projections best match them (linear least squares through the
nominal cameras, `triangulate`). A learned map from keypoints is right only for the camera poses it was trained
on, and a moved camera misplaces the target and the hand by different vectors; through the camera's geometry, a
camera moved by ``s`` misplaces everything it finds by ``-s``, which the hand then measures exactly.

With ``hand`` the same network also finds the end effector it sees (outputs: target, then hand). A camera that
moved biases both by the same vector, so the difference between the hand the camera sees and the hand forward
kinematics gives measures the camera's error (`tinker_core.loop.held_estimate.EstimateHold` corrects with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from tinker_core.errors import ConfigError
from tinker_core.loop.target_sight import GREENNESS


@dataclass
class LocatorConfig:
    """Shape and output range of a `TargetLocator`."""

    image_size: int = 64
    """height of the image = side of one square view, pixels"""
    views: int = 2
    """square views side by side in the image"""
    keypoints: int = 4
    """soft-argmax heatmaps per view"""
    width: int = 8
    """channels of the trunk"""
    prior_rgb: list[float] | list[list[float]] | None = field(default_factory=lambda: list(GREENNESS))
    """initialize heatmap 0 as this colour contrast (default: greenness, the ArmReach marker's colour), so training
    starts from a detector that already fires on the target; a list of contrasts: heatmaps 0, 1, ... (one per
    thing of that colour); None: random initialization"""
    hidden: int = 128
    """width of the MLP from keypoints to position"""
    center: list[float] = field(default_factory=lambda: [0.525, 0.0, 0.375])
    """middle of the label range (ArmReach targets: the middle of the target box, base frame, m)"""
    half: list[float] = field(default_factory=lambda: [0.175, 0.3, 0.175])
    """half-width of the label range"""
    targets: int = 1
    """things found before the hand, each with as many values (ArmSort: its two objects, the kind-0 then the
    kind-1 one); 0 with ``hand``: a hand locator only"""
    hand: bool = False
    """also find the end effector (the hand) in the views: the outputs are the targets, then the hand, and
    ``center`` / ``half`` cover all of them (as long for the hand as for each target)"""
    convs: int = 1
    """3x3 layers at the start of the trunk (each widens what a heatmap pixel sees by 2 pixels)"""
    projections: list[list[list[float]]] | None = None
    """per view, the nominal camera's 3x4 projection of a point in the labels' frame (rows x, y, w of clip
    coordinates; `tinker_sim.camera.Camera.projections`). Given: each thing found is one heatmap per view
    (``keypoints`` = 1, or 2 with the hand), triangulated through these; None: the MLP head"""

    def __post_init__(self) -> None:
        if not 16 <= self.image_size <= 256:
            raise ConfigError(f"LocatorConfig.image_size: expected 16..256, got {self.image_size}")
        if self.views < 1 or self.keypoints < 1 or self.hidden < 1:
            raise ConfigError(f"LocatorConfig: views, keypoints and hidden must be >= 1, got "
                              f"{self.views}, {self.keypoints}, {self.hidden}")
        if len(self.center) != len(self.half):
            raise ConfigError(f"LocatorConfig: center and half differ in length ({len(self.center)}, {len(self.half)})")
        things = self.targets + int(self.hand)
        if self.targets < int(not self.hand) or things < 1 or len(self.center) % things:
            raise ConfigError(f"LocatorConfig: center and half hold the range of each of {self.targets} target(s)"
                              + (" then the hand's" if self.hand else "") + f", as many values each; got "
                              f"{len(self.center)} values")
        rgbs = self.prior_rgbs
        if any(len(rgb) != 3 for rgb in rgbs) or len(rgbs) > min(self.keypoints, self.width):
            raise ConfigError(f"LocatorConfig.prior_rgb: expected one colour contrast (3 values) or a list of them, "
                              f"one per heatmap from 0 (at most {min(self.keypoints, self.width)}), got {self.prior_rgb}")
        if self.convs < 1:
            raise ConfigError(f"LocatorConfig.convs: expected >= 1, got {self.convs}")
        if self.projections is not None:
            shape = [len(self.projections)] + sorted({(len(m), *sorted({len(r) for r in m})) for m in self.projections})
            if shape != [self.views, (3, 4)]:
                raise ConfigError(f"LocatorConfig.projections: expected one 3x4 matrix per view ({self.views}), got "
                                  f"{shape[0]} of shapes {shape[1:]}")
            if self.keypoints != things or len(self.center) != 3 * things:
                raise ConfigError(f"LocatorConfig: a triangulating locator has one heatmap per thing it finds "
                                  f"(keypoints={things}) and 3D positions, got keypoints={self.keypoints} and "
                                  f"{len(self.center) / things:g} values per position")

    @property
    def target_size(self) -> int:
        """values of the target positions (the outputs before the hand's)"""
        return len(self.center) // (self.targets + int(self.hand)) * self.targets

    @property
    def prior_rgbs(self) -> list[list[float]]:
        """``prior_rgb`` as a list of contrasts, heatmap 0 first"""
        if not self.prior_rgb:
            return []
        return [list(c) for c in self.prior_rgb] if isinstance(self.prior_rgb[0], (list, tuple)) \
            else [list(self.prior_rgb)]


class SpatialSoftArgmax(nn.Module):
    """(B, K, H, W) heatmaps -> (B, K, 2) expected (x, y) in -1..1 under each heatmap's softmax."""

    def __init__(self, height: int, width: int, temperature: float = 1.0):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(float(temperature)).log())
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1))  # (HW, 2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, k = h.shape[0], h.shape[1]
        prob = torch.softmax(h.reshape(b, k, -1) * self.log_temperature.exp(), dim=-1)
        return prob @ self.grid


def triangulate(points: torch.Tensor, projections: torch.Tensor) -> torch.Tensor:
    """(B, V, 2) image points (x rightward, y upward, -1..1) seen by V cameras with (V, 3, 4) projections ->
    (B, 3): the point whose projections match them in the least-squares (direct linear transform) sense. The 3x3
    normal equations are solved by their adjugate, so that the graph exports to ONNX with arithmetic only."""
    u = points.unsqueeze(-1)  # (B, V, 2, 1)
    rows = u * projections[:, 2:3, :] - projections[:, 0:2, :]  # (B, V, 2, 4): row . [X, 1] = 0
    rows = rows.reshape(points.shape[0], -1, 4)
    a, b = rows[..., :3], -rows[..., 3]
    m = a.transpose(1, 2) @ a  # (B, 3, 3)
    r = (a.transpose(1, 2) @ b.unsqueeze(-1)).squeeze(-1)  # (B, 3)
    c0 = torch.linalg.cross(m[:, 1], m[:, 2])
    c1 = torch.linalg.cross(m[:, 2], m[:, 0])
    c2 = torch.linalg.cross(m[:, 0], m[:, 1])
    det = (m[:, 0] * c0).sum(-1, keepdim=True)
    return torch.stack([c0, c1, c2], dim=2).matmul(r.unsqueeze(-1)).squeeze(-1) / det


def triangulate_at_height(points: torch.Tensor, projections: torch.Tensor, z: float) -> torch.Tensor:
    """`triangulate` for a point known to lie at height ``z`` (an object resting on a surface of known height):
    the (x, y) whose projections at that height match the image points best, by the 2x2 normal equations. Two
    unknowns instead of three: what the views agree on goes into x and y alone."""
    u = points.unsqueeze(-1)
    rows = (u * projections[:, 2:3, :] - projections[:, 0:2, :]).reshape(points.shape[0], -1, 4)
    a, b = rows[..., :2], -(rows[..., 2] * z + rows[..., 3])
    m = a.transpose(1, 2) @ a  # (B, 2, 2)
    r = (a.transpose(1, 2) @ b.unsqueeze(-1)).squeeze(-1)  # (B, 2)
    det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
    x = (m[:, 1, 1] * r[:, 0] - m[:, 0, 1] * r[:, 1]) / det
    y = (m[:, 0, 0] * r[:, 1] - m[:, 1, 0] * r[:, 0]) / det
    return torch.stack([x, y, torch.full_like(x, float(z))], dim=1)


class TargetLocator(nn.Module):
    """uint8 image (B, S, views*S, 3) -> target position (B, len(center)); see the module docstring."""

    def __init__(self, config: LocatorConfig | None = None):
        super().__init__()
        self.config = c = config or LocatorConfig()
        w = c.width
        layers: list[nn.Module] = [nn.Conv2d(3, w, 3, padding=1), nn.ReLU()]
        for _ in range(c.convs - 1):
            layers += [nn.Conv2d(w, w, 3, padding=1), nn.ReLU()]
        self.trunk = nn.Sequential(*layers, nn.Conv2d(w, w, 1), nn.ReLU(), nn.Conv2d(w, c.keypoints, 1))
        if c.prior_rgbs:
            self._init_colour_prior(c.prior_rgbs)
        self.softargmax = SpatialSoftArgmax(c.image_size, c.image_size, temperature=5.0)
        if c.projections is None:
            self.head = nn.Sequential(nn.Linear(c.views * c.keypoints * 2, c.hidden), nn.ReLU(),
                                      nn.Linear(c.hidden, c.hidden), nn.ReLU(), nn.Linear(c.hidden, len(c.center)))
        else:
            self.register_buffer("projections", torch.tensor(c.projections, dtype=torch.float32))
            # soft-argmax's -1 and 1 are the centres of the edge pixels; the camera's -1 and 1 are the edges
            self.register_buffer("to_camera", torch.tensor([1.0, -1.0]) * (c.image_size - 1) / c.image_size)
        self.register_buffer("out_center", torch.tensor(c.center, dtype=torch.float32))
        self.register_buffer("out_half", torch.tensor(c.half, dtype=torch.float32))

    @torch.no_grad()
    def _init_colour_prior(self, rgbs: list[list[float]], gain: float = 7.0) -> None:
        """Channel k through the trunk = ``gain * relu(rgbs[k] . pixel)`` (3x3 centre tap) for each contrast given,
        the others as initialized."""
        convs = [m for m in self.trunk if isinstance(m, nn.Conv2d)]
        first, last = convs[0], convs[-1]
        for k, rgb in enumerate(rgbs):
            first.weight[k].zero_()
            first.weight[k, :, first.kernel_size[0] // 2, first.kernel_size[1] // 2] = torch.tensor(rgb)
            first.bias[k] = 0.0
        for conv in convs[1:]:  # channel k passes through: centre tap 1 from channel k, nothing else into it
            for k in range(len(rgbs)):
                conv.weight[k].zero_()
                conv.weight[:, k] = 0.0
            for k in range(len(rgbs)):
                conv.weight[k, k, conv.kernel_size[0] // 2, conv.kernel_size[1] // 2] = gain if conv is last else 1.0
                conv.bias[k] = 0.0

    def normalized(self, image: torch.Tensor) -> torch.Tensor:
        """The head's output before scaling: (position - center) / half."""
        c = self.config
        if c.projections is not None:
            return (self.positions(self.image_points(image).transpose(0, 1)) - self.out_center) / self.out_half
        kp = self._heatmap_points(image)  # (views, B, K, 2)
        return self.head(torch.cat([kp[i].reshape(kp.shape[1], -1) for i in range(c.views)], dim=1))

    def image_points(self, image: torch.Tensor) -> torch.Tensor:
        """Where each thing is seen: (B, views, things, 2) in the camera's image coordinates (x rightward, y
        upward, -1..1), the points `triangulate` takes (a triangulating locator only)."""
        return (self._heatmap_points(image) * self.to_camera).transpose(0, 1)

    def _heatmap_points(self, image: torch.Tensor) -> torch.Tensor:
        """(views, B, keypoints, 2): each heatmap's soft-argmax (-1..1 between the edge pixels' centres, y down)."""
        c = self.config
        x = image.float().permute(0, 3, 1, 2) * (1.0 / 255.0) - 0.5  # (B, 3, S, views*S)
        b = x.shape[0]
        views = torch.cat([x[..., i * c.image_size:(i + 1) * c.image_size] for i in range(c.views)], dim=0)
        return self.softargmax(self.trunk(views)).reshape(c.views, b, c.keypoints, 2)

    def positions(self, seen: torch.Tensor) -> torch.Tensor:
        """(views, B, things, 2) image points (camera coordinates) -> (B, 3 * things): each thing triangulated."""
        return torch.cat([triangulate(seen[:, :, k].transpose(0, 1), self.projections)
                          for k in range(seen.shape[2])], dim=1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.out_center + self.out_half * self.normalized(image)


class LocatedState(nn.Module):
    """``{"image", "state"}`` -> the state policy's observation with the target terms from the locator.

    The state vector's target slots (``target_slot``: scaled target position; ``rel_slot``: scaled target minus
    end effector) are overwritten by the locator's estimate, so whatever the simulator put there never reaches
    the policy; the end-effector slot (``ee_slot``, scaled like the target) comes from the joint positions
    (forward kinematics). ``value = (raw - offset) * scale`` as in `tinker_core.loop.observation`, clipped to
    +-``bound``."""

    def __init__(self, locator: TargetLocator, target_slot: int, rel_slot: int, ee_slot: int,
                 pos_offset: list[float], pos_scale: list[float], rel_scale: list[float], bound: float = 10.0):
        super().__init__()
        self.locator = locator
        self.target_slot, self.rel_slot, self.ee_slot, self.bound = target_slot, rel_slot, ee_slot, float(bound)
        self.n = len(pos_offset)
        if locator.config.target_size != self.n:
            raise ConfigError(f"LocatedState: the locator finds {locator.config.target_size} target values, the "
                              f"state's target term has {self.n}")
        if rel_slot != target_slot + self.n:
            raise ConfigError("LocatedState: expected the relative-target slot right after the target slot, got "
                              f"target_slot={target_slot}, rel_slot={rel_slot}")
        self.register_buffer("pos_offset", torch.tensor(pos_offset, dtype=torch.float32))
        self.register_buffer("pos_scale", torch.tensor(pos_scale, dtype=torch.float32))
        self.register_buffer("rel_scale", torch.tensor(rel_scale, dtype=torch.float32))

    def forward(self, obs: dict) -> torch.Tensor:
        state, image = obs["state"], obs["image"]
        n = self.n
        target = self.locator(image)[:, :n]
        ee = state[:, self.ee_slot:self.ee_slot + n] / self.pos_scale + self.pos_offset
        t_scaled = torch.clamp((target - self.pos_offset) * self.pos_scale, -self.bound, self.bound)
        rel = torch.clamp((target - ee) * self.rel_scale, -self.bound, self.bound)
        return torch.cat([state[:, :self.target_slot], t_scaled, rel, state[:, self.rel_slot + n:]], dim=1)


class HandLocator(nn.Module):
    """``{"image"}`` -> the end effector a ``hand`` locator sees (base frame, m): the bundle's ``hand`` model."""

    def __init__(self, locator: TargetLocator):
        super().__init__()
        if not locator.config.hand:
            raise ConfigError("HandLocator: the locator was trained without the hand (LocatorConfig.hand=False)")
        self.locator, self.n = locator, locator.config.target_size

    def forward(self, obs: dict) -> torch.Tensor:
        return self.locator(obs["image"])[:, self.n:]
