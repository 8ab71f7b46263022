"""A person's teleop targets through `Takeover` and `GuardCycle` (real SafetyWrapper and StateGate, no ROS):
fresh targets take over, stale / future / doubly published ones are refused and counted, the wrapper's limits and
a latched e-stop still apply, and control returns to the policy when the person stops."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_safety.guard_cycle import Command, GuardCycle
from tinker_safety.state_gate import StateGate
from tinker_safety.takeover import Takeover

PERIOD_NS = 50_000_000
HOME = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0])
ZERO = np.zeros(7)
T0 = 1_000_000_000_000


class Host:
    def __init__(self):
        self.sent: list[Command] = []

    def send(self, command: Command) -> None:
        self.sent.append(command)

    def arm_deadline(self) -> None: ...

    def cancel_deadline(self) -> None: ...

    def log(self, level: str, message: str) -> None: ...

    def estop_changed(self) -> None: ...

    def expect_commands(self, expected: bool, arrived: bool) -> None: ...


class Loop:
    """A guard cycle with a takeover; the robot follows each command exactly (a perfect position controller)."""

    def __init__(self, make_guard, clock):
        self.clock, self.host = clock, Host()
        self.guard = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None)
        self.c = GuardCycle(self.host, clock=clock)
        self.c.configure(self.guard, StateGate(self.guard.limits.velocity, "/joint_states", 0.5, 0.1, 0.2, 0.5))
        self.c.takeover = Takeover(7, "/intervention", max_age_s=0.2, max_future_s=0.1)
        self.c.activate()
        self.now, self.q = T0, HOME.copy()

    def cycle(self, policy_target=None) -> Command:
        """One state, then the policy's command for it (its target: hold where it is unless given)."""
        self.clock.advance(0.05)
        self.now += PERIOD_NS
        self.c.state(self.q, ZERO, self.now, None, None, 1, self.now, int(self.clock.t * 1e9))
        n = len(self.host.sent)
        target = self.q if policy_target is None else policy_target
        assert self.c.command(np.asarray(target, float), True, {"stamp_ns": str(self.now), "cycle": "1"}, self.now)
        assert len(self.host.sent) == n + 1
        cmd = self.host.sent[-1]
        self.q = cmd.q.copy()
        return cmd

    def teleop(self, target, age_s: float = 0.0, publishers: int = 1) -> str:
        return self.c.takeover.offer(np.asarray(target, float), self.now - int(age_s * 1e9), publishers, self.now)


@pytest.fixture
def loop(make_guard, clock) -> Loop:
    lp = Loop(make_guard, clock)
    for _ in range(30):  # through the start ramp
        lp.cycle()
    return lp


def _step_limit(guard) -> np.ndarray:
    return guard.limits.velocity * guard.config.velocity_scale * guard.config.control_period + 1e-9


def test_a_fresh_teleop_target_takes_over_within_the_rate_limit_and_the_command_says_so(loop):
    goal = HOME + np.array([0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    prev = loop.q.copy()
    for _ in range(12):
        assert loop.teleop(goal) == ""
        cmd = loop.cycle(policy_target=HOME)  # the policy wants to stay: the person's target wins
        assert cmd.teleop is not None and np.allclose(cmd.teleop, goal)
        assert np.allclose(cmd.measured, prev)
        assert np.all(np.abs(cmd.q - prev) <= _step_limit(loop.guard))  # never faster than the wrapper allows
        prev = cmd.q.copy()
    assert np.allclose(loop.q, goal, atol=1e-6)  # reached the person's target
    assert loop.c.takeover.takeovers == 1 and loop.c.takeover.served == 12


def test_a_target_beyond_the_joint_limits_stops_inside_them(loop):
    upper = loop.guard.limits.upper
    beyond = HOME.copy()
    beyond[0] = upper[0] + 1.0
    for _ in range(40):
        loop.teleop(beyond)
        cmd = loop.cycle()
        assert cmd.q[0] <= upper[0] + 1e-9
    assert loop.q[0] < upper[0]  # held inside the limit (the margin), never at the asked target


def test_control_returns_to_the_policy_when_teleop_stops(loop):
    goal = HOME + np.array([0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0])
    loop.teleop(goal)
    assert loop.cycle().teleop is not None
    for _ in range(3):  # 0.15 s later the target is still fresh (max age 0.2 s)
        assert loop.cycle().teleop is not None
    cmd = loop.cycle(policy_target=HOME)  # 0.2 s: still within age
    cmd = loop.cycle(policy_target=HOME)  # 0.25 s: aged out, the policy's target again
    assert cmd.teleop is None and not loop.c.takeover.engaged
    for _ in range(10):
        cmd = loop.cycle(policy_target=HOME)
    assert np.allclose(loop.q, HOME, atol=1e-6)


@pytest.mark.parametrize("age,publishers,kind", [(0.5, 1, "too_old"), (-0.5, 1, "future"), (0.0, 2, "publishers")])
def test_stale_future_and_doubly_published_targets_are_refused_and_counted(loop, age, publishers, kind):
    goal = HOME + np.array([0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    why = loop.teleop(goal, age_s=age, publishers=publishers)
    assert why and "/intervention" in why
    assert loop.c.takeover.refused[kind] == 1
    cmd = loop.cycle()
    assert cmd.teleop is None and np.allclose(cmd.q, HOME)


def test_a_second_publisher_drops_the_target_already_accepted(loop):
    loop.teleop(HOME + 0.1)
    loop.teleop(HOME + 0.2, publishers=2)
    assert loop.cycle().teleop is None


def test_a_latched_estop_stays_latched_whatever_teleop_sends(loop):
    loop.c.estop("test")
    held = loop.q.copy()
    for _ in range(10):
        loop.teleop(HOME + 0.3)
        cmd = loop.cycle()
        assert cmd.status == "estopped" and np.allclose(cmd.q, held)
    assert loop.guard.estopped


def test_a_wrong_joint_count_is_refused():
    t = Takeover(7)
    assert "expected 7" in t.offer(np.zeros(6), 0, 1, 0)
    assert t.refused["shape"] == 1 and t.pick(0) is None


@pytest.mark.parametrize("mode", ["delta", "absolute"])
def test_the_chain_inverse_gives_the_action_that_maps_to_the_target(mode):
    lower, upper = -np.ones(7) * 2.0, np.ones(7) * 2.0
    chain = ActionChain(ActionChainConfig(mode=mode, max_step=10.0, scale=0.8), lower, upper)
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.uniform(-1.0, 1.0, 7)
        a = rng.uniform(-1.0, 1.0, 7)
        chain.reset(q)
        target = chain(a, q)
        assert np.allclose(chain.invert(target, q), a, atol=1e-9)
    far = np.full(7, 1.9)
    assert np.all(np.abs(ActionChain(ActionChainConfig(mode=mode), lower, upper).invert(far, np.zeros(7))) <= 1.0)
