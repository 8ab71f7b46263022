"""The nodes' view of a deploy bundle: the observation assembled by term name, the actor behind hot swap.

`ObsAssembler` builds the network's observation exactly as the sim env does (``ArmEnv._state_vector``):
the manifest's ``obs_terms`` in order, each ``(raw - offset) * scale``, from named raw sources
(``joint_pos``/``joint_vel`` from JointState by joint name, ``ee_pos`` and task terms from the
robot's task topic, ``last_action`` from the policy's raw action), plus the camera image when the
obs spec has one. A term nobody provides is an error at configure time, naming the term.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from tinker_core.action_chain import ActionChainConfig
from tinker_core.config import config_from_dict
from tinker_core.errors import BundleError, ConfigError, ValidationError
from tinker_core.spec import DictSpec, Spec


def _providers_check(session, wanted: tuple[str, ...] = ("CPUExecutionProvider",)) -> list[str]:
    got = list(session.get_providers())
    if got[: len(wanted)] != list(wanted):
        raise BundleError(f"onnxruntime execution providers: expected {list(wanted)}, got {got} (silent fallback)")
    return got


class ObsAssembler:
    """Flat state vector (and image) for the perception model, by term name."""

    def __init__(self, manifest, provided: set[str]):
        spec = manifest.obs_spec
        self.image_key: str | None = None
        self.state_key: str | None = None
        if isinstance(spec, DictSpec):
            for k, s in spec.items():
                if len(s.shape) == 3:
                    self.image_key = k
                else:
                    self.state_key = k
            self.state_spec = spec[self.state_key] if self.state_key else None
            self.image_shape = tuple(spec[self.image_key].shape) if self.image_key else None
        else:
            self.state_spec, self.image_shape = spec, None
        self.terms = [(t.name, t.size, np.asarray(t.offset, dtype=np.float64), np.asarray(t.scale, dtype=np.float64))
                      for t in manifest.obs_terms if t.name != self.image_key]
        missing = [t[0] for t in self.terms if t[0] not in provided]
        if missing:
            raise ConfigError(f"bundle obs_terms {missing} have no source on this robot; sources: {sorted(provided)}")
        n = sum(t[1] for t in self.terms)
        if self.state_spec is not None and self.state_spec.shape != (n,):
            raise BundleError(f"bundle obs_terms add up to {n} values but the state spec is {self.state_spec.shape}")

    def state(self, sources: Mapping[str, np.ndarray]) -> np.ndarray:
        parts = []
        for name, size, off, scale in self.terms:
            v = np.asarray(sources[name], dtype=np.float64).reshape(-1)
            if v.shape[0] != size:
                raise ValidationError(f"obs.{name}", f"{size} values", f"{v.shape[0]} values")
            parts.append((v - off) * scale)
        return np.concatenate(parts).astype(np.float32)

    def obs(self, sources: Mapping[str, np.ndarray], image: np.ndarray | None):
        s = self.state(sources)
        if self.image_key is None:
            return s
        if image is None or tuple(image.shape) != self.image_shape:
            raise ValidationError(f"obs.{self.image_key}", f"uint8{list(self.image_shape)}",
                                  "none" if image is None else f"{image.dtype}{list(image.shape)}")
        out = {self.image_key: image}
        if self.state_key:
            out[self.state_key] = s
        return out


def chain_config(manifest) -> ActionChainConfig:
    return config_from_dict(ActionChainConfig, dict(manifest.action_chain or {}), "manifest.action_chain")


class ActorRunner:
    """The bundle's actor (features -> raw action), hot-swappable without a missed call.

    `deploy.hot_reload.HotSwapPolicy` validates every bundle completely in the background (hashes,
    specs, joints, session, parity of the full policy against its recorded reference actions); its
    ``on_swap`` hook then opens the same verified bundle's actor part, checks the actor against the
    bundle's recorded reference features -> actions, and swaps it in with one reference assignment.
    A call runs entirely on the old or entirely on the new actor; a bundle that fails stays out.
    """

    def __init__(self, path: str | os.PathLike, parity_tolerance: float = 1e-5):
        if not path:
            raise ConfigError("policy.bundle: no bundle path given (set the 'bundle' parameter)")
        from deploy.hot_reload import HotSwapPolicy

        self.parity_tolerance = parity_tolerance
        self.rejected: list[str] = []
        self._actor = None
        self._hp = HotSwapPolicy(Path(path), on_swap=self._swap_actor)
        self._actor = self._open_actor(self._hp.active.bundle)
        self._bind(self._actor)

    def _open_actor(self, bundle):
        from deploy.runtime import OnnxPolicy

        m = bundle.manifest
        if m.feature_spec is None or "actor" not in m.models or "perception" not in m.models:
            raise BundleError(f"{bundle.path}: bundle has no perception/actor split (feature_spec, perception.onnx, "
                              f"actor.onnx); the ROS graph runs the two parts in two nodes")
        actor = OnnxPolicy(bundle, "actor")
        _, ref = bundle.recorded()
        if "features" in ref:
            got = actor.forward(ref["features"])
            diff = float(np.max(np.abs(got.astype(np.float64) - ref["action"]))) if got.size else 0.0
            if diff > self.parity_tolerance:
                raise BundleError(f"{bundle.path}: actor output differs from the recorded reference by {diff:.3g}")
        return actor

    def _swap_actor(self, policy) -> None:
        try:
            actor = self._open_actor(policy.bundle)
        except Exception as e:  # the running actor keeps running
            self.rejected.append(f"{policy.bundle.path}: {e}")
            return
        self._actor = actor  # one reference assignment, read once per call

    def _bind(self, actor) -> None:
        m = actor.manifest
        self.joint_names = list(m.joint_names)
        self.chain_config = chain_config(m)
        self.feature_size = int(np.prod(m.feature_spec.shape))
        self.perception_sha256 = m.models["perception"].sha256
        self.actor_sha256 = m.models["actor"].sha256
        self.version = int(m.policy_version)
        self.providers = list(actor.session.get_providers())
        self._bound = actor

    @property
    def manifest(self):
        return self._bound.manifest

    @property
    def rejected_reloads(self) -> int:
        return len(self._hp.rejected) + len(self.rejected)

    def request_reload(self, path: str | os.PathLike):
        return self._hp.request_reload(Path(path))

    def __call__(self, features: np.ndarray, perception_sha256: str | None = None) -> np.ndarray:
        """Raw action for one feature vector; refuses features of another perception model or size."""
        actor = self._actor  # read once: this call runs entirely on one actor
        if actor is not self._bound:
            self._bind(actor)
        if perception_sha256 is not None and perception_sha256 != self.perception_sha256:
            raise ValidationError("policy.features.perception_sha256", self.perception_sha256[:16],
                                  perception_sha256[:16] or "none",
                                  "features from a perception model other than this bundle's")
        if features.shape[0] != self.feature_size:
            raise ValidationError("policy.features", f"{self.feature_size} values", f"{features.shape[0]} values")
        return np.asarray(actor.forward(features), dtype=np.float64).reshape(-1)

    def warmup(self, n: int) -> tuple[float, float]:
        r = self._actor.warmup(n)
        return float(r["p99_us"]), float(r["max_us"])

    def close(self) -> None:
        self._actor = None
