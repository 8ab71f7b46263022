"""`bring_to_active`, the rule that brings a restarted lifecycle node back to active (`tinker bringup`'s supervise and
the launch file's ``lifecycle_up``), against a scripted node: the lost requests, the race and the refusals a real
restart showed are played here, which DDS cannot be made to produce on demand (the real restart is in
tests/ros2/test_attacks.py)."""

from __future__ import annotations

import pytest

from tinker.lifecycle_up import LifecycleUpError, bring_to_active


class ScriptedNode:
    """A lifecycle node whose first ``lost`` requests get no answer (they reached the dead process) and whose
    transitions are refused ``refuse`` times each."""

    def __init__(self, lost: int = 0, refuse: int = 0, state: str = "unconfigured"):
        self.state, self.lost, self.refuse, self.calls = state, lost, refuse, []

    def _answer(self, what: str) -> None:
        self.calls.append(what)
        if self.lost:
            self.lost -= 1
            raise TimeoutError(f"{what} did not answer")

    def get(self, timeout: float) -> str:
        self._answer("get_state")
        return self.state

    def change(self, step: str, timeout: float) -> bool:
        self._answer(step)
        if self.refuse:
            self.refuse -= 1
            return False
        self.state = {"configure": "inactive", "activate": "active"}[step]
        return True


def test_lost_requests_are_asked_again_until_the_node_is_active():
    node = ScriptedNode(lost=3)
    assert bring_to_active(node.get, node.change, "/policy", timeout=30) == ["configure", "activate"]
    assert node.state == "active" and node.calls[:3] == ["get_state"] * 3, node.calls


def test_a_node_already_active_is_left_alone():
    node = ScriptedNode(state="active")
    assert bring_to_active(node.get, node.change, "/policy") == [] and node.calls == ["get_state"]


def test_one_refusal_is_a_race_and_is_asked_again_two_from_one_state_are_the_nodes_answer():
    raced = ScriptedNode(refuse=1)
    assert bring_to_active(raced.get, raced.change, "/policy", timeout=30) == ["configure", "activate"]
    refusing = ScriptedNode(refuse=2)
    with pytest.raises(LifecycleUpError, match=r"/policy: configure was refused in state unconfigured"):
        bring_to_active(refusing.get, refusing.change, "/policy", timeout=30)


def test_a_node_that_never_answers_or_whose_process_ended_is_named():
    silent = ScriptedNode(lost=10**6)
    with pytest.raises(LifecycleUpError, match=r"/policy: not active after 0 s; last state: no answer"):
        bring_to_active(silent.get, silent.change, "/policy", timeout=0.3)
    with pytest.raises(LifecycleUpError, match=r"/policy: its process ended before it became active"):
        bring_to_active(silent.get, silent.change, "/policy", alive=lambda: False)
