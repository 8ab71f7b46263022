"""The ML-Agents adapter against a real peer on the real protocol.

No Unity binary can run here: `unity_peer.UnityPeer` stands in for the Unity player. It is a real gRPC
client of the mlagents_envs ``UnityToExternalProto`` service exchanging the real protobuf messages with
`UnityEnvironment` inside the adapter. The scenario runs in a subprocess because mlagents_envs 0.28
needs protobuf's python implementation, chosen per process; the rest of the suite keeps the fast one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from tinker_sim.dynamics import DynamicsParams

PEER = Path(__file__).with_name("unity_peer.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
        if port >= 65000:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("localhost", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)  # the adapter must set it itself
    return env


@pytest.fixture(scope="module")
def scenario() -> dict:
    port = _free_port_pair()
    proc = subprocess.run([sys.executable, str(PEER), "--port", str(port)], cwd=ROOT, env=_clean_env(),
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_reset_step_close_with_several_agents(scenario):
    assert scenario["protobuf"] == "python"
    assert scenario["peer_error"] is None and scenario["single_peer_error"] is None
    assert scenario["peer_init"] == {"seed": 7, "communication_version": "1.5.0"}
    assert scenario["num_envs"] == 3 and scenario["agent_ids"] == [100, 101, 102]
    assert scenario["reset_obs_shape"] == [3, 4]
    assert scenario["obs_space"] == "Box(-inf, inf, (4,), float32)"
    assert scenario["act_space"] == "Box(-1.0, 1.0, (2,), float32)"
    assert scenario["peer_steps"] == 30  # every adapter step reached the peer as a STEP command
    assert scenario["terminated"] > 0 and scenario["final_obs_ok"]  # same-step autoreset with final_obs
    # close() ended the session: Unity got the shutdown status, or (mlagents_envs stops its server right
    # after queueing that status) saw the server cancel its call; not a timeout or another error
    assert scenario["peer_closed"]


def test_side_channels_carry_engine_settings_and_randomization(scenario):
    engine = scenario["peer_engine"]
    assert engine["time_scale"] == pytest.approx(5.0) and engine["width"] == 64 and engine["height"] == 48
    params = scenario["peer_params"]
    assert params["goal_radius"] == pytest.approx(0.1)
    assert {f.name for f in fields(DynamicsParams)} <= set(params)  # a whole randomization draw arrived
    assert scenario["dynamics_in_range"]
    assert params["actuator_gain"] == pytest.approx(scenario["sent_actuator_gain"], rel=1e-6)
    # ... and the peer's own StatsSideChannel message came back to the adapter
    assert scenario["stats"]["peer/actuator_gain"][0] == pytest.approx(scenario["sent_actuator_gain"], rel=1e-6)


def test_single_agent_gymnasium_env(scenario):
    assert scenario["single_obs_shape"] == [4]
    assert scenario["single_dones"] == 2  # 12 steps standing still, truncated every 5


def test_behavior_specs_map_to_spaces(scenario):
    assert scenario["hybrid_obs_space"] == ("Dict('camera': Box(0.0, 1.0, (84, 84, 3), float32), "
                                            "'vector': Box(-inf, inf, (5,), float32))")
    assert scenario["hybrid_act_space"] == ("Dict('continuous': Box(-1.0, 1.0, (2,), float32), "
                                            "'discrete': MultiDiscrete([3 2]))")
    assert scenario["discrete_act_space"] == "MultiDiscrete([4])"


def test_adapter_refuses_a_process_with_the_fast_protobuf():
    code = ("import google.protobuf.message\n"
            "from google.protobuf.internal import api_implementation\n"
            "assert api_implementation.Type() != 'python'\n"
            "try:\n    import tinker_sim.mlagents_adapter\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert "ConfigError" in proc.stdout and "needs 'python'" in proc.stdout, proc.stdout + proc.stderr
