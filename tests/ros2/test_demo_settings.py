"""`tinker demo`'s settings (no graph is started): the share of live data in each batch follows the reward source, as
measured (README, "Live data only"), and the user's ``--learner-set`` still wins; a camera bundle gets a robot its
policy can feel and the held estimate, which its success sensor reads as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker.bringup import default_params_file, node_parameters
from tinker.bundle_io import open_perception
from tinker.demo import (REAL_FRACTION, DemoConfig, check_dynamics, check_task, default_dynamics, graph_overrides,
                         learner_config, prepare_out)
from tinker_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _cfg(**kw) -> DemoConfig:
    return DemoConfig(checkpoint=str(ROOT / "pretrained/arm_reach/checkpoint"), **kw)


def test_the_simulators_reward_trains_on_live_data_only_and_the_sensors_on_half(tmp_path):
    state = learner_config(_cfg(bundle=str(ROOT / "pretrained/arm_reach/bundle"), reward="sim"), tmp_path)
    vision = learner_config(_cfg(bundle=str(ROOT / "pretrained/arm_reach_vision"), reward="sensors"), tmp_path)
    assert state["real_fraction"] == 1.0 and vision["real_fraction"] == 0.5
    assert state["warmup"] == 256 and vision["warmup"] == 128  # the live share of one batch of 256
    assert set(REAL_FRACTION) == {"sim", "sensors"}
    assert state["perception_bundle"] is None and vision["perception_bundle"].endswith("arm_reach_vision")


def test_a_learner_override_wins(tmp_path):
    lconf = learner_config(_cfg(bundle=str(ROOT / "pretrained/arm_reach/bundle"), learner={"real_fraction": 0.25}),
                           tmp_path)
    assert lconf["real_fraction"] == 0.25 and lconf["warmup"] == 64  # the warmup follows the live share
    assert learner_config(_cfg(bundle=str(ROOT / "pretrained/arm_reach/bundle"), learner={"warmup": 10}),
                          tmp_path)["warmup"] == 10


def test_a_camera_bundle_runs_on_a_robot_it_can_feel_with_the_held_estimate(tmp_path):
    dyn = ROOT / "sim" / "config" / "dynamics"
    for name, camera in (("arm_reach/bundle", False), ("arm_reach_vision", True)):
        cfg = _cfg(bundle=str(ROOT / "pretrained" / name), reward="sensors" if camera else "sim")
        cfg.dynamics = default_dynamics(cfg.bundle, dyn)
        assert Path(cfg.dynamics).name == ("shifted_heavy_laggy.yaml" if camera else "shifted_miscalibrated.yaml")
        check_dynamics(cfg)  # refuses a key the policy cannot feel: the default robot has none
        nodes = graph_overrides(cfg, tmp_path, learner_config(cfg, tmp_path))
        # the estimate and the sensor's target as the launch YAML has them, where a camera bundle holds its estimate
        assert "estimate" not in nodes["perception"] and "sensor_hold_target" not in nodes["experience_bridge"]
        launch = {n: node_parameters(default_params_file(), n) for n in ("perception", "experience_bridge")}
        assert launch["perception"]["estimate"] == "auto" and launch["experience_bridge"]["sensor_hold_target"] is False
        _, cycle, _ = open_perception(cfg.bundle, synced=True, estimate=launch["perception"]["estimate"])
        assert (cycle.hold is not None) is camera


SORT = "tinker/ArmSort-v0"


def test_the_sorter_fine_tunes_from_its_rl_prior_with_the_demonstrations(tmp_path):
    from tinker_deploy.pretrained import finetune_start

    checkpoint, demos = finetune_start(SORT)
    assert checkpoint == ROOT / "pretrained/arm_sort/rl_prior/checkpoint" and (demos / "index.json").is_file()
    assert finetune_start("tinker/ArmReach-v0") == (ROOT / "pretrained/arm_reach/checkpoint", None)
    cfg = DemoConfig(bundle=str(ROOT / "pretrained/arm_sort/bundle"), checkpoint=str(checkpoint), env_id=SORT,
                     demonstrations=str(demos))
    cfg.dynamics = default_dynamics(cfg.bundle, ROOT / "sim" / "config" / "dynamics", SORT)
    assert Path(cfg.dynamics).name == "far_latency_sort.yaml" and cfg.episode_cycles == 200  # the env's limit
    lconf = learner_config(cfg, tmp_path)
    assert lconf["env_id"] == SORT and lconf["demonstrations"] == str(demos)
    assert lconf["real_fraction"] == 0.5 and lconf["warmup"] == 128 and not lconf["seed_replay_from_init"]
    assert graph_overrides(cfg, tmp_path, lconf)["sim_robot"]["episode_cycles"] == 200
    check_task(cfg)
    check_dynamics(cfg)
    assert _cfg(bundle=str(ROOT / "pretrained/arm_reach/bundle")).episode_cycles == 50


@pytest.mark.parametrize("change, message", [
    ({"checkpoint": str(ROOT / "pretrained/arm_sort/checkpoint")}, r"is an imitation \(BC\) policy, which online RL "
                                                                   r"cannot fine-tune; give its RL prior"),
    ({"bundle": str(ROOT / "pretrained/arm_reach/bundle")}, r"was trained on tinker/ArmReach-v0, the demo runs "
                                                            r"tinker/ArmSort-v0"),
    ({"operator": "scripted"}, r"the scripted stand-in reaches for targets; tinker/ArmSort-v0 has no script"),
])
def test_what_cannot_fine_tune_the_sorter_is_refused_before_anything_starts(tmp_path, change, message):
    cfg = DemoConfig(**{"bundle": str(ROOT / "pretrained/arm_sort/bundle"), "env_id": SORT,
                        "checkpoint": str(ROOT / "pretrained/arm_sort/rl_prior/checkpoint"),
                        "dynamics": str(ROOT / "sim/config/dynamics/far_latency_sort.yaml"), "out": str(tmp_path / "o"),
                        **change})
    with pytest.raises(ConfigError, match=message):
        prepare_out(cfg)
    assert not (tmp_path / "o").exists()


def test_the_demos_latency_compensation_is_set_once_for_the_whole_graph(tmp_path):
    cfg = _cfg(latency_compensation=4, bundle=str(ROOT / "pretrained/arm_reach/bundle"))
    nodes = graph_overrides(cfg, tmp_path, learner_config(cfg, tmp_path))
    assert nodes["/**"]["latency_compensation"] == 4  # perception and the policy read the same entry
    assert "latency_compensation" not in nodes["perception"] and "latency_compensation" not in nodes["policy"]
    with pytest.raises(ConfigError, match="DemoConfig.latency_compensation"):
        _cfg(latency_compensation=-1)
