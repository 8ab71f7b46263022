"""`export_agent_bundle`: one agent of a multi-agent run as a deploy bundle, channel slots included.

``export_agent_bundle(trainer, "robot2", "bundles/robot2")`` exports the policy of ``robot2``'s group
(`tinker_core.multiagent.MultiAgentTrainer`) with the real exporter (`tinker_deploy.export.export_bundle`: checks,
parity, manifest). Its manifest records the env's layout for that agent (the env's ``deploy_layout(agent)``:
observation and action terms, joints, action chain, control period) and, where the agents file declares channels,
one ``channel/NAME`` observation term per channel the agent hears (after its own terms, the order the `Channels`
wrapper appended them in) and a ``channel/NAME`` action term for the channel it sends on (after its action). The
ROS nodes read exactly these: perception fills the slots from what it hears, policy publishes the message part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tinker_core.errors import ConfigError
from tinker_core.multiagent.channels import Channels


def agent_layout(env: Any, agent: str) -> dict[str, Any]:
    """The env's deploy layout for ``agent`` with the channel terms added (``env``: the trainer's env)."""
    channels = env if isinstance(env, Channels) else None
    inner = channels.env if channels is not None else env
    layout_of = getattr(inner, "deploy_layout", None) or getattr(getattr(inner, "unwrapped", None), "deploy_layout", None)
    if layout_of is None:
        raise ConfigError(f"export {agent!r}: the env {type(inner).__name__} has no deploy_layout(agent) (observation and "
                          "action terms, joints, action chain); a robot's nodes cannot assemble its observation without it")
    layout = dict(layout_of(agent))
    heard, said = channels.channel_terms(agent) if channels is not None else ([], [])
    layout["obs_terms"] = list(layout.get("obs_terms") or []) + heard
    layout["action_terms"] = list(layout.get("action_terms") or []) + said
    return layout


def export_agent_bundle(trainer: Any, agent: str, out: str | Path, *, policy_version: int = 1,
                        log: Callable[[str], None] = print) -> Path:
    """Export ``agent``'s policy (its group's) to the bundle directory ``out``; returns the directory."""
    from tinker_deploy.export import export_bundle

    algo = trainer.algo(agent)
    meta = {**algo.export_metadata(), **agent_layout(trainer.env, agent)}
    return export_bundle(algo.deployable_parts(), meta, out, policy_version=policy_version, log=log)


__all__ = ["agent_layout", "export_agent_bundle"]
