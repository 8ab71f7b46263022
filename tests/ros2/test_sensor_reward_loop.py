"""Fine-tuning from sensors, in the ROS 2 graph: with ``reward_source: sensors`` the experience bridge rewards each
transition with the success sensor (the target the camera found, forward kinematics of the measured joints), and
the simulator's reward (its true target) never reaches the learner.

Real processes over real DDS, on a domain of their own: sim_robot renders the vision bundle's two views with the
camera moved 8 cm (``shifted_camera.yaml``, not re-aimed), so the perceived target is off the true one (perception
corrects most of the move on the hand it sees, not all of it, nor the locator's own error) and the two rewards differ; a real ZeroMQ receiver stands in for the learner. The simulator ends episodes only
at the time limit (``end_on_success: false``, ``end_on_sensor: false``; ``tinker demo --reward sensors`` also ends
them where the sensor sees success, tests/ros2/test_in_process.py). The graph runs at the bundle's 50 ms
with a patient watchdog latch (as test_vision_loop).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
VISION = ROOT / "pretrained" / "arm_reach_vision"
SHIFTED_CAMERA = ROOT / "sim" / "config" / "dynamics" / "shifted_camera.yaml"
WANT = 120  # transitions: at least one whole episode (50 cycles) after the first


def _sensor():
    """The success sensor, built here from its parts (not through the bridge's composition)."""
    from tinker_deploy.manifest import Manifest
    from tinker_core.loop.kinematics import ForwardKinematics
    from tinker_core.loop.sensor_reward import ReachSensor, SensorConfig
    from tinker_sim.tasks.reach import success_rule

    m = Manifest.from_json((VISION / "manifest.json").read_text())
    cfg = SensorConfig(**success_rule(), time_limit_cycles=50)
    return ReachSensor(cfg, m.obs_terms, m.image_terms, ForwardKinematics.from_urdf(None, m.joint_names).ee_position)


def test_transitions_carry_the_sensor_reward_not_the_simulators(ros2, tmp_path):
    import yaml
    from diagnostic_msgs.msg import DiagnosticStatus
    from std_msgs.msg import Float64MultiArray

    from tinker.bringup import Graph
    from tinker.wire import LATCHED_QOS, RECORD_QOS, read_task
    from tinker_core.transport import TransitionReceiver
    from tinker_safety.config import DEFAULT_CONFIG_PATH

    cfg = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    cfg["watchdog_misses_to_estop"] = 10
    (tmp_path / "safety.yaml").write_text(yaml.safe_dump(cfg))
    learner = TransitionReceiver("tcp://127.0.0.1:0")
    domain = ros2.fresh_domain()
    probe = ros2.Probe(domain, "sensors")
    task = probe.collect(Float64MultiArray, "/task", RECORD_QOS)
    estop = probe.collect(DiagnosticStatus, "/safety/estop_state", LATCHED_QOS)
    g = Graph(run_dir=tmp_path / "logs", env=ros2.graph_env(domain),
              # perception per frame and the sensor holding each episode's first target: the bridge's own hold
              overrides={"perception": {"bundle": str(VISION), "estimate": "per_frame"},
                         "policy": {"bundle": str(VISION)},
                         # fixed 50-cycle episodes: neither the simulator's success nor the sensor's ends one
                         "sim_robot": {"episode_cycles": 50, "seed": 1000, "dynamics": str(SHIFTED_CAMERA),
                                       "end_on_success": False, "end_on_sensor": False},
                         "safety": {"config": str(tmp_path / "safety.yaml")},
                         "experience_bridge": {"learner_endpoint": learner.endpoint, "reward_source": "sensors",
                                               "sensor_hold_target": True}})
    assert g.parameters("experience_bridge")["sensor_bundle"] == str(VISION)  # perception's bundle, filled in
    got = []
    try:
        g.start()
        g.call_trigger("safety/reset")  # a start-up stall on the shared machine may have latched the watchdog

        def enough() -> bool:
            got.extend(learner.recv_many(64, timeout_ms=50))
            # a latched e-stop holds the arm, and held cycles give the learner nothing: reset, as an operator would
            if estop and estop[-1][1].level == DiagnosticStatus.ERROR:
                estop.clear()
                g.call_trigger("safety/reset")
            return len(got) >= WANT

        ros2.wait_until(enough, 120, f"{WANT} transitions at the learner")
    finally:
        probe.close()
        g.stop()
        learner.close()

    sensor = _sensor()
    states = [read_task(msg) for _, msg in list(task)]
    sim = {t.cycle: t.reward for t in states}  # the simulator's reward, per state
    # end_on_success false: the simulator never ends an episode on its own success, only after 50 cycles
    assert all(int(t.episode) == (t.cycle - 1) // 50 for t in states), [(t.episode, t.cycle) for t in states if t.done]
    # the sensor holds the target it read on an episode's first state (SensorConfig.hold_target): compare the
    # episodes whose first state starts a transition here (the bridge may have joined the run mid-episode)
    held = {(int(t.info["cycle"]) - 1) // 50: sensor.read(t.obs).target for t in got if int(t.info["cycle"]) % 50 == 1}
    compared, diffs = 0, []
    for t in got:
        episode = int(t.info["cycle"]) // 50  # of next_obs, the state whose outcome the transition carries
        if episode not in held:
            continue
        r = sensor.read(t.next_obs, held[episode])
        assert abs(t.reward - r.reward) < 1e-5, (t.info, t.reward, r)
        assert t.terminated == r.success, (t.info, t.terminated, r)
        assert t.info.get("reward_source") == "sensors"
        nxt = int(t.info["cycle"]) + 1  # the state next_obs shows
        if nxt in sim:
            compared += 1
            diffs.append(abs(t.reward - sim[nxt]))
    assert compared >= WANT // 2, f"only {compared} transitions matched a task message"
    # the camera sees the target several cm off: the learner's rewards are not the simulator's
    assert np.median(diffs) > 0.01, f"median |sensor - simulator| reward {np.median(diffs):.4f} over {compared}"
