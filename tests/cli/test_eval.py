"""``tinker eval``: the shipped pretrained bundle on a fixed dynamics file, through the CLI a user runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tinker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinker_cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_eval_prints_one_json_object_on_the_last_line():
    p = tinker("eval", "--env", "tinker/ArmReach-v0", "--dynamics", "sim/config/dynamics/heavy_arm.yaml",
               "--episodes", "4", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    for key in ("success_rate", "ci_low", "ci_high", "episodes", "safety_interventions", "mean_time_to_success_s"):
        assert key in d
    assert d["episodes"] == 4
    assert 0.0 <= d["ci_low"] <= d["success_rate"] <= d["ci_high"] <= 1.0
    assert d["dynamics"].endswith("heavy_arm.yaml")
    assert d["successes"] >= 1, "the pretrained policy should reach some targets on a held-out variant"


def test_eval_refuses_a_dynamics_file_with_an_unknown_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mass_scale: 1.2\nmass_scael: 3\n")
    p = tinker("eval", "--dynamics", str(bad), "--episodes", "1")
    assert p.returncode == 2
    assert "mass_scael" in p.stderr and str(bad) in p.stderr


def test_eval_refuses_a_missing_bundle(tmp_path):
    p = tinker("eval", str(tmp_path / "nope"), "--episodes", "1")
    assert p.returncode == 2
    assert "nope" in p.stderr


def test_eval_writes_its_figure_from_what_it_measured(tmp_path):
    png = tmp_path / "figs" / "eval.png"
    p = tinker("eval", "--dynamics", "sim/config/dynamics/heavy_arm.yaml", "--episodes", "3", "--json", "--plot", str(png))
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["plot"] == str(png) and png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20_000
    fig = d["figure"]
    # one timing per step (policy + SafetyWrapper), one point per episode, and the interventions drawn per
    # episode add up to the SafetyWrapper's own counters at the end
    assert fig["steps_timed"] == fig["steps"] > 0 and fig["episodes_drawn"] == d["episodes"] == 3
    assert fig["interventions_drawn"] == fig["safety_counters"]
    assert sum(fig["safety_counters"].values()) >= 1  # the heavy arm's commands get rate-limited
    assert 0 < d["step_ms_p50"] <= d["step_ms_p99"]


def test_eval_runs_a_hierarchy_on_the_arm_with_the_safety_wrapper_at_a_curriculum_level():
    bundle = "pretrained/arm_sort_hppo/bundle"
    p = tinker("eval", bundle, "--curriculum", "num_objects=2", "--episodes", "2", "--json", "--plot", "")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["safety"] is True and d["curriculum"] == "num_objects=2" and d["objects_total"] == 4
    bad = tinker("eval", bundle, "--curriculum", "num_objects", "--episodes", "1", "--plot", "")
    assert bad.returncode != 0 and "--curriculum 'num_objects': expected PARAM=VALUE" in bad.stderr


def test_eval_refuses_a_camera_key_on_a_state_only_policy_and_says_why():
    """The issue's case: a moved camera on the state bundle gave results byte-identical to nominal."""
    p = tinker("eval", "pretrained/arm_reach/bundle", "--dynamics", "sim/config/dynamics/shifted_camera.yaml",
               "--episodes", "1", "--plot", "")
    assert p.returncode == 2
    assert ("sim/config/dynamics/shifted_camera.yaml: 1 key(s) cannot act on tinker/ArmReach-v0 with the policy "
            "pretrained/arm_reach/bundle") in p.stderr
    assert "camera_shift_m = 0.08: the policy's observation has no camera image (a state-only policy)" in p.stderr


def test_eval_takes_a_camera_shift_of_either_sign_on_a_camera_policy(tmp_path):
    neg = tmp_path / "shift_neg.yaml"
    neg.write_text("camera_shift_m: -0.08\n")  # drawn in a random direction per episode: the sign means nothing
    runs = []
    for dyn in ("sim/config/dynamics/shifted_camera.yaml", str(neg)):
        p = tinker("eval", "pretrained/arm_reach_vision", "--dynamics", dyn, "--episodes", "2", "--json", "--plot", "")
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert [r["episodes"] for r in runs] == [2, 2] and runs[1]["dynamics"] == str(neg)
    # (the same variant in distribution; per episode -d moves the camera opposite to +d for the same draw, which
    # the direction's symmetric distribution makes equally likely: tests/sim/test_dynamics_check.py)


def test_eval_takes_the_safety_settings_from_a_yaml_it_names(tmp_path):
    """The same policy and robot under two SafetyWrapper settings: the limits from the measured state hold a laggy
    arm back (docs/sim2real/variants.md); a bad file is refused with its name."""
    import yaml

    shipped = yaml.safe_load((REPO / "safety" / "config" / "kuka_iiwa.yaml").read_text())
    measured = tmp_path / "measured.yaml"
    measured.write_text(yaml.safe_dump({**shipped, "limit_from": "measured"}))
    adjusted = {}
    for name, extra in (("command", []), ("measured", ["--safety-config", str(measured)])):
        p = tinker("eval", "--dynamics", "sim/config/dynamics/far_latency_reach.yaml", "--episodes", "3", "--json",
                   "--plot", "", *extra)
        assert p.returncode == 0, p.stderr[-2000:]
        d = json.loads(p.stdout.strip().splitlines()[-1])
        assert d["safety_config"] == (str(measured) if extra else "default")
        adjusted[name] = d["safety_interventions"]
    # measured here: 98 commands rate-limited from the measured state against 7 on the command stream (3 episodes)
    assert adjusted["measured"] > 3 * adjusted["command"] + 20, adjusted
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**shipped, "limit_from": "stream"}))
    p = tinker("eval", "--episodes", "1", "--safety-config", str(bad))
    assert p.returncode == 2 and "limit_from" in p.stderr and "stream" in p.stderr, p.stderr[-1000:]
    p = tinker("eval", "--episodes", "1", "--no-safety", "--safety-config", str(measured))
    assert p.returncode == 2 and "--no-safety" in p.stderr


def test_eval_runs_the_robot_loops_stages_in_one_process_and_refuses_what_cannot_apply():
    """``--runtime loop``: the nodes' classes wired by the loop's graph (tinker.in_process), no ROS."""
    p = tinker("eval", "--runtime", "loop", "--dynamics", "sim/config/dynamics/far_latency_reach.yaml",
               "--episodes", "8", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["runtime"] == "loop" and d["episodes"] == 8 and d["dynamics"].endswith("far_latency_reach.yaml")
    assert 0.0 <= d["ci_low"] <= d["success_rate"] <= d["ci_high"] <= 1.0 and d["successes"] >= 4, d
    assert not any(d["unsafe_states"].values()) and d["commands_over_velocity_limit"] == 0 and d["estops"] == 0
    for edge in ("joint_states", "features", "joint_target", "command"):
        assert d["flow"][edge]["messages"] == d["cycles"], (edge, d["flow"])
    p = tinker("eval", "--runtime", "loop", "--no-safety", "--episodes", "1")
    assert p.returncode == 2 and "safety stage always runs" in p.stderr, p.stderr[-500:]
    p = tinker("eval", "pretrained/arm_sort/bundle", "--runtime", "loop", "--env", "tinker/ArmReach-v0")
    assert p.returncode == 2 and "trained on tinker/ArmSort-v0" in p.stderr, p.stderr[-500:]


def test_latency_compensation_lets_the_sorter_work_on_a_robot_four_periods_late():
    """The shipped state sorter on far_latency_sort (4 control periods of command latency; trained with 0..1), 20
    episodes on the same seeds, with and without compensating the 4 periods, in the env runtime and the loop's. Measured at 100 episodes (seeds
    1000-1099, 2000-2099): 136/200 and 138/200 objects without, 192/200 and 185/200 with. Here the seeds are fixed and
    the env runtime deterministic; the bound leaves room for a change of the physics' rounding."""
    runs = {}
    for steps in ("0", "4"):
        p = tinker("eval", "pretrained/arm_sort/bundle", "--dynamics", "sim/config/dynamics/far_latency_sort.yaml",
                   "--episodes", "20", "--seed", "1000", "--latency-compensation", steps, "--json", "--plot", "")
        assert p.returncode == 0, p.stderr[-2000:]
        runs[steps] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["4"]["latency_compensation"] == 4 and runs["0"]["latency_compensation"] == 0
    # both measured the robot's latency from its commands and joint states, compensated or not
    assert runs["0"]["command_latency"]["periods"] == runs["4"]["command_latency"]["periods"] == 4, runs["0"]
    assert runs["4"]["objects_sorted"] >= 36 and runs["0"]["objects_sorted"] <= 32, \
        (runs["0"]["objects_sorted"], runs["4"]["objects_sorted"])
    assert runs["4"]["safety_violations"] == 0
    p = tinker("eval", "pretrained/arm_sort/bundle", "--episodes", "1", "--latency-compensation", "-2")
    assert p.returncode == 2 and "--latency-compensation" in p.stderr
    # the loop's stages as the ROS nodes run them: perception and the policy hear the safe command (26/40 and 38/40
    # measured on these seeds: the same gain)
    p = tinker("eval", "pretrained/arm_sort/bundle", "--runtime", "loop", "--dynamics",
               "sim/config/dynamics/far_latency_sort.yaml", "--episodes", "20", "--seed", "1000",
               "--latency-compensation", "4", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    loop = json.loads(p.stdout.strip().splitlines()[-1])
    assert loop["latency_compensation"] == 4 and loop["objects_sorted"] >= 36, loop["objects_sorted"]
    assert loop["command_latency"]["periods"] == 4, loop["command_latency"]  # the safety stage's estimate
    assert sum(loop["unsafe_states"].values()) == 0
    # 'auto': from 0, the loop takes the latency its safety stage measures (38/40 measured on these seeds, as with 4)
    p = tinker("eval", "pretrained/arm_sort/bundle", "--runtime", "loop", "--dynamics",
               "sim/config/dynamics/far_latency_sort.yaml", "--episodes", "20", "--seed", "1000",
               "--latency-compensation", "auto", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    auto = json.loads(p.stdout.strip().splitlines()[-1])
    assert auto["latency_compensated_at_end"] == 4 and len(auto["latency_taken"]) == 1, auto["latency_taken"]
    assert auto["objects_sorted"] >= 36 and sum(auto["unsafe_states"].values()) == 0, auto["objects_sorted"]
    p = tinker("eval", "pretrained/arm_sort/bundle", "--episodes", "1", "--latency-compensation", "auto")
    assert p.returncode == 2 and "add --runtime loop" in p.stderr, p.stderr[-500:]
