"""The nodes' view of a deploy bundle, without ROS: what perception and policy run, opened and checked.

- `resolve_bundle`: "" means the shipped default policy (``pretrained/arm_reach/bundle``, as ``tinker eval``);
- `open_perception`: the bundle's ``perception.onnx`` behind a `tinker_core.loop.perception.PerceptionCycle`
  (the observation assembled exactly as the sim env does, clip included: `tinker_core.loop.observation`);
- `camera_settings`, `task_settings`: the simulated camera and task a bundle was trained on (views, size; task,
  object slots);
- `ActorRunner`: the bundle's actor behind hot swap; `PolicyBundle`: it with the action chain and the cycle.
- A hierarchical policy (a directory with ``hierarchy.json``, `tinker_deploy.hierarchy`): perception passes the
  assembled observation on as the features (`ObservationFeatures`: the high level's layout), and the policy runs
  `tinker_deploy.hierarchy_runtime.HierarchicalOnnxPolicy` on them (`HierarchyRunner`: the high level only when
  an option ends; a new episode starts with a fresh decision). A new export reading the same observation hot-reloads
  (`tinker_deploy.hierarchy_hot_reload`) and goes live at the next episode start.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.config import config_from_dict
from tinker_core.errors import BundleError, ConfigError, TinkerError, ValidationError
from tinker_core.loop.goal_hold import GoalHold, check_at_goal
from tinker_core.loop.latency_compensation import LatencyCompensation
from tinker_core.loop.perception import PerceptionCycle
from tinker_core.loop.policy import PolicyCycle
from tinker_core.multiagent.channel_edge import ChannelOutbox
from tinker_core.multiagent.channels import TERM_PREFIX, ChannelSpec

DEFAULT_ENV = "tinker/ArmReach-v0"
"""the task whose shipped policy runs when no bundle is given (the simulated robot's default task)"""


def resolve_bundle(path: str | os.PathLike | None, env_id: str = DEFAULT_ENV) -> Path:
    """``path``, or the shipped default policy of ``env_id`` when it is empty (the one `tinker eval` uses)."""
    if path:
        return Path(path)
    from tinker_deploy.pretrained import default_bundle

    return default_bundle(env_id)


def n_actions(manifest) -> int:
    """The robot's action size: the action terms but a channel's message (``channel/NAME``)."""
    robot = [t for t in manifest.action_terms if not t.name.startswith(TERM_PREFIX)]
    if robot:
        return sum(t.size for t in robot)
    said = sum(t.size for t in manifest.action_terms if t.name.startswith(TERM_PREFIX))
    return int(np.prod(manifest.action_spec.shape)) - said


def channel_outbox(manifest, says: ChannelSpec | None) -> ChannelOutbox | None:
    """The sender's end of ``says`` for this bundle, its ``channel/NAME`` action term checked against the declaration
    (None: the robot sends on no channel, and the bundle must say nothing)."""
    slots = {t.name: t.size for t in manifest.action_terms if t.name.startswith(TERM_PREFIX)}
    if says is None:
        if slots:
            raise ConfigError(f"policy: the bundle was trained sending on {sorted(slots)} but no channel from this robot "
                              "is declared; declare it in the agents file's channels")
        return None
    if slots != {says.term: says.size}:
        raise ConfigError(f"policy: this robot sends on {says.term!r} ({says.size} values); the bundle's action terms "
                          f"have {slots or 'no channel'}; run a bundle trained sending on it")
    n = n_actions(manifest)
    total = int(np.prod(manifest.action_spec.shape))
    if n + says.size != total:
        raise ConfigError(f"policy: the bundle's action has {total} values, expected {n} for the robot + {says.size} "
                          f"for channel {says.name!r}")
    return ChannelOutbox(says, n)


def _hierarchy_sha256(path: str | os.PathLike) -> str:
    """sha256 of a hierarchy's ``hierarchy.json`` (which pins every level's manifest): the export's identity."""
    import hashlib

    from tinker_deploy.hierarchy_runtime import HIERARCHY_FILE, read_hierarchy

    read_hierarchy(path)  # format and every level's manifest digest checked
    return hashlib.sha256((Path(path) / HIERARCHY_FILE).read_bytes()).hexdigest()


def _observation_sha256(manifest) -> str:
    """sha256 of the observation a hierarchy's high level reads (its spec and terms): the identity of the features
    perception sends it. Two exports that read the same observation share it, so one can replace the other in the
    policy node while perception runs on."""
    import hashlib
    import json

    doc = {"obs_spec": manifest.obs_spec.to_dict(), "obs_terms": [repr(t) for t in manifest.obs_terms or []]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class ObservationFeatures:
    """Perception of a hierarchical policy: the features are the assembled observation itself (the levels read it
    whole), laid out as the high level's bundle records (its terms, joint names)."""

    def __init__(self, path: str | os.PathLike):
        from tinker_deploy.hierarchy_runtime import read_hierarchy
        from tinker_deploy.runtime import OnnxPolicy

        doc = read_hierarchy(path)
        self.high = OnnxPolicy.from_bundle(Path(path) / doc["levels"]["high"]["bundle"])
        if not self.manifest.obs_terms:
            raise BundleError(f"{path}: the high level records no observation terms; perception cannot assemble them")
        self.sha256 = _observation_sha256(self.manifest)

    @property
    def manifest(self):
        return self.high.manifest

    @property
    def version(self) -> int:
        return int(self.manifest.policy_version)

    def forward(self, obs) -> np.ndarray:
        return np.asarray(obs, dtype=np.float32).reshape(-1)

    def warmup(self, n: int) -> dict[str, float]:
        return {"p99_us": 0.0, "max_us": 0.0}


def open_perception(path: str | os.PathLike, warmup: int = 0, latency_compensation: int = 0, urdf: str | None = None,
                    latency_auto: bool = False, **cycle_kwargs) -> tuple[object, PerceptionCycle, str]:
    """(model, cycle, log line): the bundle's perception model, verified and warmed up, behind its cycle.
    ``cycle_kwargs`` go to `PerceptionCycle` (synced, sync_frames, max_frame_age_ns, ee_fn, estimate, channels);
    ``latency_compensation`` periods (0: none) puts the arm's terms at the pose in flight
    (`tinker_core.loop.latency_compensation.LatencyCompensation`, forward kinematics of ``urdf``); with
    ``latency_auto`` from the start only, then at the latency the safety stage measured (``command_latency``)."""
    from tinker_deploy.hierarchy_runtime import is_hierarchy
    from tinker_deploy.runtime import OnnxPolicy

    def compensation(m):
        if not (latency_compensation or latency_auto):
            return None
        return LatencyCompensation.for_manifest(m, latency_compensation, urdf, follows=latency_auto)

    if is_hierarchy(path):
        model = ObservationFeatures(path)
        m = model.manifest
        cycle = PerceptionCycle(m.obs_spec, list(m.obs_terms), model.forward, n_actions(m),
                                compensation=compensation(m), **cycle_kwargs)
        return model, cycle, (f"hierarchical policy {path} ({model.sha256[:12]}): the observation is the features "
                              f"({len(m.obs_terms)} terms, {int(np.prod(m.obs_spec.shape))} values)")
    model = OnnxPolicy.from_bundle(str(path), part="perception")
    m = model.manifest
    hand = model.hand()
    cycle = PerceptionCycle(m.obs_spec, list(m.obs_terms), model.forward, n_actions(m),
                            image_terms=m.image_terms, image_terms_static=m.image_terms_static,
                            located_geometry=m.located_geometry,
                            hand=None if hand is None else hand.forward, compensation=compensation(m),
                            **cycle_kwargs)
    r = model.warmup(int(warmup)) if warmup > 0 else {"p99_us": 0.0, "max_us": 0.0}
    if hand is not None and warmup > 0:
        hand.warmup(int(warmup))  # it runs on every frame too: no first-call spike in the loop
    estimate = ("" if not m.image_terms else "; its estimate per frame" if cycle.hold is None
                else f"; {cycle.hold.summary}" + (", the camera calibrated on the hand it sees"
                                                   if cycle.hand is not None else ""))
    if latency_compensation or latency_auto:
        estimate += (f"; the arm's terms at the pose in flight ({latency_compensation} periods of command latency"
                     + (", then the latency safety measures: latency_auto)" if latency_auto else ")"))
    return model, cycle, (f"perception v{model.version} ({model.sha256[:12]}) from {path}: p99 {r['p99_us']:.0f} us, "
                          f"max {r['max_us']:.0f} us after warm-up{estimate}")


def camera_settings(path: str | os.PathLike) -> dict[str, object]:
    """The simulated robot's camera for bundle ``path`` (flat, or a hierarchy's high level):
    ``{"camera": True, "image_size": S, "camera_views": V}`` when its perception takes an image (S x V*S x 3: V square
    views side by side, as `tinker_sim.camera.Camera` renders them), else ``{}``. A bundle whose model computes
    terms from the image (``image_terms``: the target a locator finds) needs the frame of each state, as in training: ``camera_rate_hz: 0.0`` then (the simulator
    renders in line; a camera process at 20 Hz and background priority fell to 8 frames/s on the shared 2-core
    machine, frames 0.17-0.3 s old, and the watchdog latched). Reads the manifest only."""
    from tinker_core.spec import DictSpec

    manifest = top_manifest(path)
    spec = manifest.obs_spec
    images = [s.shape for _, s in spec.items() if len(s.shape) == 3] if isinstance(spec, DictSpec) else []
    if not images:
        return {}
    h, w, c = images[0]
    if c != 3 or w % h:
        raise BundleError(f"bundle {path}: its image input is {list(images[0])}; the simulated camera renders "
                          f"(S, V*S, 3): V square RGB views side by side")
    return {"camera": True, "image_size": int(h), "camera_views": int(w // h),
            **({"camera_rate_hz": 0.0} if manifest.image_terms else {})}


SIM_TASKS = {"tinker/ArmReach-v0": "reach", "tinker/ArmSort-v0": "sort"}
"""sim_robot's task for each env id a bundle can be trained on. `tinker_sim.registration.ENV_IDS` says the same
(tests/ros2/test_package.py checks), but importing tinker_sim pulls in torch, which a robot's launch has not."""


REACH_SUCCESS_DISTANCE = 0.05
"""m: the reach task's default success distance, where a bundle's env sets none (`tinker_sim.tasks.reach.
SUCCESS_DISTANCE` says the same: tests/ros2/test_bundle_io.py checks; the policy node runs without tinker_sim)"""


def goal_hold_for(manifest, at_goal: str) -> GoalHold | None:
    """The reach's hold at its goal (`tinker_core.loop.goal_hold`) for a bundle of ``manifest``, with its env's
    success distance; None where ``at_goal`` is 'act' or the bundle is not a reacher."""
    env_id = manifest.env_id or (manifest.env or {}).get("id", "")
    if check_at_goal(at_goal) == "act" or SIM_TASKS.get(env_id) != "reach":
        return None
    kw = ((manifest.env or {}).get("kwargs") or {}).get("task_kwargs") or {}
    return GoalHold(manifest.obs_terms, float(kw.get("success_distance", REACH_SUCCESS_DISTANCE)))


def top_manifest(path: str | os.PathLike):
    """The manifest of bundle ``path``, or of a hierarchy's high level (which records the env it was trained on)."""
    from tinker_deploy.manifest import Manifest

    root = Path(path)
    if (root / "hierarchy.json").is_file():
        import json

        root = root / json.loads((root / "hierarchy.json").read_text())["levels"]["high"]["bundle"]
    f = root / "manifest.json"
    if not f.is_file():
        raise BundleError(f"bundle {path}: no manifest.json there")
    return Manifest.from_json(f.read_bytes(), str(f))


def task_settings(path: str | os.PathLike) -> dict[str, object]:
    """The simulated robot's task for bundle ``path`` (flat or hierarchical), as the bundle was trained on:
    ``{"task": "sort", "max_objects": M}`` for a sorter (its M object slots make its observation; how many objects
    an episode has, ``num_objects``, stays the launch's choice), ``{"task": "reach"}`` for a reacher, ``{}`` for an
    env the simulated robot does not run. Reads the manifest only."""
    m = top_manifest(path)
    task = SIM_TASKS.get(m.env_id or (m.env or {}).get("id", ""))
    if task is None:
        return {}
    kw = dict(((m.env or {}).get("kwargs") or {}).get("task_kwargs") or {})
    return {"task": task, **({"max_objects": int(kw["max_objects"])} if task == "sort" and "max_objects" in kw else {})}


def chain_config(manifest) -> ActionChainConfig:
    return config_from_dict(ActionChainConfig, dict(manifest.action_chain or {}), "manifest.action_chain")


def bundle_chain(path: str | os.PathLike, urdf: str | None = None) -> ActionChain:
    """The action chain bundle ``path`` runs (its manifest's), within the joint limits of ``urdf`` (None: the KUKA
    iiwa) for the manifest's joints: what a person's target is inverted through (the experience bridge)."""
    from tinker_deploy.manifest import Manifest
    from tinker_safety.limits import JointLimits

    m = Manifest.from_json((Path(path) / "manifest.json").read_bytes())
    limits = JointLimits.from_urdf(urdf or None, joint_names=m.joint_names)
    return ActionChain(chain_config(m), limits.lower, limits.upper)


class ActorRunner:
    """The bundle's actor (features -> raw action), hot-swappable without a missed call.

    `tinker_deploy.hot_reload.HotSwapPolicy` validates every bundle completely in the background (hashes,
    specs, joints, session, parity of the full policy against its recorded reference actions); its
    ``on_swap`` hook then opens the same verified bundle's actor part, checks the actor against the
    bundle's recorded reference features -> actions, and swaps it in with one reference assignment.
    A call runs entirely on the old or entirely on the new actor; a bundle that fails stays out.
    """

    def __init__(self, path: str | os.PathLike, parity_tolerance: float = 1e-5):
        if not path:
            raise ConfigError("policy.bundle: no bundle path given (set the 'bundle' parameter)")
        from tinker_deploy.hot_reload import HotSwapPolicy

        self.parity_tolerance = parity_tolerance
        self.rejected: list[str] = []
        self._actor = None
        self._hp = HotSwapPolicy(Path(path), on_swap=self._swap_actor)
        self._actor = self._open_actor(self._hp.active.bundle)
        self._bind(self._actor)

    def _open_actor(self, bundle):
        from tinker_deploy.hot_reload import parity_bound
        from tinker_deploy.runtime import OnnxPolicy

        m = bundle.manifest
        if m.feature_spec is None or "actor" not in m.models or "perception" not in m.models:
            raise BundleError(f"{bundle.path}: bundle has no perception/actor split (feature_spec, perception.onnx, "
                              f"actor.onnx); the ROS graph runs the two parts in two nodes")
        actor = OnnxPolicy(bundle, "actor")
        _, ref = bundle.recorded()
        if "features" in ref:
            got = actor.forward(ref["features"])
            diff = float(np.max(np.abs(got.astype(np.float64) - ref["action"]))) if got.size else 0.0
            bound = parity_bound(bundle, self.parity_tolerance)
            if diff > bound:
                raise BundleError(f"{bundle.path}: actor output differs from the recorded reference by {diff:.3g}, "
                                  f"above {bound:g}")
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


class HierarchyRunner:
    """`ActorRunner`'s interface for a hierarchical policy: `HierarchicalOnnxPolicy` on the observation perception
    passes on (`ObservationFeatures`); ``reset_episode()`` makes the next call a fresh high-level decision.
    Hot reload (`tinker_deploy.hierarchy_hot_reload.HotSwapHierarchy`): a new export reading the same observation
    is validated in the background and goes live at the next episode start."""

    def __init__(self, path: str | os.PathLike):
        if not path:
            raise ConfigError("policy.bundle: no bundle path given (set the 'bundle' parameter)")
        from tinker_deploy.hierarchy_hot_reload import HotSwapHierarchy

        self._hs = HotSwapHierarchy(path)
        self.episodes = 0
        self._bind(self._hs.policy, path)
        if not self.joint_names:
            raise BundleError(f"{path}: the high level records no joint names; the policy node maps joints by name")

    def _bind(self, policy, path: str | os.PathLike | None = None) -> None:
        m = policy.high.manifest
        self.policy = policy
        self.joint_names = list(m.joint_names)
        self.chain_config = chain_config(m)
        self.feature_size = int(np.prod(m.obs_spec.shape))
        self.version = int(m.policy_version)
        self.perception_sha256 = _observation_sha256(m)
        self.actor_sha256 = _hierarchy_sha256(path if path is not None else policy.root)
        self.providers = list(policy.high.session.get_providers())

    @property
    def manifest(self):
        return self.policy.high.manifest

    @property
    def rejected_reloads(self) -> int:
        return len(self._hs.rejected)

    def request_reload(self, path: str | os.PathLike):
        return self._hs.request_reload(path)

    def reset_episode(self) -> None:
        self._hs.reset()  # a validated new export goes live here
        if self._hs.policy is not self.policy:
            self._bind(self._hs.policy)
        self.episodes += 1

    def __call__(self, features: np.ndarray, perception_sha256: str | None = None) -> np.ndarray:
        if perception_sha256 is not None and perception_sha256 != self.perception_sha256:
            raise ValidationError("policy.features.perception_sha256", self.perception_sha256[:16],
                                  perception_sha256[:16] or "none",
                                  "features from another perception (another policy's observation)")
        if features.shape[0] != self.feature_size:
            raise ValidationError("policy.features", f"{self.feature_size} values", f"{features.shape[0]} values")
        return np.asarray(self.policy.forward(features), dtype=np.float64).reshape(-1)

    def diagnostic_values(self) -> dict[str, object]:
        """The running option, and how often each level ran (the high level only when an option ended)."""
        p = self.policy
        if p is None:
            return {}
        option = p.options[p.option] if p.option is not None and p.option < len(p.options) else str(p.option)
        return {"option": option, "high_level_calls": p.high_calls, "low_level_calls": p.calls,
                "episodes_started": self.episodes}

    def warmup(self, n: int) -> tuple[float, float]:
        import time

        obs = np.zeros(self.feature_size, np.float32)
        samples = []
        for _ in range(max(1, n)):
            t0 = time.perf_counter_ns()
            self.policy.forward(obs)
            samples.append(time.perf_counter_ns() - t0)
        self.policy.reset()
        self.policy.calls = self.policy.high_calls = 0
        a = np.asarray(samples, np.float64) / 1e3
        return float(np.percentile(a, 99)), float(a.max())

    def close(self) -> None:
        self._hs.close()
        self.policy = None


class PolicyBundle:
    """The policy node's core: `ActorRunner`, the bundle's action chain within the URDF limits, and the
    `PolicyCycle`. A hot-swapped bundle with another chain config restarts the chain at the next cycle."""

    def __init__(self, path: str | os.PathLike, urdf: str | None, control_period: float,
                 on_swap: Callable[[str], None] = lambda line: None, says: ChannelSpec | None = None,
                 latency_compensation: int = 0, at_goal: str = "hold", latency_auto: bool = False):
        """``says``: the channel this robot sends on (the bundle's actor then outputs action + message);
        ``latency_compensation``: periods of command latency the chain and the extra actions compensate
        (`tinker_core.loop.policy.PolicyCycle`), from the start where ``latency_auto`` follows what perception
        compensates; ``at_goal``: a reacher's hold at its goal ('hold') or not ('act',
        `tinker_core.loop.goal_hold`)."""
        from tinker_deploy.hierarchy_runtime import is_hierarchy

        from tinker_safety.limits import JointLimits

        self.runner = HierarchyRunner(path) if is_hierarchy(path) else ActorRunner(path)
        trained = self.runner.manifest.control_period
        if trained is not None and abs(float(trained) - control_period) > 1e-9:
            raise TinkerError(f"policy.control_period: the bundle was trained at {trained} s per cycle, this "
                              f"graph runs at {control_period} s; set control_period in the launch YAML to match")
        limits = JointLimits.from_urdf(urdf or None, joint_names=self.runner.joint_names)
        self.limits = (limits.lower, limits.upper)
        self.cycle = PolicyCycle(self._act, self.new_chain(), outbox=channel_outbox(self.runner.manifest, says),
                                 on_episode=getattr(self.runner, "reset_episode", None),
                                 latency_compensation=latency_compensation, latency_auto=latency_auto,
                                 goal_hold=goal_hold_for(self.runner.manifest, at_goal))
        self.on_swap, self.reloads, self.at_goal = on_swap, 0, at_goal
        self.version, self.actor_sha256 = self.runner.version, self.runner.actor_sha256

    def warm_up(self, path: str | os.PathLike, iterations: int) -> str:
        """Run the actor ``iterations`` times before the first cycle; the line that says what runs and how fast."""
        p99, mx = self.runner.warmup(int(iterations))
        return (f"bundle {path} v{self.version} verified; actor p99 {p99:.1f} us, max {mx:.1f} us after warm-up; "
                f"providers {self.runner.providers}")

    def reload(self, path: str | os.PathLike) -> "Future[bool]":
        """Validate bundle ``path`` in the background and swap it in between two calls (`ActorRunner`), or at the next
        episode start (`HierarchyRunner`); raises BundleError at once where there is no bundle of the running kind
        (the running one stays). The future says whether the bundle passed."""
        from tinker_deploy.hierarchy_runtime import is_hierarchy

        hierarchical = isinstance(self.runner, HierarchyRunner)
        if is_hierarchy(path) != hierarchical:
            raise BundleError(f"bundle {path}: a {'flat' if hierarchical else 'hierarchical'} policy cannot replace "
                              f"the running {'hierarchical' if hierarchical else 'flat'} one while it runs (perception "
                              "sends another observation); restart the graph with it; keeping the running bundle")
        if not hierarchical and not (Path(path) / "manifest.json").is_file():
            raise BundleError(f"bundle {path}: no manifest.json there; keeping the running bundle")
        return self.runner.request_reload(str(path))

    def new_chain(self) -> ActionChain:
        """A fresh chain: its first command starts from the measured pose of the next cycle."""
        return ActionChain(self.runner.chain_config, *self.limits)

    def _act(self, features: np.ndarray, perception_sha256: str) -> np.ndarray:
        raw = self.runner(features.astype(np.float32), perception_sha256)
        r = self.runner
        if (r.actor_sha256, r.version) != (self.actor_sha256, self.version):  # a new bundle went live between calls
            self.reloads += 1
            if self.runner.chain_config.digest() != self.cycle.chain.config.digest():
                self.cycle.restart(self.new_chain())  # the new chain starts from this cycle's measured pose
            self.cycle.goal_hold = goal_hold_for(self.runner.manifest, self.at_goal)  # its terms, its task
            self.version, self.actor_sha256 = self.runner.version, self.runner.actor_sha256
            self.on_swap(f"now running bundle v{self.version} ({self.actor_sha256[:12]})")
        return raw


def write_bundle(bundle_dir: str | os.PathLike, version: int, blobs: Mapping[str, object]) -> Path:
    """The learner's bundle files (``blobs`` by file name) written as ``bundle_dir/v<version>``, atomically:
    a node only ever sees a complete directory."""
    final = Path(bundle_dir) / f"v{version}"
    tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=bundle_dir))
    for name, data in blobs.items():
        if "/" in name or name.startswith("."):
            shutil.rmtree(tmp, ignore_errors=True)
            raise TinkerError(f"weights blob name {name!r}: expected a plain file name of the bundle")
        (tmp / name).write_bytes(data if isinstance(data, bytes) else np.asarray(data).tobytes())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final
