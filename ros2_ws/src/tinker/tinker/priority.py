"""Process priority: real-time scheduling for the control loop's processes, background priority for the
work next to it (learner, recording, streaming, camera rendering), and no orphans.

No rclpy here: `die_with_parent` and `background_child` run in a forked child before ``exec``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")


def die_with_parent() -> None:
    """In a child (before exec, or itself after): SIGTERM it when the process that started it dies (Linux),
    so that a killed ``tinker demo`` or ``tinker bringup`` leaves no nodes behind on the ROS domain."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def lower_priority(increment: int) -> str:
    """Adds ``increment`` to this process's nice value, so a background node yields the CPU to the loop's.

    On Linux with autogroups (``kernel.sched_autogroup_enabled``, the default of desktop distributions
    and of this machine) a process's nice value only ranks it among the processes of its own session:
    a node started in a session of its own (``tinker bringup`` starts each so) competes with the loop's
    processes at full weight whatever its nice. So a process that leads its session also lowers its
    session's autogroup by the same amount. Returns what was done, for the node's log.
    """
    if increment <= 0:
        return ""
    done = []
    try:
        done.append(f"nice {os.nice(increment)}")
    except OSError as e:  # not fatal: the node still runs, only without the yield
        print(f"warning: nice({increment}) refused: {e}", file=sys.stderr, flush=True)
    if hasattr(os, "getsid") and os.getsid(0) == os.getpid() and AUTOGROUP.is_file():
        try:
            current = int(AUTOGROUP.read_text().split("nice")[-1])
            AUTOGROUP.write_text(str(min(19, current + increment)))
            done.append(f"autogroup nice {min(19, current + increment)}")
        except (OSError, ValueError) as e:
            print(f"warning: autogroup nice refused: {e}", file=sys.stderr, flush=True)
    return ", ".join(done)


def set_realtime(priority: int) -> str:
    """Puts every thread of this process (the executor's, the DDS transport's) under ``SCHED_FIFO`` at
    ``priority`` (1-99; 0 = leave the scheduling alone); threads they start later inherit it.

    Like ros2_control's controller manager: with it, a loop process that wakes is never queued behind
    the learner or a render, and one that publishes finishes delivering to every subscriber before a
    subscriber it woke takes its CPU. Needs CAP_SYS_NICE or an ``rtprio`` limit (``/etc/security/
    limits.conf``: ``@realtime - rtprio 98``); without, the node runs on as before and says so.
    Returns what was done, for the node's log and diagnostics.
    """
    if priority <= 0:
        return "SCHED_OTHER"
    if not hasattr(os, "sched_setscheduler"):
        return "SCHED_OTHER (no real-time scheduling on this platform)"
    priority = min(int(priority), os.sched_get_priority_max(os.SCHED_FIFO))
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    try:
        for tid in tids:
            try:
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
    except PermissionError:
        for tid in tids:  # all or nothing: a half real-time process would wait on its own normal threads
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
        return (f"SCHED_OTHER (SCHED_FIFO {priority} refused: needs CAP_SYS_NICE or an rtprio limit of at least "
                f"{priority}; the loop runs without real-time priority)")
    return f"SCHED_FIFO {priority}"


def become_background(increment: int = 10) -> None:
    """This process turns background work: off real-time scheduling (a child of a real-time loop thread
    inherits it), ``increment`` lower (its autogroup too, when it leads its session: see `lower_priority`),
    and SIGTERM when its parent dies."""
    if hasattr(os, "sched_setscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    lower_priority(increment)
    die_with_parent()


def become_sensor(loop_priority: int) -> str:
    """This process stands in for a sensor of the robot (the simulated camera): the loop waits for its output
    every cycle, so it must not queue behind unrelated work on a loaded machine any more than the loop does.

    ``loop_priority``: the loop's ``realtime_priority`` (0: normal scheduling). Above 0 it runs at
    ``SCHED_FIFO`` ``loop_priority - 1`` (at least 1): ahead of all normal work, and the loop's own threads still
    preempt it; where real-time scheduling is refused, or at 0, it keeps the normal scheduling and nice it
    inherited. Never niced below the loop: niced 10 in an autogroup of its own it got a few percent of a busy
    core, rendered a 5-25 ms frame in 100-190 ms and perception refused its frames as too old (issue 22).
    SIGTERM when its parent dies. Returns what was done, for a log.
    """
    die_with_parent()
    if hasattr(os, "sched_setscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # a child of a loop thread inherits its level
    if loop_priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return "SCHED_OTHER"
    prio = max(1, min(int(loop_priority), os.sched_get_priority_max(os.SCHED_FIFO)) - 1)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
    except PermissionError:
        return f"SCHED_OTHER (SCHED_FIFO {prio} refused)"
    return f"SCHED_FIFO {prio}"


def background_child(increment: int = 10) -> None:
    """``preexec_fn`` for a background process (a learner next to the loop): a session of its own, then
    `become_background`."""
    if os.getsid(0) != os.getpid():  # Popen(start_new_session=True) has done it already
        os.setsid()
    become_background(increment)
