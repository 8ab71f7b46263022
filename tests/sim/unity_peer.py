"""A stand-in for the Unity player, speaking the real ML-Agents gRPC protocol (test double).

No Unity binary can run here, so this peer plays Unity's part of the mlagents_envs 0.28 protocol:
Unity is the gRPC *client* of ``communicator_objects.UnityToExternalProto/Exchange`` and the Python
side (`UnityEnvironment`, inside the adapter) is the server. The peer sends the academy/behavior
parameters, answers RESET and STEP commands with `UnityRLOutputProto` agent infos, reads the
EngineConfiguration and EnvironmentParameters side channels and applies them to a small point-mass
scene (several agents of one behavior, each steering a point to its goal), and reports back over
the StatsSideChannel. It stops when the Python side sends header status 400 (close).

Run as a script (``python unity_peer.py --port P``) it drives `tinker_sim.mlagents_adapter` against the
peer in this fresh process (so protobuf's python implementation is in force) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import threading
import uuid
from pathlib import Path

os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a script

import warnings  # noqa: E402

import grpc  # noqa: E402
import numpy as np  # noqa: E402

import tinker_sim.mlagents_adapter  # noqa: E402,F401  (first: it makes mlagents_envs' protobuf map fields work, see there)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
    from mlagents_envs.communicator_objects.brain_parameters_pb2 import ActionSpecProto, BrainParametersProto
    from mlagents_envs.communicator_objects.capabilities_pb2 import UnityRLCapabilitiesProto
    from mlagents_envs.communicator_objects.command_pb2 import RESET, STEP
    from mlagents_envs.communicator_objects.observation_pb2 import ObservationProto
    from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
    from mlagents_envs.communicator_objects.unity_to_external_pb2_grpc import UnityToExternalProtoStub
    from mlagents_envs.side_channel.incoming_message import IncomingMessage
    from mlagents_envs.side_channel.outgoing_message import OutgoingMessage

ENGINE_ID = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
PARAMS_ID = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS_ID = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")


class UnityPeer(threading.Thread):
    """The Unity side: ``n_agents`` agents of ``behavior``, obs = [position xy, goal xy], 2 continuous actions."""

    def __init__(self, port: int, n_agents: int = 3, behavior: str = "PointReach?team=0", max_steps: int = 12,
                 step_size: float = 0.1):
        super().__init__(daemon=True)
        self.port, self.n_agents, self.behavior = port, n_agents, behavior
        self.max_steps, self.step_size = max_steps, step_size
        self.engine: dict[str, float] = {}
        self.params: dict[str, float] = {}
        self.commands: list[str] = []
        self.init_input: dict[str, object] = {}
        self.closed_by_python = False
        self.close_seen: str | None = None  # how: "shutdown status" or "server stopped"
        self.error: str | None = None
        self.rng = np.random.default_rng(0)
        self.pos = np.zeros((n_agents, 2))
        self.goal = np.zeros((n_agents, 2))
        self.steps = np.zeros(n_agents, dtype=int)
        self.episodes_done = 0
        self.pending: list[AgentInfoProto] = []
        self.rewards = np.zeros(n_agents)

    # ---- scene -----------------------------------------------------------------------------------
    def _new_episode(self, k: int) -> None:
        self.pos[k] = self.rng.uniform(-1, 1, 2)
        self.goal[k] = self.rng.uniform(-1, 1, 2)
        self.steps[k] = 0

    def _info(self, k: int, reward: float = 0.0, done: bool = False, max_step: bool = False) -> AgentInfoProto:
        obs = ObservationProto(shape=[4], name="VectorSensor_size4")
        obs.float_data.data.extend(np.r_[self.pos[k], self.goal[k]].astype(np.float32).tolist())
        return AgentInfoProto(reward=reward, done=done, max_step_reached=max_step, id=100 + k, observations=[obs])

    def _output(self, init: bool = False) -> UnityMessageProto:
        msg = UnityMessageProto()
        msg.header.status = 200
        out = msg.unity_output
        infos = self.pending + [self._info(k, reward=float(self.rewards[k])) for k in range(self.n_agents)]
        self.pending = []
        out.rl_output.agentInfos[self.behavior].value.extend(infos)
        stats = OutgoingMessage()
        stats.write_string("peer/actuator_gain")
        stats.write_float32(self.params.get("actuator_gain", 1.0))
        stats.write_int32(0)  # StatsAggregationMethod.AVERAGE
        out.rl_output.side_channel = STATS_ID.bytes_le + struct.pack("<i", len(stats.buffer)) + bytes(stats.buffer)
        if init:
            init_out = out.rl_initialization_output
            init_out.name = "UnityPeer"
            init_out.communication_version = "1.5.0"
            init_out.package_version = "2.2.1-exp.1"
            init_out.capabilities.CopyFrom(UnityRLCapabilitiesProto(
                baseRLCapabilities=True, concatenatedPngObservations=True, compressedChannelMapping=True,
                hybridActions=True, trainingAnalytics=True, variableLengthObservation=True, multiAgentGroups=True))
            init_out.brain_parameters.extend([BrainParametersProto(
                brain_name=self.behavior, is_training=True,
                action_spec=ActionSpecProto(num_continuous_actions=2, num_discrete_actions=0))])
        return msg

    def _side_channels(self, data: bytes) -> None:
        offset = 0
        while offset < len(data):
            cid = uuid.UUID(bytes_le=bytes(data[offset:offset + 16]))
            (n,) = struct.unpack_from("<i", data, offset + 16)
            msg = IncomingMessage(bytes(data[offset + 20:offset + 20 + n]))
            offset += 20 + n
            if cid == ENGINE_ID:
                kind = msg.read_int32()
                if kind == 0:
                    self.engine["width"], self.engine["height"] = msg.read_int32(), msg.read_int32()
                else:
                    name = {1: "quality_level", 2: "time_scale", 3: "target_frame_rate", 4: "capture_frame_rate"}[kind]
                    self.engine[name] = msg.read_float32() if kind == 2 else msg.read_int32()
            elif cid == PARAMS_ID:
                key = msg.read_string()
                if msg.read_int32() == 0:  # FLOAT
                    self.params[key] = msg.read_float32()

    def _step(self, actions) -> None:
        gain = self.params.get("actuator_gain", 1.0)
        terminal = []
        for k in range(self.n_agents):
            a = np.clip(np.asarray(actions[k].continuous_actions, dtype=np.float64), -1, 1)
            self.pos[k] += gain * self.step_size * a
            self.steps[k] += 1
            d = float(np.linalg.norm(self.goal[k] - self.pos[k]))
            reached, timeout = d < 0.1, self.steps[k] >= self.max_steps
            if reached or timeout:
                # Unity sends the terminal info and, in the same message, the restarted agent's first decision.
                terminal.append(self._info(k, reward=1.0 if reached else -d, done=True, max_step=not reached))
                self.episodes_done += 1
                self._new_episode(k)
                self.rewards[k] = 0.0
            else:
                self.rewards[k] = -d
        self.pending = terminal

    def run(self) -> None:
        try:
            channel = grpc.insecure_channel(f"localhost:{self.port}")
            stub = UnityToExternalProtoStub(channel)
            for k in range(self.n_agents):
                self._new_episode(k)
            reply = stub.Exchange(self._output(init=True), wait_for_ready=True, timeout=60)
            init_in = reply.unity_input.rl_initialization_input
            self.init_input = {"seed": init_in.seed, "communication_version": init_in.communication_version}
            self.rng = np.random.default_rng(init_in.seed)
            msg = self._output()
            while True:
                try:
                    reply = stub.Exchange(msg, timeout=60)
                except grpc.RpcError as e:
                    # mlagents_envs' close() queues the shutdown status, then stops its server without
                    # grace (RpcCommunicator.close: server.stop(False)), which can cancel the call that
                    # would carry the status: what Unity sees then is the server cancelling all calls
                    if e.code() == grpc.StatusCode.UNAVAILABLE and "Cancelling all calls" in (e.details() or ""):
                        self.closed_by_python, self.close_seen = True, "server stopped"
                        break
                    raise
                if reply.header.status != 200:
                    self.closed_by_python, self.close_seen = True, "shutdown status"
                    break
                rl_in = reply.unity_input.rl_input
                self._side_channels(rl_in.side_channel)
                if rl_in.command == RESET:
                    self.commands.append("reset")
                    for k in range(self.n_agents):
                        self._new_episode(k)
                    self.rewards[:] = 0.0
                    msg = self._output()
                elif rl_in.command == STEP:
                    self.commands.append("step")
                    acts = rl_in.agent_actions[self.behavior].value
                    if len(acts) == self.n_agents:
                        self._step(acts)
                    msg = self._output()
                else:
                    break
            channel.close()
        except Exception as e:  # reported to the test through the JSON result
            import traceback

            self.error = traceback.format_exc()


def scenario(port: int) -> dict:
    """Drive the adapter against the peer: several agents, side channels, reset/step/close."""
    from google.protobuf.internal import api_implementation

    from tinker_sim.mlagents_adapter import EngineSettings, MLAgentsEnv, MLAgentsVectorEnv

    peer = UnityPeer(port, n_agents=3)
    peer.start()
    env = MLAgentsVectorEnv(base_port=port, seed=7, engine=EngineSettings(time_scale=5.0, width=64, height=48),
                            env_parameters={"goal_radius": 0.1}, randomize=True, timeout_wait=20)
    result: dict = {"protobuf": api_implementation.Type(), "num_envs": env.num_envs,
                    "behavior": env.behavior_name, "obs_space": str(env.single_observation_space),
                    "act_space": str(env.single_action_space)}
    try:
        obs, info = env.reset(seed=3)
        return _drive(env, peer, result, obs, info, port)
    except Exception:
        print("peer error:", peer.error, file=sys.stderr)
        raise


def _drive(env, peer, result, obs, info, port):
    from tinker_sim.mlagents_adapter import MLAgentsEnv

    result["reset_obs_shape"] = list(obs.shape)
    result["agent_ids"] = info["agent_id"].tolist()
    sent_gain = env.dynamics.actuator_gain
    returns, terms, truncs, final_ok = np.zeros(3), 0, 0, True
    for _ in range(30):
        # steer each point toward its goal: a = (goal - pos) / step, clipped
        action = np.clip((obs[:, 2:] - obs[:, :2]) / 0.1, -1, 1).astype(np.float32)
        obs, rew, term, trunc, infos = env.step(action)
        returns += rew
        terms += int(term.sum())
        truncs += int(trunc.sum())
        if term.any() or trunc.any():
            final_ok &= all(infos["final_obs"][k].shape == (4,) for k in np.flatnonzero(term | trunc))
        assert env.observation_space.contains(obs)
    result.update(terminated=terms, truncated=truncs, final_obs_ok=bool(final_ok), stats=env.last_stats,
                  sent_actuator_gain=sent_gain, dynamics_in_range=env.ranges.violations(env.dynamics) == [])
    env.close()
    peer.join(timeout=30)
    result.update(peer_engine=peer.engine, peer_params=peer.params, peer_commands=peer.commands[:3],
                  peer_steps=peer.commands.count("step"), peer_closed=peer.closed_by_python, peer_error=peer.error,
                  peer_init=peer.init_input)

    # A single-agent behavior through the plain gymnasium.Env wrapper.
    peer1 = UnityPeer(port + 1, n_agents=1, max_steps=5)
    peer1.start()
    single = MLAgentsEnv(base_port=port + 1, seed=1, timeout_wait=20)
    o, _ = single.reset()
    steps, dones = 0, 0
    for _ in range(12):
        o, r, te, tr, _ = single.step(np.zeros(2, dtype=np.float32))  # standing still: truncated at max_steps
        steps += 1
        if te or tr:
            dones += 1
            o, _ = single.reset()
    single.close()
    peer1.join(timeout=30)
    result.update(single_obs_shape=list(o.shape), single_dones=dones, single_peer_closed=peer1.closed_by_python,
                  single_peer_error=peer1.error)

    # Spec mapping for what the point-mass peer does not send: a camera + vector sensor, hybrid actions.
    from mlagents_envs.base_env import ActionSpec, BehaviorSpec, DimensionProperty, ObservationSpec, ObservationType

    from tinker_sim.mlagents_adapter import action_space_of, observation_space_of

    none = DimensionProperty.NONE
    spec = BehaviorSpec([ObservationSpec((84, 84, 3), (none,) * 3, ObservationType.DEFAULT, "camera"),
                         ObservationSpec((5,), (none,), ObservationType.DEFAULT, "vector")], ActionSpec(2, (3, 2)))
    result.update(hybrid_obs_space=str(observation_space_of(spec)), hybrid_act_space=str(action_space_of(spec)),
                  discrete_act_space=str(action_space_of(BehaviorSpec(spec.observation_specs, ActionSpec(0, (4,))))))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(scenario(args.port)))
