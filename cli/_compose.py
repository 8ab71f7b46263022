"""Composition helpers shared by the CLI commands: the one place that wires sim, safety and deploy.

Imported only from inside ``run()`` of the commands, so ``tinker --help`` stays light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M
from tinker_core.loop.latency_compensation import LatencyCompensation
from tinker_core.module import ModuleBase

REPO = Path(__file__).resolve().parents[1]


def make_guard(safety_yaml: str | os.PathLike | None = None, fixtures: list[dict] | tuple = (),
               control_period: float = 0.05):
    """The SafetyWrapper as the safety node builds it (`tinker_safety.guard_session.load_guard`): the safety YAML
    (None: the shipped one) at the env's ``control_period``, with the task's ``fixtures`` (``Task.fixtures()``: its
    table, bins) added to the YAML's known scene, so the guard keeps the arm off them as off the mounting table."""
    from tinker_safety.guard_session import load_guard

    return load_guard(str(safety_yaml) if safety_yaml else None, None, float(control_period), extra_scene=fixtures)


class GuardedEnv(gym.Wrapper):
    """Resets the SafetyWrapper with the measured state at every episode start (so a latch in one
    episode does not carry into the next, and the start ramp begins from the real pose)."""

    def __init__(self, env: gym.Env, guard: Any):
        super().__init__(env)
        self.guard = guard

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        q, qd = self.env.unwrapped.joint_state
        if not self.guard.reset(q, qd):
            raise ConfigError(f"SafetyWrapper refused to reset from the measured state q={np.round(q, 3)}")
        info["safety_estops"] = self.estops
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        info["safety_estops"] = self.estops
        return obs, r, term, trunc, info

    @property
    def estops(self) -> int:
        """E-stops the guard has latched since it was built (``info['safety_estops']``)."""
        return sum(self.guard.counters["estops"].values())


def make_env(env_id: str, *, dynamics: Any = None, randomize: Any = False, action_chain: dict | None = None,
             safety: bool = True, safety_yaml: str | None = None, camera: bool = False, seed: int | None = None,
             **kwargs: Any) -> gym.Env:
    """A sim env with the bundle's action chain and, by default, the SafetyWrapper as command filter."""
    import tinker_sim  # noqa: F401  registers tinker/ ids
    from tinker_core.action_chain import ActionChainConfig

    chain = ActionChainConfig(**action_chain) if action_chain else None
    env = gym.make(env_id, dynamics=dynamics, randomize=randomize, action_chain=chain, camera=camera, **kwargs)
    if safety:
        guard = make_guard(safety_yaml, env.unwrapped.task.fixtures(), env.unwrapped.control_period)
        env.unwrapped.command_filter = guard
        env = GuardedEnv(env, guard)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def load_policy(bundle: str | os.PathLike):
    """An onnxruntime policy from a bundle directory (or an .onnx path inside it)."""
    from tinker_deploy.runtime import OnnxPolicy

    return OnnxPolicy.from_bundle(bundle, part="policy")


def bundle_modules(bundle: str | os.PathLike, estimate: str = "auto", where: str = "--estimate",
                   deadband_m: float = CALIBRATION_DEADBAND_M, latency_compensation: int = 0) -> "BundleModules":
    """A bundle as the pipeline's perception and policy modules, as the perception and policy nodes run it: a state
    bundle's policy.onnx alone; a vision bundle's perception.onnx, then actor.onnx, with the estimate held or per
    frame by ``estimate`` (`tinker_core.loop.held_estimate.holds_estimate`, the perception node's rule; the env's
    episodes are known), read from the manifest before the bundle is loaded once. ``deadband_m``: the held
    estimate's calibration deadband. ``latency_compensation`` (control periods, 0: off): the actor's input is
    rewritten to the pose in flight (`CompensatedPerception`); `wire_commanded` gives it the env's commanded target,
    and the env takes the same setting."""
    from tinker.bundle_io import top_manifest
    from tinker_core.loop.held_estimate import holds_estimate
    from tinker_deploy.runtime import OnnxPolicy

    manifest = top_manifest(bundle)
    image_terms = manifest.image_terms or ()
    held = holds_estimate(estimate, image_terms, synced=True, where=where)
    if held:
        perception = HeldPerception(bundle, deadband_m)
    elif image_terms:
        perception = OnnxPolicy.from_bundle(bundle, part="perception")
    elif not latency_compensation:
        return BundleModules(None, load_policy(bundle), held=False)
    else:  # a state bundle: its policy.onnx reads the observation, rewritten
        policy = load_policy(bundle)
        return BundleModules(CompensatedPerception(None, policy, latency_compensation), policy, held=False)
    if latency_compensation:
        perception = CompensatedPerception(perception, perception, latency_compensation)
    return BundleModules(perception, OnnxPolicy.from_bundle(bundle, part="actor"), held=held)


class CompensatedPerception(ModuleBase):
    """A bundle's perception (``inner``; None: the observation itself is the actor's input), then
    `tinker_core.loop.latency_compensation.LatencyCompensation` on its output: the actor acts on the pose the newest
    command in flight brings the arm to. ``source``: the loaded part whose manifest and specs describe the actor's
    input. ``commanded``: the robot's newest commanded joint target (`wire_commanded`). ``hold`` and ``hand`` are the
    inner perception's (`tinker eval` reports them)."""

    input_name, output_name = "obs", "features"

    def __init__(self, inner: Any, source: Any, steps: int):
        super().__init__()
        self.inner, self.source = inner, source
        self.commanded: Callable[[], np.ndarray | None] | None = None
        self.manifest, self.bundle, self.version = source.manifest, source.bundle, source.version
        self.compensation = LatencyCompensation.for_manifest(self.manifest, steps)
        self.input_spec = source.input_spec if inner is None else inner.input_spec
        self.output_spec = source.input_spec if inner is None else inner.output_spec
        self.hold, self.hand = getattr(inner, "hold", None), getattr(inner, "hand", None)

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()

    def forward(self, obs: Any) -> np.ndarray:
        if self.commanded is None:
            raise ConfigError("latency compensation: no commanded target wired (wire_commanded(modules, env))")
        features = obs if self.inner is None else self.inner.forward(obs)
        return self.compensation(np.asarray(features, dtype=np.float32), self.commanded())


def wire_commanded(modules: "BundleModules", env: gym.Env) -> None:
    """Give a compensated perception (`CompensatedPerception`) the env's newest commanded joint target: the
    setpoint a robot's driver reports. Nothing to do for any other."""
    if isinstance(modules.perception, CompensatedPerception):
        u = env.unwrapped
        modules.perception.commanded = lambda: u.commanded_target


class BundleModules:
    """A bundle's modules for `tinker_core.evaluate.evaluate`: ``perception`` (None: the observation goes to the
    policy as it is) and ``policy``, with the bundle's manifest, path and version."""

    def __init__(self, perception: Any, policy: Any, held: bool):
        self.perception, self.policy, self.held = perception, policy, held
        first = perception if perception is not None else policy
        self.manifest, self.bundle, self.version = first.manifest, first.bundle, first.version


class HeldPerception(ModuleBase):
    """A vision bundle's perception as the perception node runs it by default (``estimate: auto``): perception.onnx,
    then `tinker_core.loop.held_estimate.EstimateHold` (the image terms averaged over the episode's frames that show
    the target, and calibrated by the bundle's ``hand`` model where it has one). A pipeline module: observation in,
    the actor's features out; ``reset()`` ends an episode."""

    input_name, output_name = "obs", "features"

    def __init__(self, bundle: str | os.PathLike, deadband_m: float = CALIBRATION_DEADBAND_M):
        from tinker_core.loop.held_estimate import estimate_hold
        from tinker_deploy.runtime import OnnxPolicy

        super().__init__()
        self.onnx = OnnxPolicy.from_bundle(bundle, part="perception")
        self.manifest, self.bundle, self.version = self.onnx.manifest, self.onnx.bundle, self.onnx.version
        self.input_spec, self.output_spec = self.onnx.input_spec, self.onnx.output_spec
        m = self.manifest
        self.hand = self.onnx.hand()
        """the end effector the camera sees: calibrates a moved camera (`EstimateHold`)"""
        self.hold = estimate_hold([t for t in m.obs_terms if t.name != "image"], m.image_terms,
                                  static=m.image_terms_static, calibrate=self.hand is not None, deadband_m=deadband_m,
                                  geometry=m.located_geometry)
        self.episode = 0

    def reset(self) -> None:
        self.episode += 1

    def forward(self, obs: Any) -> np.ndarray:
        hand = None if self.hand is None else self.hand.forward(obs)
        return self.hold(self.onnx.forward(obs), str(self.episode), obs["image"], hand)


def policy_env_for_bundle(policy: Any, env_id: str, **kwargs: Any) -> gym.Env:
    """Build the env the bundle was trained for, with the bundle's own action chain and camera setting."""
    from tinker_deploy.bundle import ExpectedIO, check_expected
    from tinker_core.spec import DictSpec, spec_from_space

    m = policy.manifest
    camera = isinstance(m.obs_spec, DictSpec) and "image" in m.obs_spec.fields
    if camera:
        h, w = (int(x) for x in m.obs_spec["image"].shape[:2])
        kwargs.setdefault("image_size", h)
        if w != h:
            kwargs.setdefault("camera_views", w // h)
    env = make_env(env_id, action_chain=m.action_chain or None, camera=camera, **kwargs)
    u = env.unwrapped
    check_expected(m, ExpectedIO(obs_spec=spec_from_space(env.observation_space),
                                 joint_names=list(getattr(u, "joint_names", [])) or None), where=str(bundle_name(policy)))
    return env


def manifest_inputs(manifest: Any) -> Any:
    """What a bundle's policy reads (`tinker_sim.dynamics_check.PolicyInputs`), from its manifest."""
    from tinker_sim.dynamics_check import PolicyInputs
    from tinker_core.spec import DictSpec

    camera = isinstance(manifest.obs_spec, DictSpec) and "image" in manifest.obs_spec.fields
    return PolicyInputs(camera=camera, image_terms=tuple(getattr(manifest, "image_terms", None) or ()))


def check_dynamics_for(manifest: Any, env_id: str, dynamics: Any, policy: str) -> None:
    """Refuse a fixed dynamics set (a YAML path, a mapping or DynamicsParams; None = nominal) with a key that cannot
    act on ``env_id`` with the bundle of ``manifest`` (`tinker_sim.dynamics_check`)."""
    if dynamics is None or not env_id.startswith("tinker/Arm"):
        return
    from tinker_sim.dynamics import resolve_dynamics
    from tinker_sim.dynamics_check import check_dynamics_act

    check_dynamics_act(resolve_dynamics(dynamics), env_id, manifest_inputs(manifest),
                       source=str(dynamics) if not hasattr(dynamics, "to_dict") else "dynamics", policy=policy)


def bundle_name(policy: Any) -> str:
    b = getattr(policy, "bundle", None)
    return str(getattr(b, "path", "bundle"))


SCRIPTED_EXPERTS = {"tinker/ArmReach-v0": "tinker_sim.scripted:ScriptedReachController",
                    "tinker/ArmSort-v0": "tinker_sim.scripted:ScriptedSortController"}
"""the default expert per env id (module:Class, built as Class(env)): BC's teacher, `tinker prior`'s demonstrator"""


def expert_factory(spec: str | None, env_id: str | None):
    """``module:Class`` -> a factory ``env -> expert`` (imported here: the CLI is the composition root)."""
    import importlib

    from tinker_core.errors import ConfigError

    spec = spec or SCRIPTED_EXPERTS.get(env_id or "")
    if not spec:
        raise ConfigError(f"expert: no scripted expert for {env_id!r}; give 'expert: module:Class' in the config or "
                          f"--expert (scripted defaults exist for {sorted(SCRIPTED_EXPERTS)})")
    module, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"expert: expected module:Class that can be imported, got {spec!r} ({e})") from None
    return cls
