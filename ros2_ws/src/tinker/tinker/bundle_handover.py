"""`BundleHandover`: the experience bridge's bundles, between the learner and the loop's nodes (ROS 2 side).

New bundles from the learner (`tinker_core.transport.WeightsSubscriber`) are written atomically
(`tinker.bundle_io.write_bundle`) and handed to the policy node by setting its ``bundle`` parameter (perception
first when its model changed). The running bundle's action chain, the one a person's targets are inverted
through, is the policy node's ``bundle`` parameter, asked every few seconds, or the one last handed over.

A node started again after it died (`tinker.bringup.RESTARTED`) loads the bundle of its start-up parameters. The
newest handed over is handed over again: to the policy when it becomes active (its lifecycle) and runs another,
to perception when the newest changed perception's model and perception runs another (asked every few seconds:
a policy whose bundle's perception differs from perception's holds every cycle).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient

from tinker.bundle_io import bundle_chain, write_bundle
from tinker_core.errors import TinkerError
from tinker_core.loop.bridge import ExperienceBridge
from tinker_core.loop.graph import ROBOT_LOOP

ASK_EVERY = 10
"""`tick` calls between two reads of the policy node's ``bundle`` parameter once one was read (until then, every
call: a person who takes over right after start-up needs the chain at once)"""


class BundleHandover:
    """``node``: the bridge node (its namespace, logger, timers); ``bridge``: whose ``chain`` it keeps; ``urdf``:
    the robot's, for the chain's limits; ``nodes``: role -> node name (``policy``, ``perception``)."""

    def __init__(self, node, bridge: ExperienceBridge, urdf: str, nodes: dict[str, str],
                 weights_endpoint: str = "", bundle_dir: str = ""):
        self.node, self.bridge, self.urdf = node, bridge, urdf
        self.weights = self.deployed_version = None
        self.deployed: tuple[str, bool] | None = None
        """the newest bundle handed over (its path) and whether its perception model changed"""
        self.handed_again = 0
        """times it was handed over again to a node that had started anew"""
        self.bundles_received, self._ticks, self._asked_at = 0, 0, None
        self._recheck: set[str] = set()  # roles whose bundle to compare with the newest handed over at the next ask
        ns = node.get_namespace().rstrip("/")
        self.clients = {role: AsyncParameterClient(node, f"{ns}/{name}") for role, name in nodes.items()}
        if weights_endpoint:
            from tinker_core.transport import WeightsSubscriber

            ROBOT_LOOP.check_port(node.module, "bundles", "in")
            self.weights = WeightsSubscriber(weights_endpoint)
            self.bundle_dir = Path(bundle_dir or tempfile.mkdtemp(prefix="tinker-bundles-"))
            self.bundle_dir.mkdir(parents=True, exist_ok=True)
            node.create_timer(0.1, self.poll)

    def tick(self) -> None:
        """Ask the policy node which bundle runs (its chain inverts a person's targets): every call until one was
        read, then every `ASK_EVERY` calls; one question at a time (one unanswered for `ASK_EVERY` calls is
        given up: the policy node may have gone)."""
        self._ticks += 1
        client = self.clients["policy"]
        due = not self.bridge.chain_bundle or self._ticks % ASK_EVERY == 1 or "policy" in self._recheck
        waiting = self._asked_at is not None and self._ticks - self._asked_at < ASK_EVERY
        if due and not waiting and client.services_are_ready():
            self._asked_at = self._ticks
            client.get_parameters(["bundle"], callback=self._on_policy_bundle)
        if self.deployed is not None and self.deployed[1] and self._ticks % ASK_EVERY == 1:
            perception = self.clients["perception"]
            if perception.services_are_ready():
                perception.get_parameters(["bundle"], callback=lambda f: self._hand_again("perception", f))

    def policy_lifecycle(self, active: bool, label: str) -> None:
        """The policy reached a primary state (`tinker.lifecycle.watch_lifecycle`): once active, its bundle is
        compared with the newest handed over (a restarted policy runs its start-up one)."""
        if active and self.deployed is not None:
            self._recheck.add("policy")

    def _on_policy_bundle(self, future) -> None:
        self._asked_at = None
        try:
            path = future.result().values[0].string_value
        except Exception as e:  # the policy node is not up (yet): asked again later
            self.bridge.last_error = f"policy bundle not read: {e!r}"
            return
        if "policy" in self._recheck and self._hand_again("policy", future):
            return
        if path and path != self.bridge.chain_bundle:
            self.use_chain(path)

    def _hand_again(self, role: str, future) -> bool:
        """``role``'s bundle parameter, read (``future``): if it is not the newest handed over, hand that over
        again; whether it did."""
        try:
            path = future.result().values[0].string_value
        except Exception:  # not up: asked again at the next tick
            return False
        self._recheck.discard(role)
        if self.deployed is None or path == self.deployed[0]:
            return False
        self.handed_again += 1
        self.node.get_logger().warning(f"{role} runs {path}, not the newest bundle handed over (it started anew?): "
                                       f"handing {self.deployed[0]} over again")
        self.clients[role].set_parameters([Parameter("bundle", value=self.deployed[0])])
        return True

    def use_chain(self, path: str) -> None:
        """Invert a person's targets through the action chain of bundle ``path`` from now on."""
        b = self.bridge
        b.chain, b.chain_bundle = None, path  # never another bundle's chain; a failing path is not retried
        try:
            b.chain = bundle_chain(path, self.urdf)
        except (OSError, TinkerError) as e:
            b.last_error = f"action chain of bundle {path} not read (interventions give no transition): {e}"
            self.node.get_logger().error(b.last_error)

    def poll(self) -> None:
        """A new bundle from the learner: written, then handed over (a repeat of the deployed one is not)."""
        got = self.weights.poll(0)
        if got is None or got[0] == self.deployed_version:
            return
        version, blobs, meta = got
        try:
            path = write_bundle(self.bundle_dir, version, blobs)
        except (OSError, TinkerError) as e:
            self.bridge.last_error = f"bundle v{version} not written: {e}"
            return self.node.get_logger().error(self.bridge.last_error)
        self.bundles_received, self.deployed_version = self.bundles_received + 1, version
        self.deployed = (str(path), bool(meta.get("perception_changed", False)))
        self.use_chain(str(path))
        self.deploy(*self.deployed)

    def deploy(self, path: str, perception_changed: bool = False) -> None:
        """Hands bundle ``path`` to the nodes (perception first when its model changed)."""
        for role in ("perception", "policy") if perception_changed else ("policy",):
            self.clients[role].set_parameters([Parameter("bundle", value=path)])
        self.node.get_logger().info(f"handed bundle {path} to the policy node")

    def close(self) -> None:
        if self.weights is not None:
            self.weights.close()
