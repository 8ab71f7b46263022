"""`MirrorCamera`: the sim robot's camera, rendered off the control path like a real camera.

PyBullet's TinyRenderer takes ~5-25 ms of CPU per 64x64 frame here, and it holds the GIL throughout
(measured: a thread rendering in a loop stalls the main thread's 0.5 ms sleeps to 4.5 ms). In the
robot's process it would delay the states and commands of every cycle it overlaps, and bound the
control rate. A real camera is a separate device with its own rate, so the sim renders the same way:
a camera process (``python -m tinker.sim_camera``) holds a copy of the scene (the same `ArmEnv`, reset
with the same seeds, so bodies, colours, light and camera pose match) and poses it from the robot's
snapshot (every body's base pose and joint positions, taken in the loop's quiet window: ~11 us)
before it renders. It runs in a session of its own, scheduled as a sensor of the loop
(`tinker.priority.become_sensor`: one real-time level below the robot's process, whose loop threads
still come first; never niced below the loop, where unrelated load starved it and perception refused
its late frames), and dies with the robot's process. The frame carries the stamp of the state it
shows; consumers compute its age from that.

The job slot holds one snapshot: a newer one replaces one the camera has not started (``dropped``).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
import pybullet as p

from tinker_core.errors import ConfigError

Snapshot = list[tuple[int, tuple, tuple, list[float]]]
"""(body id, base position, base orientation, joint positions) for every body in the scene."""


def snapshot(client: int) -> Snapshot:
    """Every body's base pose and joint positions in PyBullet client ``client``."""
    out = []
    for i in range(p.getNumBodies(physicsClientId=client)):
        b = p.getBodyUniqueId(i, physicsClientId=client)
        pos, orn = p.getBasePositionAndOrientation(b, physicsClientId=client)
        n = p.getNumJoints(b, physicsClientId=client)
        q = [s[0] for s in p.getJointStates(b, range(n), physicsClientId=client)] if n else []
        out.append((b, pos, orn, q))
    return out


def apply_snapshot(client: int, snap: Snapshot) -> None:
    """Poses the bodies of ``client`` as in ``snap`` (bodies it lacks are skipped)."""
    have = {p.getBodyUniqueId(i, physicsClientId=client) for i in range(p.getNumBodies(physicsClientId=client))}
    for b, pos, orn, q in snap:
        if b not in have:
            continue
        p.resetBasePositionAndOrientation(b, pos, orn, physicsClientId=client)
        for j, v in enumerate(q):
            p.resetJointState(b, j, v, physicsClientId=client)


class MirrorCamera:
    """Renders snapshots in a camera process; calls ``on_frame(image, stamp_ns, tag)`` on a worker thread.

    ``env_kwargs``: the `tinker_sim.arm_env.ArmEnv` arguments of the robot's scene (``camera=True`` is implied);
    ``loop_priority``: the loop's ``realtime_priority`` (`tinker.priority.become_sensor`; 0: normal scheduling).
    """

    def __init__(self, env_kwargs: dict[str, Any], seed: int, on_frame: Callable[[np.ndarray, int, int], None],
                 start_timeout: float = 60.0, loop_priority: int = 0):
        self.on_frame = on_frame
        self.frames = 0
        """frames rendered and handed to ``on_frame``"""
        self.dropped = 0
        """snapshots replaced before the camera took them"""
        self.last_render_ns = 0
        self.error = ""
        # jobs go down its stdin; frames come back on a pipe of their own (PyBullet prints to stdout)
        r, w = os.pipe()
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "tinker.sim_camera", str(w), str(int(loop_priority))],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(w,),
                                          start_new_session=True)
        finally:
            os.close(w)
        self._replies = os.fdopen(r, "rb")
        self._send(("start", {**env_kwargs, "camera": True}, seed))
        ready = self._recv(start_timeout)
        if ready[0] != "ready":
            self.close()
            raise ConfigError(f"MirrorCamera: the camera process did not start: {ready[1]}")
        self._job: tuple[int, int, int, Snapshot] | None = None
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="mirror-camera", daemon=True)
        self._thread.start()

    @classmethod
    def for_robot(cls, cfg, period: float, seed: int, on_frame: Callable[[np.ndarray, int, int], None],
                  loop_priority: int = 0) -> "MirrorCamera":
        """The camera of the simulated robot ``cfg`` (`tinker_sim.robot_loop.SimRobotConfig`): its scene, image size
        and views."""
        scene = {"task": cfg.task, "dynamics": cfg.dynamics or None, "image_size": int(cfg.image_size),
                 "camera_views": int(cfg.camera_views), "control_period": period}
        return cls(scene, seed, on_frame, loop_priority=loop_priority)

    def values(self) -> dict[str, object]:
        """The /diagnostics values of the camera."""
        return {"camera_frames": self.frames, "camera_dropped": self.dropped,
                "camera_render_ms": f"{self.last_render_ns / 1e6:.1f}", "camera_error": self.error}

    @property
    def pid(self) -> int:
        """The camera process's id."""
        return self._proc.pid

    def _send(self, obj: object) -> None:
        pickle.dump(obj, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self._proc.stdin.flush()

    def _recv(self, timeout: float | None = None) -> tuple:
        if timeout is not None:  # only at start-up: afterwards the worker thread may block as long as it takes
            import selectors

            with selectors.DefaultSelector() as sel:
                sel.register(self._replies, selectors.EVENT_READ)
                if not sel.select(timeout):
                    return ("error", f"no answer within {timeout:.0f} s")
        try:
            return pickle.load(self._replies)
        except (EOFError, pickle.UnpicklingError) as e:
            return ("error", f"camera process exited ({self._proc.poll()}): {type(e).__name__}")

    def submit(self, snap: Snapshot, stamp_ns: int, seed: int, tag: int = 0) -> None:
        """Queue a render of ``snap`` (the state stamped ``stamp_ns`` of the episode reset with ``seed``)."""
        with self._cv:
            if self._job is not None:
                self.dropped += 1
            self._job = (seed, stamp_ns, tag, snap)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                job, self._job = self._job, None
            try:
                self._send(("render", *job))
                reply = self._recv()  # blocks in a read: the GIL is free for the robot's cycle
            except OSError as e:
                reply = ("error", f"camera process unreachable: {e}")
            if reply[0] != "frame":
                self.error = reply[1]  # no more frames: consumers see them age and refuse stale ones
                return
            _, img, stamp, tag, render_ns = reply
            self.last_render_ns = render_ns
            self.frames += 1
            try:
                self.on_frame(img, stamp, tag)
            except Exception as e:  # a failed publish must not stop the camera
                self.error = f"{type(e).__name__}: {e}"

    def close(self) -> None:
        if hasattr(self, "_cv"):
            with self._cv:
                self._stop = True
                self._cv.notify()
            self._thread.join(timeout=2.0)
        try:
            self._proc.stdin.close()  # the camera process exits at end of input
            self._proc.wait(5.0)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._replies.close()


def serve(inp, out, loop_priority: int = 0) -> int:
    """The camera process: builds the mirror scene, then renders each snapshot it is sent (until EOF)."""
    from tinker.priority import become_sensor

    become_sensor(loop_priority)  # here rather than in a preexec_fn: the robot's process has DDS threads

    def reply(obj: object) -> None:
        pickle.dump(obj, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    env = None
    seed = None
    try:
        while True:
            try:
                msg = pickle.load(inp)
            except EOFError:
                return 0
            if msg[0] == "start":
                from tinker_sim.arm_env import ArmEnv

                try:
                    env = ArmEnv(**msg[1])
                    seed = msg[2]
                    env.reset(seed=seed)
                    if getattr(env, "camera", None) is None:
                        raise ConfigError("the mirror env has no camera")
                except Exception as e:
                    reply(("error", f"{type(e).__name__}: {e}"))
                    return 2
                reply(("ready",))
            elif msg[0] == "render":
                _, job_seed, stamp, tag, snap = msg
                t0 = time.perf_counter_ns()
                try:
                    if job_seed != seed:  # new episode: the same reset as the robot's (colours, light, camera)
                        env.reset(seed=job_seed)
                        seed = job_seed
                    apply_snapshot(env.world.client, snap)
                    img = env.camera.capture()
                except Exception as e:
                    reply(("error", f"render failed: {type(e).__name__}: {e}"))
                    return 2
                reply(("frame", img, stamp, tag, time.perf_counter_ns() - t0))
    finally:
        if env is not None:
            env.close()


if __name__ == "__main__":
    raise SystemExit(serve(sys.stdin.buffer, os.fdopen(int(sys.argv[1]), "wb"),
                           int(sys.argv[2]) if len(sys.argv) > 2 else 0))
