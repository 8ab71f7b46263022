"""`Fleet`: several robots in one ROS 2 graph, one namespace per agent of an agents file.

Each agent ``NAME`` of the file is a robot under ``/NAME``: its own simulated robot (or driver), perception,
policy, SafetyWrapper (safety node) and lifecycle, all on the same parameter file as a single robot, with the
agent's ``bundle``. Topics and services are relative, so ``/robot2/safety/reset`` acts on robot2 alone, and a
dead policy holds only its own robot. The robots' experience bridges stream to one learner endpoint
(``learner_endpoint``): the learner gets one stream per agent, each transition tagged with its namespace.

By default each robot's loop is one composed process (five nodes, one executor: fewer processes for many
robots on few cores), with ``separate`` nodes in processes of their own::

    with Fleet("configs/fleet_reach.yaml", separate=("policy",)) as fleet:
        fleet.graphs["robot2"].kill("policy")   # robot2 holds, then latches its e-stop; the others go on

Channels (the file's ``channels``): every robot's perception and policy get the section (``channels``, as JSON)
and their agent name (``agent``); a sender's policy publishes its message on ``/tinker/channels/NAME``, each
receiver's perception hears it (`tinker.channel_io`). Frames: each robot's view node (when it runs) prefixes
its frame ids with the robot's name (``robot1/base_link``), so several robots' ``/tf`` never collide.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from tinker.bringup import BringupError, Graph, Supervisor
from tinker_core.errors import ConfigError
from tinker_core.multiagent.agents_file import AgentsConfig, load_agents_file
from tinker_core.multiagent.channel_edge import agent_channels
from tinker_core.multiagent.channels import channels_to_json

_NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def fleet_agents(agents: AgentsConfig | str | os.PathLike) -> tuple[AgentsConfig, Path]:
    """The agents file parsed, checked for what a ROS namespace needs, and the folder relative bundles start from."""
    if isinstance(agents, AgentsConfig):
        cfg, base = agents, Path.cwd()
    else:
        path = Path(agents)
        if not path.is_file():
            raise ConfigError(f"agents file not found: {path}")
        cfg, base = load_agents_file(path), path.resolve().parent
    for name, spec in cfg.agents.items():
        if not _NAMESPACE.match(name):
            raise ConfigError(f"agents.{name}: a robot's name is its ROS namespace: letters, digits and '_', not "
                              f"starting with a digit (patterns are for training files), got {name!r}")
        if spec.bundle and not (base / spec.bundle).is_dir():
            raise ConfigError(f"agents.{name}.bundle: not a bundle directory: {base / spec.bundle}")
    for ch in cfg.channels:
        for who, key in [(ch.sender, "from")] + [(r, "to") for r in ch.receivers]:
            if who not in cfg.agents:
                raise ConfigError(f"channels.{ch.name}.{key}: no robot {who!r} in the fleet (robots: {list(cfg.agents)})")
    for name in cfg.agents:
        agent_channels(cfg.channels, name)  # one channel per sender
    return cfg, base


def robot_params(cfg: AgentsConfig, name: str) -> dict[str, dict[str, Any]]:
    """What makes robot ``name`` one of the fleet, by node: its channels and agent name (perception, policy) and
    its frame prefix (view). The bringup and the launch file both use it."""
    own: dict[str, dict[str, Any]] = {"view": {"frame_prefix": f"{name}/"}}
    if cfg.channels:
        for node in ("perception", "policy"):
            own[node] = {"channels": channels_to_json(cfg.channels), "agent": name}
    return own


class Fleet:
    """One `Graph` per agent, started together; ``graphs`` by agent name."""

    def __init__(self, agents: AgentsConfig | str | os.PathLike, *, params_file: str | os.PathLike | None = None,
                 composed: bool = True, separate: Sequence[str] = (), sim: bool = True,
                 overrides: Mapping[str, Mapping[str, Any]] | None = None, run_dir: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, seed: int = 0, record_dir: str | os.PathLike | None = None):
        """``overrides`` apply to every robot (as `Graph`'s); each robot's simulator gets seed ``seed + i``;
        ``record_dir``: each robot records its run to ``record_dir/NAME.mcap`` (its view node, frames prefixed)."""
        cfg, base = fleet_agents(agents)
        self.config = cfg
        root = Path(run_dir) if run_dir else None
        self.env = dict(os.environ if env is None else env)
        self.supervisor: Supervisor | None = None  # one DDS participant for every robot's supervision, made at start
        self.graphs: dict[str, Graph] = {}
        self.robots_stopped: dict[str, dict[str, int | None]] = {}
        """robots `supervise` stopped (their graph could not go on): their exit codes"""
        if record_dir is not None:
            Path(record_dir).mkdir(parents=True, exist_ok=True)
        for i, (name, spec) in enumerate(cfg.agents.items()):
            own: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (overrides or {}).items()}
            for node, params in robot_params(cfg, name).items():
                own[node] = {**params, **own.get(node, {})}
            if spec.bundle:
                b = str((base / spec.bundle).resolve())
                for node in ("perception", "policy"):
                    own.setdefault(node, {})["bundle"] = b
            if sim:
                own.setdefault("sim_robot", {}).setdefault("seed", seed + i)
            self.graphs[name] = Graph(params_file, namespace=name, overrides=own, composed=composed, separate=separate,
                                      sim=sim, env=env, run_dir=None if root is None else root / name,
                                      record=None if record_dir is None else Path(record_dir) / f"{name}.mcap")

    def start(self, timeout: float = 120.0) -> "Fleet":
        """Start every robot's processes, then wait for all of them and activate each robot's lifecycle nodes."""
        started: list[Graph] = []
        if self.supervisor is None:
            self.supervisor = Supervisor(self.env)
        for g in self.graphs.values():
            g.use_supervisor(self.supervisor)
        try:
            for g in self.graphs.values():
                started.append(g.launch())
            for g in self.graphs.values():
                g.bring_up(timeout=timeout)
        except BaseException:
            for g in started:
                g.stop()
            self._close_supervisor()
            raise
        return self

    def supervise(self) -> list[str]:
        """`Graph.supervise` for each running robot, its lines prefixed with its name. A robot whose graph cannot go
        on (its safety or simulated robot died) is stopped alone and the others go on; BringupError once none is
        left."""
        said = []
        for name, g in self.graphs.items():
            if name in self.robots_stopped:
                continue
            try:
                said += [f"/{name}: {line}" for line in g.supervise()]
            except BringupError as e:
                self.robots_stopped[name] = g.stop()
                said.append(f"/{name}: {e}\n/{name} stopped; the other robots go on")
        if len(self.robots_stopped) == len(self.graphs):
            raise BringupError("every robot of the fleet has stopped:\n" + "\n".join(said))
        return said

    def _close_supervisor(self, timeout: float = 10.0) -> None:
        if self.supervisor is not None:
            self.supervisor.close(timeout)
            self.supervisor = None

    def stop(self, grace: float = 10.0) -> dict[str, dict[str, int | None]]:
        """Stop every robot (each publishes its hold on the way out); exit codes by agent and process."""
        codes = {name: self.robots_stopped.get(name) or g.stop(grace) for name, g in self.graphs.items()}
        self._close_supervisor(grace)
        return codes

    def __enter__(self) -> "Fleet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
