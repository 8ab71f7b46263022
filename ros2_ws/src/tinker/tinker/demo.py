"""`run_demo`: the main job end to end on the simulated robot.

1. A learner process starts from the shipped pretrained checkpoint (SAC, trained with domain
   randomization by ``tinker train --config configs/sac_arm_reach.yaml``), paused.
2. The ROS 2 graph comes up (sim_robot → perception → policy → safety → sim_robot, plus the
   experience bridge) on a dynamics variant that differs from the training nominal, running the
   shipped pretrained bundle through onnxruntime every 50 ms.
3. *Before*: ``episodes_before`` episodes with the pretrained policy (transitions already stream to
   the learner). *Fine-tune*: the learner resumes, trains on the live transitions and publishes
   gated bundles, which the policy node hot-reloads. *After*: the learner pauses and
   ``episodes_after`` episodes run with the newest policy.
4. The report (JSON, Markdown and a PNG) says what the run measured: success before and after,
   end-to-end cycle latency p50/p99, deadline misses, safety interventions, policy versions.

Every number in the report comes from this run: episode outcomes from the robot's ``task`` topic,
latency from the nodes' trace spans, counters from their /diagnostics.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from tinker.priority import background_child
from tinker_core.errors import ConfigError, TinkerError
from tinker_core.evaluate import wilson_interval
from tinker_core.transport import free_endpoints


@dataclass
class DemoConfig:
    """Settings of one demo run (defaults: the README's ``tinker demo``)."""

    bundle: str = ""
    """pretrained bundle directory run by the perception and policy nodes"""
    checkpoint: str = ""
    """pretrained algorithm checkpoint the learner fine-tunes"""
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
    episode_cycles: int = 50
    """cycles per episode (2.5 s at 50 ms) unless the target is reached first"""
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

    def __post_init__(self) -> None:
        for k in ("episodes_before", "finetune_episodes", "episodes_after", "episode_cycles"):
            if int(getattr(self, k)) < (0 if k == "finetune_episodes" else 1):
                raise ConfigError(f"DemoConfig.{k}: expected a positive count, got {getattr(self, k)!r}")


class Monitor:
    """A ROS node in its own context that records episodes (from ``task``) and /diagnostics."""

    def __init__(self, namespace: str = "", period: float = 0.05):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
        from std_msgs.msg import Float64MultiArray

        from tinker.wire import COMMAND_QOS, decode_meta

        self._decode = decode_meta
        self.ctx = Context()
        domain = os.environ.get("ROS_DOMAIN_ID", "")
        rclpy.init(context=self.ctx, args=[], domain_id=int(domain) if domain.isdigit() else None,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("tinker_demo_monitor", context=self.ctx)
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self.node.create_subscription(Float64MultiArray, f"{ns}/task", self._on_task, COMMAND_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.lock = threading.Lock()
        self.episodes: list[dict] = []
        self.diag: dict[str, dict[str, str]] = {}
        self.phase = "warmup"
        self._t0 = time.monotonic()
        self._seen_success: dict[int, bool] = {}
        self._first_cycle: dict[int, int] = {}
        self._success_cycle: dict[int, int] = {}
        self.period = period
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _on_task(self, msg: Any) -> None:
        meta = self._decode(msg.layout.dim[0].label) if msg.layout.dim else {}
        v = msg.data
        if len(v) < 4:
            return
        ep = int(meta.get("episode", -1))
        done, success = bool(v[1] > 0.5), bool(v[2] > 0.5)
        cycle = int(meta.get("cycle", 0))
        with self.lock:
            first = self._first_cycle.setdefault(ep, cycle)
            if success and ep not in self._success_cycle:
                self._success_cycle[ep] = cycle
            self._seen_success[ep] = self._seen_success.get(ep, False) or success
            if done:
                won = self._success_cycle.pop(ep, None)
                self._first_cycle.pop(ep, None)
                version = self.policy_value("model_version", "0")
                self.episodes.append({"episode": ep, "success": self._seen_success.pop(ep),
                                      "cycles": cycle - first + 1,
                                      "time_to_success_s": None if won is None else (won - first + 1) * self.period,
                                      "distance_m": float(v[3]), "phase": self.phase, "cycle": cycle,
                                      "t_s": time.monotonic() - self._t0,
                                      "policy_version": int(version) if str(version).isdigit() else 0})

    def _on_diag(self, msg: Any) -> None:
        with self.lock:
            for st in msg.status:
                self.diag[st.name] = {kv.key: kv.value for kv in st.values}

    def policy_value(self, key: str, default: str = "") -> str:
        for name, vals in self.diag.items():
            if name.endswith("/policy"):
                return vals.get(key, default)
        return default

    def node_values(self, suffix: str) -> dict[str, str]:
        with self.lock:
            for name, vals in self.diag.items():
                if name.endswith("/" + suffix):
                    return dict(vals)
        return {}

    def count(self, phase: str) -> int:
        with self.lock:
            return sum(1 for e in self.episodes if e["phase"] == phase)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


class LearnerProcess:
    """``tinker learner`` as a child process, steered over its control socket."""

    def __init__(self, config: dict, out: Path):
        self.config = config
        self.path = out / "learner.yaml"
        self.path.write_text(yaml.safe_dump({"learner": config}, sort_keys=False))
        self.log_path = out / "learner.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "wb")
        # The robot loop comes first: the learner runs at a lower priority with one compute thread, so
        # on a small machine training slows down rather than the 50 ms cycle missing its deadline.
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "tinker_cli", "learner", "--config", str(self.path)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                     preexec_fn=background_child)
        log.close()

    def ctl(self, cmd: str, timeout: float = 120.0, **values: Any) -> dict:
        from tinker_core.transport import ControlClient

        req: dict[str, Any] = {"cmd": cmd, "timeout_s": timeout}
        if values:
            req["values"] = values
        cli = ControlClient(self.config["control_endpoint"], timeout_ms=int(timeout * 1000))
        try:
            return cli.request(req)
        finally:
            cli.close()

    def wait_ready(self, timeout: float = 180.0) -> dict:
        end = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise TinkerError(f"the learner exited with code {self.proc.returncode}; its log "
                                  f"({self.log_path}) ends:\n{self.tail()}")
            try:
                return self.ctl("status", timeout=5.0)
            except TinkerError as e:
                last = e
                time.sleep(0.5)
        raise TinkerError(f"the learner did not answer within {timeout:.0f} s ({last}); log:\n{self.tail()}")

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").strip().splitlines()[-n:]) \
            if self.log_path.is_file() else ""

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def latency_from_traces(trace_dir: Path) -> dict:
    """End-to-end cycle latency (state publish → safe command at the robot) from the nodes' spans."""
    from tinker_core.tracer import read_trace

    files = sorted(trace_dir.glob("*.jsonl"))
    events = read_trace(files) if files else []
    e2e = sorted((e["start_ns"], e["dur_ns"] / 1e6) for e in events if e["module"] == "loop_e2e")
    if not e2e:
        return {"cycles": 0, "e2e_p50_ms": None, "e2e_p99_ms": None, "e2e_max_ms": None, "series": []}
    lat = np.array([d for _, d in e2e])
    t0 = e2e[0][0]
    return {"cycles": len(e2e), "e2e_p50_ms": float(np.percentile(lat, 50)),
            "e2e_p99_ms": float(np.percentile(lat, 99)), "e2e_max_ms": float(lat.max()),
            "series": [((s - t0) / 1e9, d) for s, d in e2e]}


def phase_summary(episodes: list[dict], phase: str) -> dict:
    rows = [e for e in episodes if e["phase"] == phase]
    k, n = sum(e["success"] for e in rows), len(rows)
    lo, hi = wilson_interval(k, n)
    versions = sorted({e["policy_version"] for e in rows})
    tts = [e["time_to_success_s"] for e in rows if e.get("time_to_success_s") is not None]
    return {"episodes": n, "successes": k, "success_rate": k / n if n else 0.0, "ci_low": lo, "ci_high": hi,
            "mean_time_to_success_s": float(np.mean(tts)) if tts else None, "policy_versions": versions}


def plot_report(report: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = report["episodes"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6.5))
    colors = {"before": "tab:red", "finetune": "tab:orange", "after": "tab:green"}
    if eps:
        x = np.arange(len(eps))
        s = np.array([e["success"] for e in eps], dtype=float)
        w = min(10, len(s))
        roll = np.convolve(s, np.ones(w) / w, mode="full")[: len(s)] / np.minimum(np.arange(1, len(s) + 1) / w, 1)
        for ph, c in colors.items():
            idx = [i for i, e in enumerate(eps) if e["phase"] == ph]
            if idx:
                ax1.scatter(idx, s[idx], s=12, color=c, label=f"{ph} (episode success)")
        ax1.plot(x, roll, color="k", lw=1.5, label=f"rolling success ({w} episodes)")
        for i in range(1, len(eps)):
            if eps[i]["policy_version"] != eps[i - 1]["policy_version"]:
                ax1.axvline(i - 0.5, color="tab:blue", lw=0.8, ls=":")
    ax1.set_ylim(-0.05, 1.05)
    ax1.set_xlabel("episode (dotted: hot-reloaded policy version)")
    ax1.set_ylabel("success")
    ax1.set_title(f"tinker demo: success before {report['before']['success_rate'] * 100:.0f}% "
                  f"→ after {report['after']['success_rate'] * 100:.0f}% on {Path(report['dynamics']).stem}")
    ax1.legend(fontsize=8, loc="lower right")
    series = report["latency"].pop("series", [])
    if series:
        t, d = zip(*series)
        ax2.plot(t, d, lw=0.5, color="tab:gray")
        ax2.axhline(report["latency"]["e2e_p99_ms"], color="tab:red", ls="--", lw=1,
                    label=f"p99 {report['latency']['e2e_p99_ms']:.2f} ms")
        ax2.axhline(report["latency"]["e2e_p50_ms"], color="tab:blue", ls="--", lw=1,
                    label=f"p50 {report['latency']['e2e_p50_ms']:.2f} ms")
        ax2.legend(fontsize=8)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("state → safe command (ms)")
    ax2.set_title(f"end-to-end cycle latency, {report['control_period'] * 1000:.0f} ms cycle")
    fig.tight_layout()
    path = out / "demo.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_report(r: dict) -> str:
    b, a, lat = r["before"], r["after"], r["latency"]

    def pct(x: float) -> str:
        return f"{x * 100:.1f}%"

    def tts(p: dict) -> str:
        return "n/a" if p["mean_time_to_success_s"] is None else f"{p['mean_time_to_success_s']:.2f} s"

    p50 = "n/a" if lat["e2e_p50_ms"] is None else f"{lat['e2e_p50_ms']:.2f} ms"
    p99 = "n/a" if lat["e2e_p99_ms"] is None else f"{lat['e2e_p99_ms']:.2f} ms"
    unsafe = {k: v for k, v in r.get("unsafe_states", {}).items() if v}
    pub = r["learner"].get("published") or {}
    g = pub.get("gate") if isinstance(pub, dict) else None
    gate = "n/a" if not g else (f"{'passed' if g.get('passed') else 'refused'} (sim success {pct(g['success_rate'])}, "
                                f"{g.get('estops', 0)} e-stops, mean return {g['mean_return']:.2f})")
    return "\n".join([
        f"tinker demo — {r['env_id']} on dynamics {Path(r['dynamics']).stem} (training used randomized nominal)",
        "",
        "| | episodes | success | 95% CI | mean time to success | policy versions |",
        "|---|---|---|---|---|---|",
        f"| before fine-tuning | {b['episodes']} | {pct(b['success_rate'])} | {pct(b['ci_low'])}–{pct(b['ci_high'])} "
        f"| {tts(b)} | {b['policy_versions']} |",
        f"| during fine-tuning | {r['finetune']['episodes']} | {pct(r['finetune']['success_rate'])} | "
        f"{pct(r['finetune']['ci_low'])}–{pct(r['finetune']['ci_high'])} | {tts(r['finetune'])} "
        f"| {r['finetune']['policy_versions']} |",
        f"| after fine-tuning | {a['episodes']} | {pct(a['success_rate'])} | {pct(a['ci_low'])}–{pct(a['ci_high'])} "
        f"| {tts(a)} | {a['policy_versions']} |",
        "",
        f"cycle latency (state publish → safe command at the robot): p50 {p50}, p99 {p99} over {lat['cycles']} cycles",
        f"deadline misses: {r['deadline_misses']}",
        f"safety: {sum(unsafe.values())} unsafe states reached by the robot{' ' + str(unsafe) if unsafe else ''}; "
        f"{r['safety_interventions']} commands adjusted by the SafetyWrapper (clipped, rate-limited, held); "
        f"e-stops: {', '.join(r['estops']) or 'none'}",
        f"learner: {r['learner'].get('updates', 0)} updates on {r['learner'].get('ingested_total', 0)} live transitions, "
        f"{r['learner'].get('version') or 0} gated versions published; newest gate: {gate}; "
        f"policy node reloads: {r['policy_reloads']}",
        f"transitions sent by the bridge: {r['bridge'].get('sent', '0')}, dropped: {r['bridge'].get('dropped', '0')}",
    ])


def run_demo(cfg: DemoConfig, progress: Callable[[str], None] = print) -> dict:
    """Run the demo; returns the report dict (also written to ``out/report.json`` and ``report.md``)."""
    from tinker.bringup import Graph

    out = Path(cfg.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for need, what in ((cfg.bundle, "bundle"), (cfg.checkpoint, "checkpoint"), (cfg.dynamics, "dynamics")):
        if not need or not Path(need).exists():
            raise ConfigError(f"demo {what}: {need or '(empty)'} does not exist")
    trace_dir = out / "trace"
    # a demo starts from the pretrained policy, never from what an earlier demo in this directory left
    for stale in ("learner", "bundles", "received", "trace", "nodes"):
        shutil.rmtree(out / stale, ignore_errors=True)
    ends = free_endpoints(4)
    lconf = {
        "transitions_endpoint": ends[0], "weights_endpoint": ends[1], "params_endpoint": ends[2], "control_endpoint": ends[3],
        "algo": "sac", "env_id": "tinker/ArmReach-v0", "env_kwargs": {"randomize": True},
        "init_checkpoint": str(Path(cfg.checkpoint).resolve()), "device": "auto",
        "batch_size": 256, "update_interval": 1, "updates_per_interval": 4, "warmup": 256, "real_fraction": 0.5,
        "publish_every": 1000, "checkpoint_every": 0, "checkpoint_dir": str(out / "learner"),
        "bundle_dir": str(out / "bundles"), "gate_episodes": 10, "gate_max_estops": 0,
        # The gate's simulation has the nominal calibration, so a policy that learned the robot's
        # calibration error misses there by that error: the gate asks for safety (no e-stop) and
        # a policy that still brings the arm near its targets (mean return), not for sim success.
        "gate_min_success": 0.0, "gate_min_return": -10.0,
        "param_sync_every": 0, "seed": cfg.seed,
    }
    lconf.update(cfg.learner)
    learner = LearnerProcess(lconf, out)
    bundle = str(Path(cfg.bundle).resolve())
    overrides = {
        "/**": {"control_period": cfg.control_period, "trace_dir": str(trace_dir)},
        "sim_robot": {"dynamics": str(Path(cfg.dynamics).resolve()), "episode_cycles": cfg.episode_cycles,
                      "seed": cfg.seed, "camera": False},
        "perception": {"bundle": bundle},
        "policy": {"bundle": bundle},
        "experience_bridge": {"learner_endpoint": lconf["transitions_endpoint"],
                              "weights_endpoint": lconf["weights_endpoint"],
                              "bundle_dir": str(out / "received")},
        "view": {"learner_control": lconf["control_endpoint"]},
    }
    progress(f"starting the learner (fine-tunes {cfg.checkpoint}) ...")
    learner.start()
    monitor = None
    graph = Graph(overrides=overrides, run_dir=out / "nodes", record=out / "run.mcap" if cfg.record else None,
                  view=cfg.view)
    report: dict[str, Any] = {}
    try:
        ready = learner.wait_ready()
        progress(f"  learner ready: {ready.get('seeded_from_init', 0)} pretraining transitions in its sim replay")
        learner.ctl("pause")
        if cfg.finetune_lr:
            learner.ctl("set", lr=cfg.finetune_lr)
        monitor = Monitor(period=cfg.control_period)
        progress("bringing up the ROS 2 graph: sim_robot, perception, policy, safety, experience_bridge ...")
        graph.start()
        t_start = time.monotonic()

        resets: list[str] = []

        def reset_estop() -> None:
            """The operator's move after a latched e-stop: look at the cause, then reset (counted in the report)."""
            vals = monitor.node_values("safety")
            if vals.get("estopped") == "True":
                ok, msg = graph.call_trigger("safety/reset")
                resets.append(f"{vals.get('estop_cause', '?')}: reset {'ok' if ok else 'refused: ' + msg}")
                progress(f"  e-stop latched ({vals.get('estop_cause', '?')}); operator reset: {ok} {msg}")
                time.sleep(1.2)  # the next heartbeat shows the cleared state

        def wait_for(phase: str, n: int) -> None:
            monitor.phase = phase
            last = -1
            while monitor.count(phase) < n:
                reset_estop()
                for name, p in graph.procs.items():
                    if p.poll() is not None:
                        raise TinkerError(f"node {name} died (code {p.returncode}); log:\n{graph.log(name)[-2000:]}")
                c = monitor.count(phase)
                if c != last:
                    k = sum(e["success"] for e in monitor.episodes if e["phase"] == phase)
                    progress(f"  {phase}: episode {c}/{n}, success {k}/{c}, policy v{monitor.policy_value('model_version', '0')}")
                    last = c
                time.sleep(0.2)

        progress(f"phase 1/3: {cfg.episodes_before} episodes with the pretrained policy")
        wait_for("before", cfg.episodes_before)
        if cfg.finetune_episodes:
            learner.ctl("resume")
            progress(f"phase 2/3: fine-tuning online for {cfg.finetune_episodes} episodes")
            wait_for("finetune", cfg.finetune_episodes)
            learner.ctl("pause")
            monitor.phase = "publish"  # episodes while the last candidate is gated count in no phase
            pub = learner.ctl("publish", timeout=300.0)
            progress(f"  final publish: {json.dumps({k: pub.get(k) for k in ('ok', 'version', 'gate', 'published') if k in pub}, default=str)[:300]}")
            want = int(learner.ctl("status").get("version", 0) or 0)
            end = time.monotonic() + 30
            while want and int(monitor.policy_value("model_version", "0") or 0) < want and time.monotonic() < end:
                time.sleep(0.2)
        progress(f"phase 3/3: {cfg.episodes_after} episodes with the newest policy")
        wait_for("after", cfg.episodes_after)
        time.sleep(1.5)  # one more diagnostics heartbeat
        status = learner.ctl("status")
        safety = monitor.node_values("safety")
        robot = monitor.node_values("sim_robot")
        policy = monitor.node_values("policy")
        bridge = monitor.node_values("experience_bridge")
        interventions = sum(int(v) for k, v in safety.items() if k.startswith("interventions.")
                            and k.split(".", 1)[1] in ("clipped", "rate_limited", "workspace", "collision", "held"))
        misses = sum(int(monitor.node_values(n).get("deadline_misses", "0") or 0)
                     for n in ("sim_robot", "perception", "policy", "safety")) + int(robot.get("sim_misses", "0") or 0)
        episodes = list(monitor.episodes)
        report = {
            "env_id": "tinker/ArmReach-v0", "dynamics": str(cfg.dynamics), "bundle": cfg.bundle,
            "control_period": cfg.control_period, "wall_s": time.monotonic() - t_start,
            "before": phase_summary(episodes, "before"), "finetune": phase_summary(episodes, "finetune"),
            "after": phase_summary(episodes, "after"), "latency": latency_from_traces(trace_dir),
            "deadline_misses": misses, "safety_interventions": interventions,
            # unsafe states the robot itself reached (beyond URDF limits, touching the ground), counted
            # from the physics in sim_robot, independently of the safety node
            "unsafe_states": {k.split(".", 1)[1]: int(v) for k, v in robot.items() if k.startswith("unsafe_states.")},
            "safety_counters": {k: v for k, v in safety.items() if k.startswith("interventions.")},
            "estops": resets,
            "policy_reloads": int(policy.get("reloads", "0") or 0), "bridge": bridge,
            "learner": {"updates": status.get("updates"), "ingested_total": sum((status.get("ingested") or {}).values())
                        if isinstance(status.get("ingested"), dict) else status.get("ingested"),
                        "published": status.get("published"), "version": status.get("version")},
            "episodes": episodes, "config": asdict(cfg),
        }
    finally:
        try:
            graph.stop()
        finally:
            if monitor is not None:
                monitor.close()
            learner.stop()
    png = plot_report(report, out)
    report["plot"] = str(png)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    text = format_report(report)
    (out / "report.md").write_text(text + f"\n\n![demo]({png.name})\n")
    progress("")
    progress(text)
    progress(f"\nreport: {out / 'report.md'}, {out / 'report.json'}; plot: {png}")
    return report
