"""`LifecycleAdapter`: the lifecycle transitions of a tinker node, around the steps the node itself gives.

Every commanding node answers the transitions the same way: configure makes the node's subscriptions, publishers,
services and timers, and a configure that fails (an exception, or a namesake on the domain where the node refuses
one) leaves nothing behind, logs why and keeps the reason for /diagnostics, so it can be retried; activate and
deactivate switch the node's stage; cleanup and shutdown destroy what configure made. The node gives
`configure_entities` (appending what it makes to ``made`` as it goes, so a failure halfway releases what was
already made); the other steps (`configured`, `configure_failed`, `activate`, `deactivate`, `release`) are its
stage's (`tinker_core.loop.stage.LoopStage`: the same the in-process loop drives), and a node adds to them where
it holds more than its stage (a timer, a channel).

`watch_lifecycle` follows another node's primary lifecycle states (the safety node follows the policy's).
"""

from __future__ import annotations

from typing import Callable

from lifecycle_msgs.msg import State, TransitionEvent
from rclpy.lifecycle import TransitionCallbackReturn

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
PRIMARY_STATES = (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE, State.PRIMARY_STATE_ACTIVE,
                  State.PRIMARY_STATE_FINALIZED)


class LifecycleAdapter:
    """Mixin before `tinker.runtime.NodeRuntime` and ``rclpy.lifecycle.LifecycleNode`` in a node's bases."""

    refuse_namesake = False
    """True: configure is refused while another node with this node's name is on the domain."""
    stage = None
    """the node's `tinker_core.loop.stage.LoopStage` (None: a node without one)"""
    _entities: list | tuple = ()

    # --- the node's steps ---------------------------------------------------------------------------
    def configure_entities(self, made: list) -> None:
        """Make the node's entities, appending each to ``made``; raise to fail the transition."""
        raise NotImplementedError

    def configured(self) -> None:
        """After a configure that succeeded (its entities are in place)."""
        if self.stage is not None:
            self.stage.configured()

    def configure_failed(self, why: str) -> None:
        """Keep why configure failed where /diagnostics reports it."""
        if self.stage is not None:
            self.stage.configure_failed(why)

    def activate(self) -> None:
        if self.stage is not None:
            self.stage.activate()

    def deactivate(self) -> None:
        if self.stage is not None:
            self.stage.deactivate()

    def release(self) -> None:
        """Destroy what configure made, then the stage lets go (also after a failed configure)."""
        self.destroy_entities(list(self._entities))
        self._entities = ()
        if self.stage is not None:
            self.stage.release()

    def shutdown(self) -> None:
        """The node's last transition: by default, `release`."""
        self.release()

    # --- rclpy's transitions ------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        if self.refuse_namesake:
            self.check_namesake()
            if self.namesake:
                return self._failed(f"configure refused: {self.namesake}")
        made: list = []
        self._entities = made
        try:
            self.configure_entities(made)
        except Exception as e:  # a failed configure leaves nothing behind and can be retried
            self.release()
            return self._failed(f"configure failed: {e}")
        self.configured()
        return SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.activate()
        return SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.deactivate()
        return SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self.release()
        return SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self.shutdown()
        return SUCCESS

    def _failed(self, why: str) -> TransitionCallbackReturn:
        self.configure_failed(why)
        self.get_logger().error(why)
        return FAILURE


def watch_lifecycle(node, peer: str, on_state: Callable[[bool, str], None]):
    """Follow ``peer``'s primary lifecycle states on its ``transition_event`` topic: ``on_state(active, label)``.
    Primary states only: a late event can then only be followed by the rest of its chain (one reliable writer, in
    order), and every chain that re-activates ends with ``active``. The subscription (watched, never stale)."""

    def on_event(msg: TransitionEvent) -> None:
        if msg.goal_state.id in PRIMARY_STATES:
            on_state(msg.goal_state.id == State.PRIMARY_STATE_ACTIVE, msg.goal_state.label)
    # depth 10 as rclpy publishes it
    return node.watch_subscription(TransitionEvent, f"{peer}/transition_event", on_event, 10, None)
