"""Bring up the tinker control graph on a ROS 2 install: ``ros2 launch tinker bringup.launch.py``.

Loads ``config/bringup.yaml`` (the one parameter file; `tinker bringup` reads the same file on
pip-only hosts), starts every node in ``namespace``, and drives the lifecycle nodes (safety,
policy) through configure -> activate with the standard lifecycle_msgs transitions. With no
arguments: the simulated robot and the shipped default policy (``pretrained/arm_reach/bundle``, which
perception and policy take when ``bundle`` is empty).

Arguments: ``sim:=false`` (no simulated robot: a ros2_control driver publishes ``joint_states`` and
takes ``forward_position_controller/commands``; perception then runs on every joint state with the
newest ``goal``, geometry_msgs/PointStamped), ``namespace:=robot1``, ``params_file:=/path/other.yaml``,
``bundle:=/path/bundle`` (perception and policy), ``record:=/path/run.mcap`` and ``view:=true`` (both start
the ``view`` node: it records the run, and with ``view:=true`` serves the live view on ws://127.0.0.1:8765 and
http://127.0.0.1:8766/), ``command_type:=joint_trajectory`` (a joint_trajectory_controller) and
``command_joints:=j2,j1,...`` (a forward_command_controller's joint order), each set for every node that sends, runs
or hears the safe command; ``latency_compensation:=4`` and ``latency_auto:=true`` (the command latency perception and
the policy compensate: fixed, or the one the safety node measures), set for perception, policy and safety. Empty =
the file's value.

A node that dies: perception, the policy and the experience bridge start again (``respawn:=false``: they do not),
at most 5 times each, the policy configured and activated again; safety's e-stop, latched by its watchdog while
they were gone, holds the robot until a person resets it (``/safety/reset``). The robot or safety ending stops the
launch, every robot's with ``agents:=`` (a restarted safety would forget its latched e-stop; ``tinker bringup``
stops that robot alone).

``agents:=/path/agents.yaml``: several robots, one namespace per agent of the file (tinker.fleet), each with its
own nodes, SafetyWrapper and lifecycle, the agent's ``bundle`` for perception and policy, and its own simulator
seed; ``namespace`` and ``bundle`` do not apply then. The file's ``channels`` go to every robot's perception and
policy (`tinker.fleet.robot_params`: a sender publishes on ``/tinker/channels/NAME``, its receivers hear it), and
each robot's view node prefixes its frame ids with the robot's name.
"""

import os

import launch
import launch.events
from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessStart
from launch.events import Shutdown
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition
from tinker.bringup import (LIFECYCLE, MAX_RESTARTS, NODES, RESTART_DELAY_S, RESTARTED, WITHOUT_SIM, node_parameters,
                            safety_for_sim, sim_for_bundle)

# NODES (every node of the loop, one console script each) and LIFECYCLE (the nodes that command the robot,
# configured then activated in this order) come from the loop's one description, tinker_core.loop.graph.ROBOT_LOOP.
PARAMS_FILE = "config/bringup.yaml"
"""The one parameter file, relative to the package share."""
VIEW_NODE = "view"
"""The observer (records, streams the live view): started when ``record`` or ``view`` is given."""
OVERRIDES = {"bundle": ("perception", "policy"), "record": (VIEW_NODE,)}
"""Launch arguments that, when not empty, override one parameter of these nodes."""
SHARED = ("command_type", "command_joints", "latency_compensation", "latency_auto")
"""Launch arguments that, when not empty, set one value for every node that declares the parameter (the launch
YAML's /** entry): the safe command's message type and joint order, which the robot's controller decides, and the
command latency compensated (a number of periods, and whether to follow the one the safety node measures)."""


def _change(node, transition_id):
    return EmitEvent(event=ChangeState(lifecycle_node_matcher=launch.events.matches_action(node),
                                       transition_id=transition_id))


def _when_it_ends(name, namespace, respawn):
    """What happens when node ``name``'s process ends, as tinker bringup's Graph.supervise does: RESTARTED nodes
    start again; the robot or safety ending stops the launch (a restarted safety would forget its latched e-stop);
    the view node's end is only logged."""
    if name in RESTARTED:
        return dict(respawn=True, respawn_delay=RESTART_DELAY_S, respawn_max_retries=MAX_RESTARTS) if respawn else {}
    if name == VIEW_NODE:
        return {}

    def stop(context):  # not again when the launch is already stopping (Ctrl-C): it ends every node
        why = (f"{namespace}/{name} exited: " + ("the robot's safety guard is gone (a restart would forget its "
               "latched e-stop)" if name == "safety" else "the robot is gone") + "; the graph stops")
        return None if context.is_shutdown else [LogInfo(msg=why), EmitEvent(event=Shutdown(reason=why))]
    return {"on_exit": [OpaqueFunction(function=stop)]}


def _activate_again(name, namespace):
    """On each start of a lifecycle node's process after the first (a respawn): ``lifecycle_up`` configures and
    activates it, asking its state until it is active. A ChangeState event would be sent once, and may reach only
    the dead process, still discovered (tinker.lifecycle_up)."""
    starts = []

    def on_start(event, context):
        starts.append(event.pid)
        if len(starts) == 1:
            return None  # the first start: the ChangeState events above
        return [Node(package="tinker", executable="lifecycle_up", name=f"lifecycle_up_{name}", namespace=namespace,
                     arguments=[name], output="screen")]
    return on_start


def _graph(context):
    agents = context.launch_configurations.get("agents", "")
    if not agents:
        return _robot(context, context.launch_configurations["namespace"], {})
    from tinker.fleet import fleet_agents, robot_params

    cfg, base = fleet_agents(agents)
    actions = []
    for i, (name, spec) in enumerate(cfg.agents.items()):
        own = {"bundle": str((base / spec.bundle).resolve()) if spec.bundle else "", "seed": i,
               "nodes": robot_params(cfg, name)}  # channels, agent name, frame prefix
        actions += _robot(context, name, own)
    return actions


def _robot(context, namespace, own):
    """One robot's nodes in ``namespace``; ``own``: its bundle and simulator seed when it is one of several."""
    from tinker.param_check import check_params_file, declared, typed_argument

    params_file = context.launch_configurations["params_file"]
    shared = {a: context.launch_configurations.get(a, "") for a in SHARED}
    shared = {a: typed_argument(a, v) for a, v in shared.items() if v}  # as the parameter's type, checked
    overrides = {**own.get("nodes", {}), **({"/**": shared} if shared else {})}
    tables = declared()
    sim = context.launch_configurations["sim"].strip().lower() not in ("false", "0", "no", "off")
    respawn = context.launch_configurations["respawn"].strip().lower() not in ("false", "0", "no", "off")
    actions = []
    view = context.launch_configurations.get("view", "false").lower() in ("true", "1", "yes")
    observers = (VIEW_NODE,) if view or context.launch_configurations.get("record", "") else ()
    # a parameter no node declares, or a value a node would refuse, stops the launch here, named
    check_params_file(params_file, [n for n in NODES + observers if sim or n != "sim_robot"], overrides)
    bundle = (own.get("bundle") if "bundle" in own else context.launch_configurations.get("bundle", "")) or \
        node_parameters(params_file, "perception").get("bundle", "")
    camera = sim_for_bundle({"bundle": bundle}) if sim else {}  # the task and camera the bundle was trained on
    for name in NODES + observers:
        if name == "sim_robot" and not sim:
            continue
        params = [params_file]
        for arg, nodes in OVERRIDES.items():
            value = own.get(arg) if arg in own else context.launch_configurations.get(arg, "")
            if value and name in nodes:
                params.append({arg: value})
        if any(a in tables[name] for a in shared):
            params.append({a: v for a, v in shared.items() if a in tables[name]})
        if name == "sim_robot" and "seed" in own:
            params.append({"seed": own["seed"]})
        if name == "sim_robot" and camera:
            params.append(camera)
        if name == "perception" and "camera_rate_hz" in camera:
            params.append({"camera_rate_hz": camera["camera_rate_hz"]})
        if name == "safety" and sim:  # the simulated task's table and bins join the guard's known scene
            task = {**node_parameters(params_file, "sim_robot"), **camera, **own.get("nodes", {}).get("sim_robot", {})}
            fixtures = safety_for_sim(task)
            if fixtures:
                params.append(fixtures)
        if name == "experience_bridge" and bundle and not node_parameters(params_file, name).get("sensor_bundle"):
            params.append({"sensor_bundle": bundle})  # reward_source sensors reads perception's features
        if name == VIEW_NODE:
            params.append({"serve": view})
        if own.get("nodes", {}).get(name):
            params.append(own["nodes"][name])
        if not sim and name in WITHOUT_SIM:
            params.append(WITHOUT_SIM[name])
        life = _when_it_ends(name, namespace, respawn)
        if name in LIFECYCLE:
            node = LifecycleNode(package="tinker", executable=name, name=name, namespace=namespace,
                                 parameters=params, output="screen", **life)
            actions += [
                node,
                RegisterEventHandler(OnStateTransition(  # once: later configures are a person's or lifecycle_up's
                    target_lifecycle_node=node, start_state="configuring", goal_state="inactive",
                    entities=[_change(node, Transition.TRANSITION_ACTIVATE)], handle_once=True)),
                _change(node, Transition.TRANSITION_CONFIGURE),
            ]
            if life.get("respawn"):
                actions.append(RegisterEventHandler(OnProcessStart(target_action=node,
                                                                   on_start=_activate_again(name, namespace))))
        else:
            actions.append(Node(package="tinker", executable=name, name=name, namespace=namespace,
                                parameters=params, output="screen", **life))
    return actions


def generate_launch_description():
    share = get_package_share_directory("tinker")
    return launch.LaunchDescription([
        DeclareLaunchArgument("sim", default_value="true",
                              description="true: the simulated robot (sim_robot); false: none, a real driver"),
        DeclareLaunchArgument("namespace", default_value="", description="robot namespace, e.g. robot1"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, PARAMS_FILE),
                              description="the graph's parameter file (ros__parameters per node)"),
        DeclareLaunchArgument("bundle", default_value="",
                              description="deploy bundle dir for perception and policy (empty: the shipped default)"),
        DeclareLaunchArgument("record", default_value="", description="MCAP file to record the run to (view node)"),
        DeclareLaunchArgument("agents", default_value="",
                              description="agents file: one robot per agent, each in its own namespace (tinker.fleet)"),
        DeclareLaunchArgument("respawn", default_value="true",
                              description="true: perception, policy and experience_bridge start again when they die "
                                          "(safety's e-stop holds until a person resets it); the robot or safety "
                                          "dying stops the launch either way"),
        DeclareLaunchArgument("view", default_value="false",
                              description="true: live view (Foxglove WebSocket :8765, browser page :8766)"),
        DeclareLaunchArgument("command_type", default_value="",
                              description="the safe command's message: float64_array (forward_command_controller) "
                                          "or joint_trajectory (joint_trajectory_controller); empty: the file's"),
        DeclareLaunchArgument("command_joints", default_value="",
                              description="float64_array: the joints in the order your controller lists them, "
                                          "comma-separated; empty: the file's (the URDF's order)"),
        DeclareLaunchArgument("latency_compensation", default_value="",
                              description="control periods from a command to the motors, compensated by perception "
                                          "and the policy; empty: the file's (0)"),
        DeclareLaunchArgument("latency_auto", default_value="",
                              description="true: compensate the command latency the safety node measures, once it has "
                                          "stood 1 s (safety/command_latency); empty: the file's (false)"),
        OpaqueFunction(function=_graph),
    ])
