"""A STAND-IN for a person at a teleop device: takes over the arm when it heads away from the target, labels episodes.

This is not a person. It is a small script that plays the two parts a person plays in human-in-the-loop
fine-tuning (docs/sim2real/human_in_the_loop.md), so that the pipeline can be measured end to end in
simulation (docs/sim2real/human_data.md):

- **takeover**: it watches the simulator's ``task`` topic, which holds the ground truth a person sees when they
  look at the scene (the end effector, the target, their distance). When the distance has grown by more than
  ``away_m`` over the last ``away_cycles`` cycles while the arm is not at the target, it takes over: for
  ``hold_s`` seconds (or until the arm is within ``release_m``) it publishes joint targets on ``intervention``
  (sensor_msgs/JointState, stamped now, every joint by name; never after the episode's success), each a step of at most ``step_rad`` from the
  measured joints toward an inverse-kinematics solution for the target (a private kinematic PyBullet copy of the
  arm: the person knows how to move it). The safety node then serves these targets through the SafetyWrapper
  (it must run with ``intervention_topic: intervention``) and the experience bridge sends those cycles to the
  learner with the person's action and ``info["intervention"]``.
- **labels**: it calls the experience bridge's ``~/label_episode`` with *success* the moment the simulator says the
  arm is at the target (what a person watching would say then), and with *failure* when an episode ends (the
  robot's episode counter moves on) without that. Saying success at once matters: the bridge labels the episode
  that ended within ``label_window`` (3 s), else the running one; an episode its success sensor ended early and
  the robot ran on to the time limit would be more than 3 s past when the robot's counter moves on, and the label
  would land on the next episode. A label is not sent when the ``task`` message it is judged on is more than
  ``late_s`` (0.5 s) old as it is handled (this process was descheduled on a loaded machine): the bridge would put
  it on whatever episode runs by then (``labels_skipped_late``).

It reads the target from ``task``: the told target, which is the true one on variants without a calibration
bias (far_latency_reach); on a variant with a bias, a person would see the true target and this stand-in would not.
Run by ``tinker demo --operator scripted`` during the fine-tuning phase; on exit it writes its counts as JSON
(``--summary``).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from tinker_core.errors import ValidationError


class StandInOperator:
    """The takeover rule and the labels, fed by ``task`` and ``joint_states`` (see the module doc)."""

    def __init__(self, node, namespace: str = "", away_cycles: int = 8, away_m: float = 0.02, hold_s: float = 1.5,
                 release_m: float = 0.04, step_rad: float = 0.1, gain: float = 0.5, label: bool = True,
                 takeover: bool = True, late_s: float = 0.5):
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from std_srvs.srv import SetBool

        from tinker.wire import COMMAND_QOS, SENSOR_QOS, read_task
        from tinker_sim.pybullet_world import PyBulletWorld
        from tinker_sim.robot import ArmRobot

        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self.node, self._read_task, self._JointState = node, read_task, JointState
        self.away_cycles, self.away_m, self.hold_s, self.release_m = int(away_cycles), away_m, hold_s, release_m
        self.step_rad, self.gain, self.do_label, self.do_takeover = step_rad, gain, label, takeover
        self.late_s, self._late = float(late_s), False
        self._world = PyBulletWorld(ground=False)
        self._kin = ArmRobot(self._world)
        self.lock = threading.Lock()
        self.names: list[str] = []
        self.q: np.ndarray | None = None
        self.target: np.ndarray | None = None
        self.distance = float("inf")
        self.episode: int | None = None
        self.seen_success = False
        self.recent: deque[float] = deque(maxlen=self.away_cycles + 1)
        self.engaged_until = 0.0
        self.counts = {"takeovers": 0, "published": 0, "episodes_taken_over": 0, "labels_sent": 0,
                       "labels_accepted": 0, "labels_success": 0, "labels_failure": 0, "labels_skipped_late": 0,
                       "label_errors": []}
        self._taken_this_episode = False
        node.create_subscription(Float64MultiArray, f"{ns}/task", self._on_task, COMMAND_QOS)
        node.create_subscription(JointState, f"{ns}/joint_states", self._on_joints, SENSOR_QOS)
        self.pub = node.create_publisher(JointState, f"{ns}/intervention", 10)  # reliable, as `ros2 topic pub`
        self.label_client = node.create_client(SetBool, f"{ns}/experience_bridge/label_episode")
        self._SetBool = SetBool

    def _on_joints(self, msg) -> None:
        with self.lock:
            self.names = list(msg.name)
            self.q = np.asarray(msg.position, dtype=np.float64)

    def _on_task(self, msg) -> None:
        try:
            task = self._read_task(msg, "stand_in_operator.task")
        except ValidationError:
            return
        target = task.terms.get("target_pos")
        if target is None or target.shape[0] != 3:
            return  # not a reach task's: nothing to steer toward
        ep = int(task.episode)
        self._late = time.time_ns() - task.stamp_ns > self.late_s * 1e9
        if self.episode is not None and ep != self.episode:
            self._episode_ended(self.episode, self.seen_success)
        if ep != self.episode:
            self.episode, self.seen_success, self._taken_this_episode = ep, False, False
            self.recent.clear()
            self.engaged_until = 0.0
        success, d = task.success, task.distance
        if success and not self.seen_success:
            self._label(ep, True)
        self.seen_success = self.seen_success or success
        with self.lock:
            self.target, self.distance = target.copy(), d
        self.recent.append(d)
        now = time.monotonic()
        # not once the episode succeeded: its later cycles give the learner nothing (the episode ended there)
        away = (len(self.recent) == self.recent.maxlen and d - self.recent[0] > self.away_m and not self.seen_success
                and d > self.release_m)
        if self.do_takeover and away and now >= self.engaged_until:
            self.engaged_until = now + self.hold_s
            self.counts["takeovers"] += 1
            if not self._taken_this_episode:
                self.counts["episodes_taken_over"] += 1
                self._taken_this_episode = True
        if now < self.engaged_until and d < self.release_m:
            self.engaged_until = now  # at the target: hand back to the policy

    def _episode_ended(self, episode: int, success: bool) -> None:
        if not success:  # a success was said when it happened
            self._label(episode, False)

    def _label(self, episode: int, success: bool) -> None:
        if not self.do_label:
            return
        if self._late:
            self.counts["labels_skipped_late"] += 1
            return
        if not self.label_client.service_is_ready():
            self.counts["label_errors"].append(f"episode {episode}: label service not ready")
            return
        self.counts["labels_sent"] += 1
        fut = self.label_client.call_async(self._SetBool.Request(data=bool(success)))

        def done(f, success=success, episode=episode) -> None:
            try:
                r = f.result()
            except Exception as e:  # the bridge went away: counted, the run goes on
                self.counts["label_errors"].append(f"episode {episode}: {e!r}")
                return
            if r.success:
                self.counts["labels_accepted"] += 1
                self.counts["labels_success" if success else "labels_failure"] += 1
            else:
                self.counts["label_errors"].append(f"episode {episode}: {r.message}")

        fut.add_done_callback(done)

    def step(self) -> None:
        """Publish one joint target while engaged (call at the control rate)."""
        if time.monotonic() >= self.engaged_until:
            return
        with self.lock:
            if self.q is None or self.target is None or not self.names:
                return
            q, target, names = self.q.copy(), self.target.copy(), list(self.names)
        q_ik = self._kin.inverse_kinematics(target, rest=q)
        goal = q + np.clip(self.gain * (q_ik - q), -self.step_rad, self.step_rad)
        msg = self._JointState(name=names, position=[float(x) for x in goal])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pub.publish(msg)
        self.counts["published"] += 1

    def close(self) -> None:
        self._world.close()


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    ap = argparse.ArgumentParser(description="A STAND-IN for a person at a teleop device (a script, not a person): "
                                             "takes over on 'intervention' when the arm heads away from the target, "
                                             "labels each episode via the experience bridge's ~/label_episode.")
    ap.add_argument("--namespace", default="")
    ap.add_argument("--period", type=float, default=0.05, help="s between two published targets while engaged")
    ap.add_argument("--no-takeover", action="store_true", help="labels only")
    ap.add_argument("--no-label", action="store_true", help="takeovers only")
    ap.add_argument("--summary", default="", help="write the counts here as JSON on exit")
    args = ap.parse_args(argv)
    rclpy.init(args=[])
    node = rclpy.create_node("tinker_stand_in_operator")
    op = StandInOperator(node, args.namespace, label=not args.no_label, takeover=not args.no_takeover)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    node.create_timer(args.period, op.step)
    try:
        ex.spin()
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    finally:
        if args.summary:
            Path(args.summary).write_text(json.dumps(op.counts, indent=1))
        op.close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
