"""`MirrorCamera`: the sim robot's camera, rendered off the control path like a real camera.

PyBullet's TinyRenderer takes ~10-25 ms of CPU per 64x64 frame here: in the robot's cycle it would
delay every state and bound the control rate. A real camera is a separate device with its own rate,
so the sim renders the same way: a second PyBullet client holds a copy of the scene (the same
`ArmEnv`, reset with the same seeds, so bodies, colours, light and camera pose match), and a worker
thread copies the robot's snapshot (every body's base pose and joint positions, taken in the cycle:
~30 us) into it and renders there. PyBullet releases the GIL while it renders, so the cycle keeps
running; the thread runs at nice +10 (Linux: per thread), so on a small CPU the loop's processes
come first. The frame carries the stamp of the state it shows; consumers compute its age from that.

The job slot holds one snapshot: a newer one replaces one the worker has not started (``dropped``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

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
    """Renders snapshots in a mirror `ArmEnv` on a worker thread; calls ``on_frame(image, stamp_ns, tag)`` there."""

    def __init__(self, make_env: Callable[[], object], seed: int, on_frame: Callable[[np.ndarray, int, int], None]):
        self.env = make_env()
        if getattr(self.env, "camera", None) is None:
            raise ConfigError("MirrorCamera: the mirror env has no camera (build it with camera=True)")
        self.env.reset(seed=seed)
        self._seed = seed
        self.on_frame = on_frame
        self.frames = 0
        """frames rendered and handed to ``on_frame``"""
        self.dropped = 0
        """snapshots replaced before the worker took them"""
        self.last_render_ns = 0
        self.error = ""
        self._job: tuple[int, int, int, Snapshot] | None = None
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="mirror-camera", daemon=True)
        self._thread.start()

    def submit(self, snap: Snapshot, stamp_ns: int, seed: int, tag: int = 0) -> None:
        """Queue a render of ``snap`` (the state stamped ``stamp_ns`` of the episode reset with ``seed``)."""
        with self._cv:
            if self._job is not None:
                self.dropped += 1
            self._job = (seed, stamp_ns, tag, snap)
            self._cv.notify()

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # this thread only, on Linux
        except (AttributeError, OSError):
            pass
        while True:
            with self._cv:
                while self._job is None and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                seed, stamp, tag, snap = self._job
                self._job = None
            try:
                t0 = time.perf_counter_ns()
                if seed != self._seed:  # new episode: the same reset as the robot's (colours, light, camera)
                    self.env.reset(seed=seed)
                    self._seed = seed
                apply_snapshot(self.env.world.client, snap)
                img = self.env.camera.capture()
                self.last_render_ns = time.perf_counter_ns() - t0
                self.frames += 1
                self.on_frame(img, stamp, tag)
            except Exception as e:  # a failed frame must not kill the camera; the consumer sees frames age
                self.error = f"{type(e).__name__}: {e}"

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self.env.close()
