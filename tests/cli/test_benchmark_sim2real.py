"""``tinker benchmark sim2real``'s refusals and variant choice, for both tasks (no ROS graph is started on any of these
paths; tests/e2e/test_sim2real runs the protocol)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SORT = "tinker/ArmSort-v0"


def tinker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinker_cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_a_named_variant_with_a_key_the_sorter_cannot_feel_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "s2r"
    p = tinker("benchmark", "sim2real", "--env", SORT, "--variants", "laggy", "shifted_miscalibrated", "--out", str(out))
    assert p.returncode == 2
    assert "shifted_miscalibrated.yaml: 3 key(s) cannot act on tinker/ArmSort-v0" in p.stderr
    assert "target_bias_x_m = 0.04: it biases the reach target the robot is told, and the sort task has none" in p.stderr
    assert not out.exists()


def test_the_default_variant_list_leaves_out_what_cannot_act_and_says_why():
    from tinker_cli._compose import load_policy
    from tinker_cli.benchmark import select_variants
    from tinker_deploy.pretrained import default_bundle

    for env_id, out, kept in ((SORT, {"shifted_camera", "shifted_miscalibrated"}, {"laggy", "worn_robot", "low_gain"}),
                              ("tinker/ArmReach-v0", {"shifted_camera", "low_gain", "worn_robot"},
                               {"laggy", "heavy_arm", "shifted_miscalibrated"})):
        bundle = default_bundle(env_id)
        chosen, left_out = select_variants(None, env_id, load_policy(bundle).manifest, bundle, REPO)
        assert out <= set(left_out) and kept <= {n for n, _ in chosen}, (env_id, left_out)
        assert not set(left_out) & {n for n, _ in chosen}
        assert "no camera image" in left_out["shifted_camera"]


def test_bad_arguments_are_refused(tmp_path):
    p = tinker("benchmark", "sim2real", "--env", SORT, "--train", "--out", str(tmp_path / "a"))
    assert p.returncode == 2 and "--train: the protocol retrains only the ArmReach policy" in p.stderr
    p = tinker("benchmark", "sim2real", "--env", SORT, "--runs", "0", "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and "--runs must be >= 1, got 0" in p.stderr
    p = tinker("benchmark", "sim2real", "--env", "tinker/PlanarSort-v0", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "invalid choice" in p.stderr
    p = tinker("benchmark", "sim2real", "--variants", "laggy", "--learner-set", "warmup", "--out", str(tmp_path / "d"))
    assert p.returncode == 2 and "--learner-set: expected NAME=VALUE, got 'warmup'" in p.stderr
    assert not (tmp_path / "d").exists()  # refused before the zero-shot stage
    for bad in ("-1", "soon", "21"):
        p = tinker("benchmark", "sim2real", "--latency-compensation", bad, "--out", str(tmp_path / "e"))
        assert p.returncode == 2 and "--latency-compensation" in p.stderr, p.stderr[-500:]


def test_another_bundle_and_the_sensor_reward_are_refused_where_they_cannot_run(tmp_path):
    """Before anything runs: a sensor reward needs a target the camera finds (the state bundle's comes from the
    simulator), and objects the camera sees (the state sorter's come from the simulator), --train makes its own
    bundle, a bundle must exist."""
    p = tinker("benchmark", "sim2real", "--reward", "sensors", "--out", str(tmp_path / "a"))
    assert p.returncode == 2 and "a sensor reward needs a target the robot perceives" in p.stderr
    p = tinker("benchmark", "sim2real", "--env", SORT, "--reward", "sensors", "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and "a sensor reward needs objects the robot perceives" in p.stderr
    p = tinker("benchmark", "sim2real", "--train", "--bundle", "pretrained/arm_reach_vision", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "leave out --bundle and --checkpoint" in p.stderr
    p = tinker("benchmark", "sim2real", "--bundle", str(tmp_path / "none"), "--out", str(tmp_path / "d"))
    assert p.returncode == 2 and f"--bundle: {tmp_path / 'none'} does not exist" in p.stderr
    p = tinker("benchmark", "sim2real", "--env", SORT, "--bundle", "pretrained/arm_sort_hppo/bundle", "--out",
               str(tmp_path / "e"))
    assert p.returncode == 2 and "a hierarchical policy (hierarchy.json); this protocol runs one-level" in p.stderr
    assert not any((tmp_path / k).exists() for k in "abcde")


def test_the_task_is_the_bundles_own_and_another_is_refused(tmp_path):
    """A user who names the camera sorter runs the sort task (before, the protocol ran ArmReach's success sensor on
    the sorter's features and failed on a missing 'target_pos')."""
    from tinker_cli.benchmark import env_for

    assert env_for(None, "pretrained/arm_sort_vision") == SORT
    assert env_for(None, "pretrained/arm_reach_vision") == "tinker/ArmReach-v0"
    assert env_for(None, None) == "tinker/ArmReach-v0" and env_for(SORT, None) == SORT
    p = tinker("benchmark", "sim2real", "--env", "tinker/ArmReach-v0", "--bundle", "pretrained/arm_sort_vision",
               "--reward", "sensors", "--out", str(tmp_path / "a"))
    assert p.returncode == 2 and ("--env tinker/ArmReach-v0, but --bundle pretrained/arm_sort_vision is a policy of "
                                  "tinker/ArmSort-v0") in p.stderr, p.stderr[-500:]
    assert not (tmp_path / "a").exists()


def test_the_demo_refuses_a_dynamics_key_its_robot_cannot_act_on_before_it_starts_anything(tmp_path):
    out = tmp_path / "demo"
    p = tinker("demo", "--dynamics", "sim/config/dynamics/worn_robot.yaml", "--out", str(out))
    assert p.returncode == 2
    assert "worn_robot.yaml: 2 key(s) cannot act on tinker/ArmReach-v0 with the demo's policy" in p.stderr
    assert "object_mass_scale = 1.3: it scales the task's objects, and the reach task has none" in p.stderr
    assert not out.exists()


def test_a_camera_bundle_is_scored_with_the_estimate_its_loop_holds():
    """The protocol's evaluations score a camera bundle as the demo's loop runs it (perception holding the estimate);
    a state bundle as it is."""
    from tinker_cli.benchmark import _evaluate

    dyn = REPO / "sim" / "config" / "dynamics" / "laggy.yaml"
    vision = _evaluate(REPO / "pretrained" / "arm_reach_vision", dyn, episodes=2)
    state = _evaluate(REPO / "pretrained" / "arm_reach" / "bundle", dyn, episodes=2)
    assert vision["hold_estimate"] is True and state["hold_estimate"] is False
    assert vision["episodes"] == state["episodes"] == 2 and vision["seeds"] == [1000, 1001]


def test_auto_compensation_measures_the_latency_from_the_first_zero_shot_episodes():
    """``--latency-compensation auto``: the zero-shot evaluation runs uncompensated and its first episodes' commands and
    joint states give the latency the rest of the run compensates (far_latency_sort: 4 periods, from one episode)."""
    from tinker_cli.benchmark import _evaluate, measured_compensation

    dyn = REPO / "sim" / "config" / "dynamics" / "far_latency_sort.yaml"
    before = _evaluate(REPO / "pretrained" / "arm_sort" / "bundle", dyn, episodes=2, env_id=SORT, calibrate=True)
    assert before["latency_compensation"] == 0 and before["command_latency_episodes"] == 1
    assert measured_compensation(before) == 4
    unknown = {"command_latency": {"periods": None, "why": "the arm has hardly moved"}, "command_latency_episodes": 3}
    assert measured_compensation(unknown) == 0  # nothing measured: nothing compensated


def test_a_loop_whose_learner_made_no_update_or_published_nothing_is_not_scored_as_fine_tuned():
    """The sensor ends each moved-camera episode within ~9 cycles: 50 episodes gave ~320 live transitions and 0
    updates. The row then says so instead of scoring the pretrained policy a second time as "after fine-tuning"."""
    from tinker_cli.benchmark import loop_summary, table

    phase = {"episodes": 1, "successes": 0}
    rep = {k: phase for k in ("before", "finetune", "after")} | {
        "safety_interventions": 3, "estops": [], "unsafe_states": {"contact": 0},
        "learner": {"version": 1, "updates": 0, "ingested_total": 176}}
    idle = loop_summary(rep)
    assert idle["fine_tune"].startswith("not fine-tuned: the learner made 0 updates on 176 live transitions")
    versions = [{"version": 3, "episodes": 2, "successes": 1}]
    trained = loop_summary(rep | {"learner": {"version": 3, "updates": 2864, "ingested_total": 1321},
                                  "by_version": versions})
    assert "fine_tune" not in trained and trained["learner_updates"] == 2864 and trained["published_version"] == 3
    assert trained["by_version"] == versions and idle["by_version"] == []  # a report from before it had none
    # every candidate refused by the gate (the camera sorter on the moved camera, 2026-12-06: the row had scored the
    # pretrained bundle again as "after fine-tuning", v0, the same numbers)
    refused = loop_summary(rep | {"learner": {"version": 0, "updates": 15243, "ingested_total": 7980,
                                              "last_gate": {"passed": False, "reason": "2 safety e-stop(s) > 0"}}})
    assert refused["fine_tune"] == ("not fine-tuned: the learner made 15243 updates and published no version (last "
                                    "gate: 2 safety e-stop(s) > 0); the policy is the pretrained one")
    zero = {"success_rate": 0.4, "ci_low": 0.3, "ci_high": 0.5, "successes": 20, "episodes": 50, "seeds": [1000, 1049],
            "safety_violations": 0, "safety_estops": 0, "mean_time_to_success_s": 0.4}
    md = table([{"variant": "shifted_camera", "run": 0, "zero_shot": zero, "fine_tuned": None, **idle}],
               "tinker/ArmReach-v0")
    assert "fine-tune: not fine-tuned: the learner made 0 updates" in md and md.rstrip().endswith("| — | 0 | 0 / 0 |")


def test_the_figure_draws_a_run_that_sorted_everything(tmp_path):
    """100/100 has a Wilson upper bound of 0.9999999999999999, a rounding error under the rate: the protocol's figure
    once refused it as a negative error bar, after three sorter runs (2026-12-07)."""
    from tinker_cli.benchmark import _plot
    from tinker_core.evaluate import wilson_interval

    lo, hi = wilson_interval(100, 100)
    assert hi < 1.0  # the case itself
    full = {"success_rate": 1.0, "ci_low": lo, "ci_high": hi, "objects_sorted_rate": 1.0, "objects_ci_low": lo,
            "objects_ci_high": hi}
    png = _plot([{"variant": "far_latency_sort", "run": 0, "zero_shot": full, "fine_tuned": full}], tmp_path,
                "tinker/ArmSort-v0")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_fine_tunings_own_change_is_measured_from_the_pretrained_policy_compensated_on_the_same_episodes(tmp_path):
    """With --latency-compensation auto the zero-shot evaluation is uncompensated and the loop compensated: two things
    differ between zero-shot and after. The row's ``compensated`` (the pretrained policy compensated, same seeds) is
    the baseline of fine-tuning's own change; without it (compensation given, zero-shot already compensated) the
    baseline is zero-shot. Numbers: the camera sorter's run 0 of 2026-12-07 (c896131)."""
    from tinker_cli.benchmark import _plot, table

    def ev(objects: int, episodes: int, estops: int) -> dict:
        return {"success_rate": episodes / 50, "ci_low": 0.0, "ci_high": 1.0, "successes": episodes, "episodes": 50,
                "objects_sorted_rate": objects / 100, "objects_ci_low": 0.0, "objects_ci_high": 1.0,
                "seeds": [1000, 1049], "safety_violations": 0, "safety_estops": estops, "mean_time_to_success_s": 5.0}

    loop = {"published_version": 5, "learner_updates": 9756, "unsafe_states_in_loop": 0, "estops": ["x"] * 27}
    row = {"variant": "far_latency_sort", "run": 0, "latency_compensation": 4, "zero_shot": ev(72, 22, 0),
           "compensated": ev(99, 49, 1), "fine_tuned": ev(90, 40, 9), **loop}
    md = table([row, {**row, "run": 1, "compensated": None}], "tinker/ArmSort-v0")
    first, second = md.splitlines()[2:]
    assert "| -9.0 points of objects, +8 e-stops |" in first and "objects 99.0% [0–100] (1)" in first
    assert "| = zero-shot |" in second and "| +18.0 points of objects, +9 e-stops |" in second
    assert _plot([row], tmp_path, "tinker/ArmSort-v0").read_bytes()[:4] == b"\x89PNG"
