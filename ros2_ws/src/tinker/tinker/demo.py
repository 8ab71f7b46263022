"""`run_demo`: the main job end to end on the simulated robot, in stages with one job each.

1. `start_learner`: a learner process starts from the shipped pretrained checkpoint (SAC, trained with domain
   randomization by ``tinker train --config configs/sac_arm_reach.yaml``) and waits, paused.
2. `bring_up`: the ROS 2 graph comes up (sim_robot → perception → policy → safety → sim_robot, plus the
   experience bridge) on a dynamics variant that differs from the training nominal, running the shipped
   pretrained bundle through onnxruntime every 50 ms, with the `Monitor` watching.
3. `DemoPhases.run`: *Before*: ``episodes_before`` episodes with the pretrained policy (transitions already
   stream to the learner). *Fine-tune*: the learner resumes, trains on the live transitions and publishes
   gated bundles, which the policy node hot-reloads. *After*: the learner pauses and ``episodes_after``
   episodes run with the newest policy.
4. `collect_report`, then `tinker.demo_report.write_report`: the report (JSON, Markdown and the figure) says
   what the run measured: success before and after, end-to-end cycle latency, deadline misses, safety
   interventions, policy versions.

Every number in the report comes from this run: episode outcomes from the robot's ``task`` topic,
latency from the nodes' trace spans, counters from their /diagnostics.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from tinker.demo_learner import LearnerProcess
from tinker.demo_monitor import Monitor
from tinker.demo_report import latency_from_traces, phase_summary, version_summary, write_report
from tinker_core.errors import ConfigError
from tinker_core.loop.latency_compensation import check_steps
from tinker_core.transport import free_endpoints

Progress = Callable[[str], None]
OPERATORS = ("none", "scripted")


ENVS = ("tinker/ArmReach-v0", "tinker/ArmSort-v0")
"""the tasks the demo runs (their episodes' length is the env's time limit, `tinker_sim.registration.ENV_IDS`)"""

ROBOTS = {False: "shifted_miscalibrated.yaml", True: "shifted_heavy_laggy.yaml"}
"""The demo's robot (sim/config/dynamics/), by whether the bundle's perception takes a camera image. A camera
policy finds the target itself, so the calibration error of the state policy's robot (the target it is told)
cannot act on it and is refused; its robot is the heavier, weaker, laggier arm instead."""


SORT_ROBOT = "far_latency_sort.yaml"
"""the sorter's demo robot: 4 control periods of command latency, where the shipped sorter falls apart"""


def default_dynamics(bundle: str, config_dir: Path, env_id: str = "tinker/ArmReach-v0") -> str:
    """The demo robot's dynamics file for ``bundle`` on ``env_id`` (`ROBOTS`, `SORT_ROBOT`)."""
    if env_id == "tinker/ArmSort-v0":
        return str(config_dir / SORT_ROBOT)
    return str(config_dir / ROBOTS[_has_camera(bundle)])


@dataclass
class DemoConfig:
    """Settings of one demo run (defaults: the README's ``tinker demo``)."""

    bundle: str = ""
    """pretrained bundle directory run by the perception and policy nodes"""
    checkpoint: str = ""
    """pretrained algorithm checkpoint the learner fine-tunes (SAC; for a policy learned by imitation, its RL prior:
    ``tinker prior``)"""
    env_id: str = "tinker/ArmReach-v0"
    """the task: ``tinker/ArmReach-v0`` or ``tinker/ArmSort-v0`` (the robot's task comes from the bundle)"""
    demonstrations: str | None = None
    """a saved replay of demonstrations the learner samples beside the live data (RLPD; an RL prior's
    ``demonstrations/``); None: none"""
    dynamics: str = ""
    """DynamicsParams YAML of the robot (a variant that differs from the training nominal)"""
    out: str = "runs/demo"
    """where logs, traces, bundles, the report and the plot are written"""
    episodes_before: int = 20
    """episodes measured with the pretrained policy"""
    finetune_episodes: int = 50
    """episodes while the learner fine-tunes and publishes"""
    episodes_after: int = 20
    """episodes measured with the newest policy, learner paused"""
    episode_cycles: int = 0
    """cycles per episode unless the task succeeds first; 0: the env's own limit (reach 50 = 2.5 s at 50 ms,
    sort 200 = 10 s)"""
    control_period: float = 0.05
    """seconds per cycle"""
    learner: dict = field(default_factory=dict)
    """LearnerConfig overrides (batch size, gate, publish cadence...)"""
    finetune_lr: float | None = 3e-4
    """learning rate while fine-tuning (below the pretraining rate, so live data refines the policy)"""
    seed: int = 0
    """first episode seed of the robot"""
    record: bool = False
    """record every cycle to out/run.mcap"""
    view: bool = False
    """serve the live view (tinker.view: Foxglove WebSocket on :8765, the page on :8766)"""
    reward: str = "sim"
    """where the learner's rewards come from: "sim" (the simulator's true target: an oracle) or "sensors" (the
    success sensor: the target the camera found and the measured joints; needs a vision bundle). The report's
    success is the simulator's either way"""
    latency_compensation: int | str = 0
    """control periods of the robot's command latency the loop compensates (the launch YAML's
    ``latency_compensation``, `tinker_core.loop.latency_compensation`; 0: none), or "auto": from 0, the latency the
    safety node measures once it has stood (``latency_auto``)"""
    operator: str = "none"
    """"scripted": a STAND-IN for a person (`tinker.stand_in_operator`: a script that looks at the simulator's
    ground truth) takes over on ``intervention`` and labels episodes during the fine-tuning phase only; the
    safety node then runs with ``intervention_topic: intervention``. "none": no one"""

    def __post_init__(self) -> None:
        if self.env_id not in ENVS:
            raise ConfigError(f"DemoConfig.env_id: expected one of {list(ENVS)}, got {self.env_id!r}")
        if not self.episode_cycles:
            from tinker_sim.registration import ENV_IDS

            self.episode_cycles = int(ENV_IDS[self.env_id]["max_episode_steps"])
        for k in ("episodes_before", "finetune_episodes", "episodes_after", "episode_cycles"):
            if int(getattr(self, k)) < (0 if k == "finetune_episodes" else 1):
                raise ConfigError(f"DemoConfig.{k}: expected a positive count, got {getattr(self, k)!r}")
        if self.reward not in ("sim", "sensors"):
            raise ConfigError(f"DemoConfig.reward: expected 'sim' or 'sensors', got {self.reward!r}")
        if self.latency_compensation != "auto":
            check_steps(self.latency_compensation, "DemoConfig.latency_compensation")
        if self.operator not in OPERATORS:
            raise ConfigError(f"DemoConfig.operator: expected one of {list(OPERATORS)}, got {self.operator!r}")


def prepare_out(cfg: DemoConfig) -> Path:
    """The output directory, checked inputs, and nothing an earlier demo in it left (a demo starts from the
    pretrained policy)."""
    out = Path(cfg.out).resolve()
    for need, what in ((cfg.bundle, "bundle"), (cfg.checkpoint, "checkpoint"), (cfg.dynamics, "dynamics")):
        if not need or not Path(need).exists():
            raise ConfigError(f"demo {what}: {need or '(empty)'} does not exist")
    if cfg.demonstrations and not Path(cfg.demonstrations, "index.json").is_file():
        raise ConfigError(f"demo demonstrations: {cfg.demonstrations} is not a saved replay (no index.json)")
    if cfg.reward == "sensors":  # refused here, with the reason, rather than by the bridge node at start-up
        from tinker.reward_source import sensor_outcome

        sensor_outcome(cfg.bundle, cfg.env_id)
    check_task(cfg)
    check_dynamics(cfg)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("learner", "bundles", "received", "trace", "nodes"):
        shutil.rmtree(out / stale, ignore_errors=True)
    return out


def check_task(cfg: DemoConfig) -> None:
    """Refuse a bundle of another task, a checkpoint RL cannot fine-tune, and the stand-in operator where it has no
    script (it reaches for targets only)."""
    from tinker.bundle_io import top_manifest

    trained = top_manifest(cfg.bundle).env_id
    if trained and trained != cfg.env_id:
        raise ConfigError(f"demo bundle: {cfg.bundle} was trained on {trained}, the demo runs {cfg.env_id} (--env)")
    meta = Path(cfg.checkpoint, "meta.json")
    algo = json.loads(meta.read_text()).get("algo") if meta.is_file() else None
    if algo == "bc":
        raise ConfigError(f"demo checkpoint: {cfg.checkpoint} is an imitation (BC) policy, which online RL cannot "
                          f"fine-tune; give its RL prior (tinker prior {cfg.checkpoint} --out DIR; the shipped "
                          f"sorter's is pretrained/arm_sort/rl_prior)")
    if cfg.operator != "none" and cfg.env_id != "tinker/ArmReach-v0":
        raise ConfigError(f"demo operator: the scripted stand-in reaches for targets; {cfg.env_id} has no script for it")


def check_dynamics(cfg: DemoConfig) -> None:
    """Refuse a dynamics file with a key that cannot act on the demo's robot (its task; a camera in the loop only
    for a bundle whose perception takes an image) and policy (`tinker_sim.dynamics_check`), before anything starts."""
    from tinker_deploy.bundle import resolve_bundle_dir
    from tinker_deploy.manifest import Manifest
    from tinker_sim.dynamics import DynamicsParams
    from tinker_sim.dynamics_check import PolicyInputs, check_dynamics_act

    path = resolve_bundle_dir(cfg.bundle) / "manifest.json"
    manifest = Manifest.from_json(path.read_bytes(), str(path))
    camera = _has_camera(cfg.bundle)
    check_dynamics_act(DynamicsParams.load(cfg.dynamics), cfg.env_id,
                       PolicyInputs(camera=camera, image_terms=tuple(manifest.image_terms)), source=str(cfg.dynamics),
                       policy=f"the demo's policy {cfg.bundle}" + ("" if camera else " (its loop renders no camera)"))


REAL_FRACTION = {"sim": 1.0, "sensors": 0.5}
"""Share of live data in each of the learner's batches, by reward source, as measured (README, "Live data only").
With the simulator's reward, live data only: the pretraining replay holds the nominal robot, whose rewards contradict
this robot's for the same observation. With the success sensor's reward, half pretraining data: live data only
took the vision policy from 15/20 to 9/20 on far_latency_reach, where half and half went from 17/20 to 16/20."""


DEMONSTRATIONS = {"real_fraction": 0.5, "seed_replay_from_init": False, "updates_per_interval": 2,
                  "gate_min_success": 0.5, "gate_min_return": None}
"""The learner's settings with demonstrations (RLPD's half demonstrations, half live data; measured in process on
far_latency_sort: docs/sim2real/sort_finetune.md), two updates per live transition as there (the imitation term
runs on SAC's autograd step; four were not tried in the loop). The gate asks a candidate to sort every object in half
of its nominal episodes (the imitation policy does in ~98%), and no e-stop."""


def learner_config(cfg: DemoConfig, out: Path) -> dict:
    """The learner's settings: fresh endpoints, the pretrained checkpoint, the gate; ``cfg.learner`` overrides.

    Its ``warmup`` (live transitions before the first update), unless overridden, is the live share of one batch
    (``batch_size * real_fraction``): from then on a batch's live samples can all be different transitions. That is
    256 with the simulator's reward, 128 with the sensors' (the other half from the pretraining replay) and with
    demonstrations (the other half from them).
    A fixed 256 left the moved camera's loop untrained: its success sensor ends an episode within ~9 cycles, 50
    episodes gave ~320-460 live transitions, and the learner made 0 updates (docs/sim2real/sensor_reward.md)."""
    ends = free_endpoints(4)
    lconf = {
        "transitions_endpoint": ends[0], "weights_endpoint": ends[1], "params_endpoint": ends[2], "control_endpoint": ends[3],
        "algo": "sac", "env_id": cfg.env_id, "env_kwargs": {"randomize": True},
        "init_checkpoint": str(Path(cfg.checkpoint).resolve()), "device": "auto",
        "batch_size": 256, "update_interval": 1, "updates_per_interval": 4,
        "real_fraction": REAL_FRACTION[cfg.reward],
        "publish_every": 1000, "checkpoint_every": 0, "checkpoint_dir": str(out / "learner"),
        "bundle_dir": str(out / "bundles"), "gate_episodes": 10, "gate_max_estops": 0,
        # The gate's simulation has the nominal calibration, so a policy that learned the robot's
        # calibration error misses there by that error: the gate asks for safety (no e-stop) and
        # a policy that still brings the arm near its targets (mean return), not for sim success.
        "gate_min_success": 0.0, "gate_min_return": -10.0,
        "param_sync_every": 0, "seed": cfg.seed,
        # a vision bundle keeps its locator: each published bundle puts it in front of the learned actor
        "perception_bundle": str(Path(cfg.bundle).resolve()) if _has_camera(cfg.bundle) else None,
        **(DEMONSTRATIONS if cfg.demonstrations else {}),
        "demonstrations": str(Path(cfg.demonstrations).resolve()) if cfg.demonstrations else None,
    }
    lconf.update(cfg.learner)
    lconf.setdefault("warmup", max(1, round(int(lconf["batch_size"]) * float(lconf["real_fraction"]))))
    return lconf


def _has_camera(bundle: str) -> bool:
    """Whether the bundle's perception takes a camera image (the graph then renders the views it was trained on)."""
    from tinker.bundle_io import camera_settings

    return bool(camera_settings(bundle))


def graph_overrides(cfg: DemoConfig, out: Path, lconf: dict) -> dict:
    """Node parameters for the demo: its robot (dynamics, episodes), bundle, traces and the learner's endpoints."""
    bundle, camera = str(Path(cfg.bundle).resolve()), _has_camera(cfg.bundle)
    return {
        "/**": {"control_period": cfg.control_period, "trace_dir": str(out / "trace"),
                "latency_compensation": 0 if cfg.latency_compensation == "auto" else int(cfg.latency_compensation),
                "latency_auto": cfg.latency_compensation == "auto"},
        "sim_robot": {"dynamics": str(Path(cfg.dynamics).resolve()), "episode_cycles": cfg.episode_cycles,
                      "seed": cfg.seed, **({} if camera else {"camera": False}),
                      # from sensors, the episode ends on the success sensor or the time limit, not when the
                      # simulator sees success (that reset would tell the learner what only the simulator knows)
                      "end_on_success": cfg.reward == "sim"},
        # perception and the success sensor as bringup.yaml has them: a camera bundle's target estimate averaged
        # over the frames that show it (estimate: auto), which the sensor reads as it is (sensor_hold_target: false)
        "perception": {"bundle": bundle},
        "policy": {"bundle": bundle},
        "experience_bridge": {"reward_source": cfg.reward, "sensor_bundle": bundle, "sensor_env": cfg.env_id,
                              "learner_endpoint": lconf["transitions_endpoint"],
                              "weights_endpoint": lconf["weights_endpoint"],
                              "bundle_dir": str(out / "received")},
        "view": {"learner_control": lconf["control_endpoint"]},
        # the takeover is opt-in: on only when someone (here the stand-in) is meant to take over
        **({"safety": {"intervention_topic": "intervention"}} if cfg.operator != "none" else {}),
    }


def start_learner(cfg: DemoConfig, learner: LearnerProcess, progress: Progress) -> None:
    """Start the learner and wait until it answers; it stays paused (at the fine-tuning rate) until phase 2."""
    progress(f"starting the learner (fine-tunes {cfg.checkpoint}) ...")
    learner.start()
    ready = learner.wait_ready()
    progress(f"  learner ready: {ready.get('seeded_from_init', 0)} pretraining transitions in its sim replay")
    learner.ctl("pause")
    if cfg.finetune_lr:
        learner.ctl("set", lr=cfg.finetune_lr)


def bring_up(cfg: DemoConfig, graph: Any, progress: Progress) -> Monitor:
    """The monitor first (it must see the first episode), then the graph."""
    monitor = Monitor(period=cfg.control_period)
    progress("bringing up the ROS 2 graph: sim_robot, perception, policy, safety, experience_bridge ...")
    graph.start()
    return monitor


class DemoPhases:
    """Runs the three phases on a running graph, counting episodes with the monitor; resets a latched e-stop
    as an operator would (each reset is in the report)."""

    def __init__(self, cfg: DemoConfig, graph: Any, monitor: Monitor, learner: LearnerProcess, progress: Progress):
        self.cfg, self.graph, self.monitor, self.learner, self.progress = cfg, graph, monitor, learner, progress
        self.resets: list[str] = []
        self.operator_counts: dict | None = None
        self.t_start = time.monotonic()

    def run(self) -> None:
        cfg = self.cfg
        self.progress(f"phase 1/3: {cfg.episodes_before} episodes with the pretrained policy")
        self.wait_for("before", cfg.episodes_before)
        if cfg.finetune_episodes:
            self.learner.ctl("resume")
            self.progress(f"phase 2/3: fine-tuning online for {cfg.finetune_episodes} episodes"
                          + (" with the STAND-IN operator (a script, not a person)" if cfg.operator != "none" else ""))
            operator = self.start_operator()
            try:
                self.wait_for("finetune", cfg.finetune_episodes)
            finally:
                self.stop_operator(operator)
            self.final_publish()
        self.progress(f"phase 3/3: {cfg.episodes_after} episodes with the newest policy")
        self.wait_for("after", cfg.episodes_after)
        time.sleep(1.5)  # one more diagnostics heartbeat

    def start_operator(self) -> Any:
        """The stand-in person's process (`tinker.stand_in_operator`), for the fine-tuning phase; None: no one."""
        if self.cfg.operator == "none":
            return None
        import subprocess
        import sys

        out = Path(self.cfg.out).resolve()
        log = open(out / "nodes" / "stand_in_operator.log", "ab")
        return subprocess.Popen([sys.executable, "-m", "tinker.stand_in_operator", "--period",
                                 str(self.cfg.control_period), "--summary", str(out / "operator.json")],
                                stdout=log, stderr=subprocess.STDOUT)

    def stop_operator(self, proc: Any) -> None:
        """Ctrl-C to the stand-in (it writes its counts), then wait; its counts go into the report."""
        if proc is None:
            return
        import signal
        import subprocess

        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        f = Path(self.cfg.out).resolve() / "operator.json"
        self.operator_counts = json.loads(f.read_text()) if f.is_file() else {"error": f"no {f} (exit {proc.returncode})"}
        self.progress(f"  stand-in operator: {json.dumps(self.operator_counts)[:300]}")

    def final_publish(self) -> None:
        """Pause the learner, gate and publish its last candidate, and wait (30 s at most) for the policy node
        to run it; episodes meanwhile count in no phase."""
        self.learner.ctl("pause")
        self.monitor.phase = "publish"
        pub = self.learner.ctl("publish", timeout=300.0)
        self.progress(f"  final publish: {json.dumps({k: pub.get(k) for k in ('ok', 'version', 'gate', 'published') if k in pub}, default=str)[:300]}")
        want = int(self.learner.ctl("status").get("version", 0) or 0)
        end = time.monotonic() + 30
        # != rather than <: a vision bundle's own version is its training step (25000), the learner's count from 1
        while want and int(self.monitor.policy_value("model_version", "0") or 0) != want and time.monotonic() < end:
            self.reset_estop()  # the operator keeps watching: a stop here held the robot for the whole wait (30 s)
            time.sleep(0.2)

    def reset_estop(self) -> None:
        """The operator's move after a latched e-stop: look at the cause, then reset (counted in the report)."""
        vals = self.monitor.node_values("safety")
        if vals.get("estopped") == "True":
            ok, msg = self.graph.call_trigger("safety/reset")
            self.resets.append(f"{vals.get('estop_cause', '?')}: reset {'ok' if ok else 'refused: ' + msg}")
            self.progress(f"  e-stop latched ({vals.get('estop_cause', '?')}); operator reset: {ok} {msg}")
            time.sleep(1.2)  # the next heartbeat shows the cleared state

    def wait_for(self, phase: str, n: int) -> None:
        """Until ``n`` episodes of ``phase`` have ended. A node that dies is started again where it can be
        (`tinker.bringup.Graph.supervise`), else the demo ends with its log."""
        monitor = self.monitor
        monitor.phase = phase
        last = -1
        while monitor.count(phase) < n:
            for line in self.graph.supervise():
                self.progress(f"  {line}")
            self.reset_estop()
            c = monitor.count(phase)
            if c != last:
                k = sum(e["success"] for e in monitor.episodes if e["phase"] == phase)
                self.progress(f"  {phase}: episode {c}/{n}, success {k}/{c}, policy v{monitor.policy_value('model_version', '0')}")
                last = c
            time.sleep(0.2)


def collect_report(cfg: DemoConfig, out: Path, run: DemoPhases) -> dict:
    """The report's numbers, read from the monitor (episodes, /diagnostics), the learner and the traces."""
    monitor = run.monitor
    status = run.learner.ctl("status")
    safety = monitor.node_values("safety")
    robot = monitor.node_values("sim_robot")
    policy = monitor.node_values("policy")
    bridge = monitor.node_values("experience_bridge")
    interventions = sum(int(v) for k, v in safety.items() if k.startswith("interventions.")
                        and k.split(".", 1)[1] in ("clipped", "rate_limited", "workspace", "collision", "held"))
    misses = sum(int(monitor.node_values(n).get("deadline_misses", "0") or 0)
                 for n in ("sim_robot", "perception", "policy", "safety")) + int(robot.get("sim_misses", "0") or 0)
    episodes = list(monitor.episodes)
    ingested = status.get("ingested")
    return {
        "env_id": cfg.env_id, "dynamics": str(cfg.dynamics), "bundle": cfg.bundle, "reward_source": cfg.reward,
        "control_period": cfg.control_period, "wall_s": time.monotonic() - run.t_start,
        "before": phase_summary(episodes, "before"), "finetune": phase_summary(episodes, "finetune"),
        "after": phase_summary(episodes, "after"), "by_version": version_summary(episodes),
        "latency": latency_from_traces(out / "trace"),
        "deadline_misses": misses, "safety_interventions": interventions,
        # unsafe states the robot itself reached (beyond URDF limits, touching the ground), counted
        # from the physics in sim_robot, independently of the safety node
        "unsafe_states": {k.split(".", 1)[1]: int(v) for k, v in robot.items() if k.startswith("unsafe_states.")},
        "safety_counters": {k: v for k, v in safety.items() if k.startswith("interventions.")},
        # what the safety node measured from its states and commands, and what the graph compensated
        "command_latency": {"measured": safety.get("command_latency_periods", "not reported"),
                            "fit": safety.get("command_latency_fit", ""),
                            # at the end of the run (latency_auto: what the safety node took)
                            "compensated": int(safety.get("latency_compensation", "0") or 0),
                            "auto": cfg.latency_compensation == "auto"},
        "estops": run.resets,
        "policy_reloads": int(policy.get("reloads", "0") or 0), "bridge": bridge,
        "operator": cfg.operator, "operator_counts": run.operator_counts,
        "learner": {"updates": status.get("updates"),
                    "ingested_total": sum(ingested.values()) if isinstance(ingested, dict) else ingested,
                    "ingested": ingested, "replay": status.get("replay"), "sampled": status.get("sampled"),
                    "published": status.get("published"), "version": status.get("version"),
                    "demonstrations": status.get("demonstrations"), "last_gate": status.get("last_gate")},
        "episodes": episodes, "config": asdict(cfg),
    }


def run_demo(cfg: DemoConfig, progress: Progress = print) -> dict:
    """Run the demo; returns the report dict (also written to ``out/report.json`` and ``report.md``)."""
    from tinker.bringup import Graph

    out = prepare_out(cfg)
    lconf = learner_config(cfg, out)
    learner = LearnerProcess(lconf, out)
    graph = Graph(overrides=graph_overrides(cfg, out, lconf), run_dir=out / "nodes",
                  record=out / "run.mcap" if cfg.record else None, view=cfg.view)
    monitor = None
    try:
        start_learner(cfg, learner, progress)
        monitor = bring_up(cfg, graph, progress)
        run = DemoPhases(cfg, graph, monitor, learner, progress)
        run.run()
        report = collect_report(cfg, out, run)
    finally:
        try:
            graph.stop()
        finally:
            if monitor is not None:
                monitor.close()
            learner.stop()
    return write_report(report, run.monitor.interventions, out, progress)
