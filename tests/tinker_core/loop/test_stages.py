"""The loop's stages as every runtime hosts them (no ROS): edge values in, edge values out through ``emit``."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import BundleError, ConfigError, PipelineError, ValidationError
from tinker_core.loop.edges import Features, Goal, RobotState, split_terms, task_report
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.loop.input_ages import Level
from tinker_core.loop.latency_compensation import LatencyCompensation
from tinker_core.loop.perception import PerceptionCycle
from tinker_core.loop.perception_stage import PerceptionStage
from tinker_core.loop.policy import PolicyCycle
from tinker_core.loop.policy_stage import PolicyStage
from tinker_deploy.manifest import Manifest

REACH = Path(__file__).resolve().parents[3] / "pretrained" / "arm_reach" / "bundle" / "manifest.json"


def _emitted(stage) -> list:
    """The stage's outputs, each checked against the loop's graph as a host's bus does."""
    out: list = []

    def emit(port, value):
        ROBOT_LOOP.check_port(stage.name, port, "out")
        out.append((port, value))

    stage.emit = emit
    return out


def test_every_handler_is_an_edge_into_the_stage_in_the_loops_graph():
    """The safe command goes into perception and the policy only where they compensate latency, the latency safety
    measured only where perception follows it (latency_auto); the goal into perception only where no simulator gives
    its task terms (the simulated robot takes it then)."""
    m = Manifest.from_json(REACH.read_text())
    stages = [PerceptionStage(PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda o: o, 7), "sha"),
              PolicyStage(None)]
    for stage in stages:
        assert set(stage.inputs()) == ({e.port for e in ROBOT_LOOP.inputs(stage.name)}
                                       - {"command", "goal", "command_latency"}), stage.name
    compensating = PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda o: o, 7, synced=False,
                                   ee_fn=lambda q: np.zeros(3), compensation=LatencyCompensation.for_manifest(m, 2))
    stage = PerceptionStage(compensating, "sha")
    assert set(stage.inputs()) == {e.port for e in ROBOT_LOOP.inputs("perception")} - {"command_latency"}
    following = PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda o: o, 7, synced=False,
                                ee_fn=lambda q: np.zeros(3),
                                compensation=LatencyCompensation.for_manifest(m, 0, follows=True))
    assert set(PerceptionStage(following, "sha").inputs()) == {e.port for e in ROBOT_LOOP.inputs("perception")}
    assert stage.values()["latency_compensation"] == 2 and stage.values()["pose_ahead_rad"] == "0.000"  # diagnostics


def test_a_stage_that_emits_before_its_host_wired_it_says_so():
    m = Manifest.from_json(REACH.read_text())
    stage = PerceptionStage(PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda o: o, 7, synced=False,
                                            ee_fn=lambda q: np.zeros(3)), "sha")
    stage.on_goal(Goal(1, np.array([0.5, 0.0, 0.4])))
    with pytest.raises(PipelineError, match="before its host wired"):
        stage.on_state(RobotState(2, np.zeros(7), np.zeros(7)))


def test_perception_emits_the_features_of_each_state_with_its_models_sha():
    m = Manifest.from_json(REACH.read_text())
    stage = PerceptionStage(PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda o: o * 2, 7), "abc")
    out = _emitted(stage)
    values = np.concatenate([[0.5, 0.0, 0.0, 0.2], np.full(3, 0.1), [0.6, 0.0, 0.4], [0.5, -0.1, 0.3]])
    report = task_report(values, [("ee_pos", 3), ("target_pos", 3), ("target_minus_ee", 3)], 7, 3, 2)
    assert stage.on_task(report) is None  # its state is on its way
    f = stage.on_state(RobotState(7, np.zeros(7), np.zeros(7), cycle=3, episode=2))
    assert out == [("features", f)]
    assert (f.stamp_ns, f.cycle, f.episode, f.perception_sha256) == (7, 3, "2", "abc")
    assert stage.on_state(RobotState(8, np.zeros(7), np.zeros(7))) is None  # state 8 waits for its own terms
    assert len(out) == 1


def test_task_terms_that_do_not_add_up_are_refused_naming_where():
    values = np.zeros(4 + 5)
    with pytest.raises(ValidationError, match=r"perception\.task\.terms"):
        split_terms(values, [("ee_pos", 3), ("target_pos", 3)], "perception.task")
    with pytest.raises(ValidationError, match=r"at least 4 values"):
        task_report(np.zeros(2), [], 1, 1, 0, "perception.task")


def test_a_sorting_report_counts_its_objects_and_an_empty_slot_is_no_object():
    def obj(kind: int | None, sorted_: bool) -> list[float]:
        onehot = [0.0, 0.0] if kind is None else [float(kind == 0), float(kind == 1)]
        return [*onehot, 1.0 if sorted_ or kind is None else 0.0]

    layout = [(n, s) for i in range(3) for n, s in ((f"obj{i}_kind", 2), (f"obj{i}_sorted", 1))]
    values = np.concatenate([[0.0, 1.0, 0.0, 0.1], obj(0, True), obj(1, False), obj(None, True)])
    assert task_report(values, layout, 1, 1, 0).objects() == (1, 2)
    reach = task_report(np.zeros(4 + 3), [("target_pos", 3)], 1, 1, 0)
    assert reach.objects() is None


class _Core:
    """A running bundle as `PolicyStage` sees it: a `PolicyCycle` and a version."""

    def __init__(self, actor=lambda f, sha: f[:2].astype(np.float64)):
        self.cycle = PolicyCycle(actor, ActionChain(ActionChainConfig(), -np.ones(2), np.ones(2)))
        self.version = 4
        self.runner = None


def test_policy_sends_the_joint_target_first_then_the_raw_action_only_while_the_gate_is_open():
    stage = PolicyStage(_Core())
    out = _emitted(stage)
    stage.on_state(RobotState(1, np.zeros(2), np.zeros(2)))
    assert stage.on_features(Features(1, 1, "0", np.ones(3, np.float32), "")) is None  # inactive: nothing
    stage.gate.activate()
    stage.on_state(RobotState(2, np.zeros(2), np.zeros(2)))
    target = stage.on_features(Features(2, 2, "0", np.ones(3, np.float32), ""))
    assert [p for p, _ in out] == ["joint_target", "raw_action"]
    assert out[0][1] is target and (target.stamp_ns, target.cycle, target.version) == (2, 2, 4)
    np.testing.assert_array_equal(out[1][1].values, [1.0, 1.0])
    assert stage.level()[0] == Level.OK


def test_a_policy_with_a_tool_sends_its_tool_command_with_the_state_it_answers():
    """A sorter's extra action (the suction) goes to the robot on its own edge; under latency compensation the one
    sent is the one chosen two cycles earlier, while the raw action keeps the actor's own."""
    core = _Core(lambda f, sha: f.astype(np.float64))
    core.cycle = PolicyCycle(core.cycle.actor, core.cycle.chain, latency_compensation=2)
    stage = PolicyStage(core)
    assert "command" in stage.inputs()  # compensating: it hears the safe command
    out = _emitted(stage)
    stage.gate.activate()
    for k, suction in enumerate((1.0, -1.0, -1.0), start=1):
        stage.on_state(RobotState(k, np.zeros(2), np.zeros(2)))
        stage.on_features(Features(k, k, "0", np.array([0.0, 0.0, suction], np.float32), ""))
    assert [p for p, _ in out] == ["joint_target", "raw_action", "tool_command"] * 3
    tools = [v for p, v in out if p == "tool_command"]
    assert [t.stamp_ns for t in tools] == [1, 2, 3] and [float(t.values[0]) for t in tools] == [-1.0, -1.0, 1.0]
    assert [float(v.values[2]) for p, v in out if p == "raw_action"] == [1.0, -1.0, -1.0]


def test_a_policy_step_over_its_budget_is_never_sent_and_stop_closes_the_gate():
    def slow(f, sha):
        time.sleep(0.003)
        return f[:2].astype(np.float64)

    notes = []
    how = {"v": "hold"}
    stage = PolicyStage(_Core(slow), budget_ns=1_000_000, on_overrun=lambda: how["v"],
                        overran=lambda step, dur, h: notes.append((step.cycle, dur > 1_000_000, h)))
    out = _emitted(stage)
    stage.gate.activate()
    for k, mode in ((1, "hold"), (2, "stop")):
        how["v"] = mode
        stage.on_state(RobotState(k, np.zeros(2), np.zeros(2)))
        assert stage.on_features(Features(k, k, "0", np.ones(3, np.float32), "")) is None
    assert out == [] and notes == [(1, True, "hold"), (2, True, "stop")]
    assert not stage.gate.active and stage.level()[0] == Level.ERROR


class _Bundle(_Core):
    """`_Core` with what hot reload and cleanup touch: ``reload`` (a TinkerError where there is no bundle of the
    running kind, as `tinker.bundle_io.PolicyBundle`) and the runner's ``close``."""

    def __init__(self):
        super().__init__()
        self.requested, self.closed, self.reloads = [], False, 0
        self.runner = SimpleNamespace(close=lambda: setattr(self, "closed", True), actor_sha256="a",
                                      perception_sha256="p", rejected_reloads=0)

    def new_chain(self):
        return ActionChain(ActionChainConfig(), -np.ones(2), np.ones(2))

    def reload(self, path):
        if not str(path).startswith("runs/"):
            raise BundleError(f"bundle {path}: no manifest.json there; keeping the running bundle")
        self.requested.append(path)


def test_the_policy_stages_life_is_the_same_on_every_runtime():
    """The steps a lifecycle node's transitions and the in-process loop both drive: activate opens the gate from
    the next measured pose, deactivate and release close it, release closes the running bundle, a failed
    configure's reason shows in its diagnostics."""
    core = _Bundle()
    stage = PolicyStage(core)
    out = _emitted(stage)
    stage.configure_failed("configure failed: no bundle")
    assert stage.values()["last_error"] == "configure failed: no bundle"
    stage.activate()
    stage.on_state(RobotState(1, np.zeros(2), np.zeros(2)))
    assert stage.on_features(Features(1, 1, "0", np.ones(3, np.float32), "")) is not None
    stage.deactivate()
    stage.on_state(RobotState(2, np.zeros(2), np.zeros(2)))
    assert stage.on_features(Features(2, 2, "0", np.ones(3, np.float32), "")) is None and len(out) == 2
    stage.activate()
    stage.release()
    assert core.closed and stage.core is None and not stage.gate.active


def test_a_bundle_set_at_run_time_is_reloaded_and_one_that_cannot_be_is_refused_with_why():
    core = _Bundle()
    stage = PolicyStage(core)
    assert stage.set_param("bundle", "runs/v2/bundle") == "" and core.requested == ["runs/v2/bundle"]
    with pytest.raises(BundleError, match="no manifest.json"):
        stage.set_param("bundle", "/nowhere")
    with pytest.raises(ConfigError, match="on_overrun"):
        stage.set_param("on_overrun", "panic")
    assert stage.set_param("on_overrun", "stop") == "" and stage.set_param("warmup_iterations", 3) == ""
    ok, why = stage.reload("/nowhere")
    assert not ok and "keeping the running bundle" in why
    assert stage.reload("runs/v3/bundle") == (True, "reload requested; the new bundle is validated first")


def test_stop_gives_the_hold_at_the_measured_pose_once_and_only_while_commands_went_out():
    stage = PolicyStage(_Bundle())
    assert stage.stop() is None  # never activated: nothing to hold
    stage.activate()
    stage.on_state(RobotState(1, np.full(2, 0.25), np.zeros(2)))
    q, meta = stage.stop()
    np.testing.assert_array_equal(q, [0.25, 0.25])
    assert meta["stop"] == 1 and meta["version"] == 4
    assert stage.stop() is None and not stage.gate.active


def test_policy_values_name_the_bundle_and_the_refusals():
    stage = PolicyStage(SimpleNamespace(version=3, reloads=1, cycle=None, runner=SimpleNamespace(
        actor_sha256="a", perception_sha256="p", rejected_reloads=0)))
    stage.refuse(ValidationError("policy.features", "finite values", "NaN"))
    v = stage.values()
    assert (v["model_version"], v["reloads"], v["refused_inputs"]) == (3, 1, 1)
    assert "policy.features" in v["last_error"]


def test_the_bridge_stage_joins_the_edge_values_of_each_cycle_into_transitions():
    """The values a host delivers (in process, or read from the topics) become the bridge's transitions; a person's
    cycle with no action chain known is refused (no transition), and the e-stop state is kept."""
    from tinker_core.loop.bridge import ExperienceBridge
    from tinker_core.loop.bridge_stage import BridgeStage
    from tinker_core.loop.edges import Action, EstopState, Intervened, SafeCommand
    from tinker_core.loop.episode_label import EpisodeLabels

    sent = []
    stage = BridgeStage(ExperienceBridge(EpisodeLabels(window_s=0.0), SimpleNamespace(send=sent.append, sent=0,
                                                                                        dropped=0)), now=lambda: 0.0)
    # the bundles (ZeroMQ) reach the bridge node's BundleHandover, not the stage: the stage handles the topics
    assert set(stage.inputs()) == {e.port for e in ROBOT_LOOP.inputs(stage.name) if e.transport == "ros"}
    h = stage.inputs()
    for cycle in range(1, 8):
        stamp = 1_000_000 * cycle
        h["features"](Features(stamp, cycle, "0", np.full(5, cycle, np.float32), "sha"))
        h["raw_action"](Action(stamp, cycle, np.full(7, 0.1), 1))
        h["joint_target"](Action(stamp, cycle, np.zeros(7), 1))
        h["command"](SafeCommand(stamp, cycle, np.zeros(7), "passed", 1))
        h["task"](task_report(np.array([-0.1 * cycle, 0.0, 0.0, 0.3]), [], stamp, cycle, 0))
    assert [(int(t.obs[0]), int(t.next_obs[0])) for t in sent] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    h["intervened"](Intervened(8_000_000, 8, np.zeros(14)))
    assert stage.refusals.count == 1 and "action chain" in stage.bridge.last_error
    h["estop_state"](EstopState(True, "operator"))
    assert stage.estopped
