"""The parameter tables of the nodes with long ones: name -> `tinker.runtime.Param` (default, description, range,
read-only; the type is the default's). `tinker.runtime.NodeRuntime` declares them with ParameterDescriptors; the
launch YAML (config/bringup.yaml) holds the values that run."""

from __future__ import annotations

from tinker.channel_io import CHANNEL_PARAMS
from tinker.runtime import Param
from tinker.wire import topic_params
from tinker_core.loop.cycle_join import ESTOP_REWARD
from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M, CALIBRATION_DEADBAND_RANGE_M
from tinker_core.loop.latency_compensation import MAX_STEPS

_RECONF = " Changed only while unconfigured; takes effect at the next configure."
_FIXED = " Fixed at start-up."

COMMAND_TYPE_PARAMS = {
    "command_type": Param("float64_array", "The safe command's message: float64_array (std_msgs/Float64MultiArray in "
                                           "the robot's joint order: ros2_control's forward_command_controller) or "
                                           "joint_trajectory (trajectory_msgs/JointTrajectory by joint name: "
                                           "joint_trajectory_controller). Set it once, in the launch YAML's /** "
                                           "section: safety sends it, the robot runs it, and perception, the policy, "
                                           "the experience bridge and the view hear it (the parameter check refuses "
                                           "two)." + _FIXED, read_only=True),
}
"""the safe command's message type, one value for every node that sends, runs or hears it"""

COMMAND_JOINTS_PARAMS = {
    "command_joints": Param("", "The joints of a Float64MultiArray safe command in the order the robot's controller "
                                "takes them (forward_command_controller's 'joints', comma-separated); '' = the URDF's "
                                "order. Set it once, in the launch YAML's /** section: safety sends in this order, "
                                "the robot, perception, the policy and the view read it. A JointTrajectory names "
                                "its joints (command_type joint_trajectory): leave it ''." + _FIXED, read_only=True),
}
"""the safe command's joint order, for the nodes that send or read it by position"""

LATENCY_PARAMS = {
    "latency_compensation": Param(0, "control periods from a command to the motors, compensated (0: off): perception "
                                     "puts the arm's terms at the pose the newest safe command brings it to, the "
                                     "policy's chain steps from there and its tool command (the suction) goes that "
                                     "many cycles late (tinker_core.loop.latency_compensation). Set it once, in "
                                     "the launch YAML's /** section: perception, policy and safety must agree. The "
                                     "safety node measures it (command_latency_periods in /diagnostics); with "
                                     "latency_auto this is the value to start from." + _FIXED,
                                  (0, MAX_STEPS), True),
    "latency_auto": Param(False, "true: compensate the command latency the safety node measures (once it has stood "
                                 "1 s; safety/command_latency says each one taken), starting from "
                                 "latency_compensation. Set it once, in the launch YAML's /** section: perception, "
                                 "policy and safety must agree." + _FIXED, read_only=True),
    **topic_params(safe_command_topic="command"),
    **COMMAND_TYPE_PARAMS,
    **COMMAND_JOINTS_PARAMS,
}
"""what perception and the policy both read to compensate a robot's command latency"""

SAFETY_PARAMS = {
    "latency_compensation": Param(0, "the command latency perception and the policy compensate (the launch YAML's /** "
                                     "value; the parameter check refuses another). This node measures the latency "
                                     "from the states it hears and the commands it sends (command_latency_periods in "
                                     "/diagnostics) and warns while the two differ." + _FIXED,
                                  (0, MAX_STEPS), True),
    "latency_auto": Param(False, "true: the latency this node measures, once it has stood 1 s, is the one "
                                 "compensated: sent on command_latency_topic to perception (and, through its "
                                 "features, the policy); the launch YAML's /** value (the parameter check refuses "
                                 "another)." + _FIXED, read_only=True),
    "urdf": Param("", "Robot URDF path; '' = kuka_iiwa/model.urdf from pybullet_data." + _RECONF),
    "config": Param("", "Safety YAML (safety.config.SafetyConfig); '' = safety/config/kuka_iiwa.yaml. Its "
                        "watchdog_misses_to_estop is the number of missed cycles in a row that latch the e-stop." + _RECONF),
    **{name: Param(default, f"Topic or node name: {what}." + _FIXED, read_only=True) for name, default, what in (
        ("policy_command_topic", "policy/joint_target", "joint targets from the policy"),
        ("command_topic", "forward_position_controller/commands", "safe commands to the robot"),
        ("joint_states_topic", "joint_states", "the robot's measured state"),
        ("estop_state_topic", "safety/estop_state", "latched e-stop state"),
        ("intervention_topic", "", "a person's teleop joint targets (sensor_msgs/JointState); empty: no takeover"),
        ("intervened_topic", "safety/intervened", "each cycle served from teleop: target and measured pose"),
        ("command_latency_topic", "safety/command_latency", "each command latency measured and now compensated "
                                                            "(latency_auto)"),
        ("policy_node", "policy", "the policy lifecycle node (its transition_event tells a deactivated policy "
                                  "from a dead one)"))},
    "task_fixtures": Param("", "The simulated robot's task fixtures (the sorter's table and bins) as a JSON list of "
                               "safety.config scene items, added to the safety YAML's scene; set by tinker bringup and "
                               "the launch file from sim_robot's task. '' = none: on a real robot the safety YAML "
                               "describes the cell." + _FIXED, read_only=True),
    **COMMAND_TYPE_PARAMS,
    **COMMAND_JOINTS_PARAMS,
    "hold_deadline": Param(0.6, "Fraction of the control period after a state before the hold goes out (a missed "
                                "cycle). Takes effect at the next state.", (0.05, 0.95)),
    "max_state_age": Param(0.5, "s: a JointState stamped further in the past than this (node clock) is refused and "
                                "the robot held. Takes effect at the next state.", (0.01, 10.0)),
    "max_state_future": Param(0.1, "s: a JointState stamped further in the future than this (node clock) is "
                                   "refused and the robot held.", (0.0, 10.0)),
    "state_jump_tolerance": Param(0.2, "rad beyond the URDF velocity limit times the time between two states' "
                                       "arrivals; a larger jump is an implausible state.", (0.0, 3.0)),
    "state_quarantine": Param(0.5, "s: two implausible states within this time refuse every state for this long "
                                   "(two interleaved sources).", (0.0, 60.0)),
    "intervention_max_age": Param(0.2, "s: a teleop target (intervention topic) replaces the policy's while its stamp "
                                       "is at most this old (node clock); older ones are refused, and control "
                                       "returns to the policy this long after the person stops.", (0.01, 5.0)),
    "intervention_max_future": Param(0.1, "s: a teleop target stamped further in the future than this (node clock) "
                                          "is refused.", (0.0, 10.0)),
}
"""`tinker.safety.SafetyNode`"""

SIM_ROBOT_PARAMS = {
    "task": Param("reach", "Task: reach or sort (sim.tasks)." + _FIXED, read_only=True),
    "dynamics": Param("", "A sim DynamicsParams YAML (domain randomization); '' = nominal." + _FIXED, read_only=True),
    "camera": Param(True, "Publish camera images." + _FIXED, read_only=True),
    "image_size": Param(64, "Camera image width and height, px." + _FIXED, (8, 1024), True),
    "camera_views": Param(1, "Camera views side by side in one image: 1, or 2 (and its mirror from the "
                             "front-left)." + _FIXED, (1, 2), True),
    "camera_rate_hz": Param(20.0, "Camera frames per s, rendered off the control path; 0 = every cycle, in line."
                            + _FIXED, (0.0, 1000.0), True),
    "seed": Param(0, "Seed of the first episode (episode k uses seed + k)." + _FIXED, (0, 2**31 - 1), True),
    "hold_after_cycles": Param(3, "Cycles without a fresh command before the arm holds its measured pose.",
                               (1, 1000)),
    "episode_cycles": Param(0, "> 0: a new episode (reset) after this many cycles or on success; 0 = never.",
                            (0, 1_000_000)),
    "end_on_success": Param(True, "true: an episode also ends (reset) on the simulator's own success; false: only "
                                  "after episode_cycles (a learner rewarded by a success sensor then learns nothing "
                                  "from when the simulator resets)." + _FIXED, read_only=True),
    "end_on_sensor": Param(True, "true: an episode also ends (reset) where the experience bridge's success sensor "
                                 "saw the task done (episode_end), as a cell's reset routine would; false: it "
                                 "ignores episode_end." + _FIXED, read_only=True),
    **COMMAND_TYPE_PARAMS,
    **COMMAND_JOINTS_PARAMS,
    **{name: Param(default, what + _FIXED, read_only=True) for name, default, what in (
        ("command_topic", "forward_position_controller/commands", "Topic of the joint position commands."),
        ("joint_states_topic", "joint_states", "Topic of the measured joint state."),
        ("image_topic", "camera/image_raw", "Topic of the camera images."),
        ("task_topic", "task", "Topic of the task terms (simulator only)."))},
    "num_objects": Param(0, "Sort task: objects per episode (0: the task's default)." + _FIXED, (0, 16), True),
    "max_objects": Param(0, "Sort task: object slots in the task terms (0: num_objects); a policy trained "
                            "with slots needs the same." + _FIXED, (0, 16), True),
    **topic_params(tool_command_topic="tool_command", episode_end_topic="episode_end", goal_topic="goal"),
}
"""`tinker.sim_robot.SimRobotNode` (`tinker_sim.robot_loop.SimRobotConfig` takes the robot's own)"""

BRIDGE_PARAMS = {
    "learner_endpoint": Param("", "ZeroMQ PUSH endpoint of the learner, e.g. tcp://127.0.0.1:5555 (empty: none)", read_only=True),
    "weights_endpoint": Param("", "ZeroMQ SUB endpoint for new bundles, e.g. tcp://127.0.0.1:5556 (empty: none)", read_only=True),
    "bundle_dir": Param("", "where received bundles are written (empty: a temp dir)", read_only=True),
    "record": Param("", "RUN.mcap: record every cycle (empty: off)", read_only=True),
    "policy_node": Param("policy", "the policy node to hand bundles to (relative to the namespace)", read_only=True),
    "perception_node": Param("perception", "the perception node to hand a new perception model to", read_only=True),
    "reward_source": Param("sim", "where the transitions' reward and episode end come from: 'sim' = the simulated "
                                  "robot's task topic (its true target: an oracle); 'sensors' = the success sensor on "
                                  "each state's features (target found by the camera, FK of the measured joints), the "
                                  "task topic giving only cycle/episode counters", read_only=True),
    "sensor_bundle": Param("", "reward_source 'sensors': the bundle whose features the sensor reads (its obs_terms; "
                               "what the sensor reads must be among its image_terms: the reach's target_pos, the "
                               "sorter's object terms)", read_only=True),
    "sensor_env": Param("", "reward_source 'sensors': the env whose task gives the success rule (the reach's success "
                            "distance and bonus, the sorter's reward and bins) and the time limit; '' = the sensor "
                            "bundle's own env (its manifest's env_id)", read_only=True),
    "sensor_hold_target": Param(False, "reward_source 'sensors': hold the target of each episode's first state; "
                                       "false (default) reads each state's, which carries perception's held "
                                       "estimate (perception.estimate auto or held); true where perception "
                                       "estimates per frame", read_only=True),
    **topic_params(task_topic="task", features_topic="features", raw_action_topic="raw_action",
                   joint_target_topic="joint_target", command_topic="command", estop_state_topic="estop_state",
                   intervened_topic="intervened", episode_end_topic="episode_end"),
    **COMMAND_TYPE_PARAMS,
    "urdf": Param("", "robot model: forward kinematics for reward_source 'sensors', joint limits of the action chain a "
                      "person's target is inverted through (empty: the KUKA iiwa, kuka_iiwa/model.urdf)", read_only=True),
    "label_window": Param(3.0, "s: a label_episode call applies to the episode that ended within this time, else to "
                               "the running one; each episode's last transition waits this long for a label",
                          (0.0, 60.0)),
    "label_success_reward": Param(1.0, "reward of an episode's last transition labelled success", (-1e3, 1e3)),
    "label_failure_reward": Param(-1.0, "penalty (<= 0) added to the reward of an episode's last transition "
                                  "labelled failure; that transition stays bootstrapped", (-1e3, 0.0)),
    "estop_reward": Param(ESTOP_REWARD, "cost (<= 0) added to the reward of the transition whose command the safety "
                                        "guard stopped (a predicted collision: the e-stop latched); it stays "
                                        "bootstrapped. Cycles the guard held give no transition", (-1e3, 0.0)),
}
"""`tinker.experience_bridge.ExperienceBridgeNode`"""

PERCEPTION_PARAMS = {
    "bundle": Param("", "deploy bundle directory (perception.onnx runs here); empty: the shipped default policy"),
    "task_synced": Param(True, "true: wait for the task terms of each state's stamp (the simulated robot); "
                               "false: the newest goal/task terms serve every state", read_only=True),
    "urdf": Param("", "robot model for forward kinematics when task_synced is false (empty: the KUKA iiwa)", read_only=True),
    **topic_params(image_topic="image", joint_states_topic="joint_states", task_topic="task", goal_topic="goal",
                   raw_action_topic="raw_action", features_topic="features", command_latency_topic="command_latency"),
    "warmup_iterations": Param(100, "model runs before the first cycle", (0, 100000), True),
    "camera_rate_hz": Param(20.0, "camera frames per s; 0: every cycle waits for the frame of its state", (0.0, 1000.0), True),
    "max_frame_age": Param(0.25, "s; an older camera frame is refused and the cycle held", (0.0, 10.0)),
    **CHANNEL_PARAMS,
    "estimate": Param("auto", "a vision bundle's image terms (the located target): 'auto' averages them over the "
                              "episode's frames that show the target where the episodes are known (task_synced), "
                              "'held' requires that, 'per_frame' uses each frame's own estimate", read_only=True),
    "calibration_deadband": Param(CALIBRATION_DEADBAND_M, "m; with a held estimate and a bundle that finds the "
                                  "hand, a camera offset the hand measures (forward kinematics minus the hand seen, "
                                  "the episode's mean) no longer than this is not corrected: the hand estimate's "
                                  "own error with the camera in place", CALIBRATION_DEADBAND_RANGE_M),
    **LATENCY_PARAMS,
}
"""`tinker.perception.PerceptionNode`"""

POLICY_PARAMS = {
    "bundle": Param("", "deploy bundle directory (actor.onnx runs here); empty: the shipped default policy"),
    "urdf": Param("", "robot model for the joint limits (empty: kuka_iiwa/model.urdf from pybullet_data)", read_only=True),
    **topic_params(features_topic="features", joint_states_topic="joint_states", command_topic="joint_target",
                   raw_action_topic="raw_action", tool_command_topic="tool_command"),
    "on_overrun": Param("hold", "a cycle over its budget: 'hold' drops the late command, 'stop' stops commanding"),
    "warmup_iterations": Param(200, "actor runs at configure before the first cycle", (0, 100000), True),
    "at_goal": Param("hold", "a reach policy at its goal (the end effector within the task's success distance of "
                             "the target its features show): 'hold' the pose reached until the goal moves or the "
                             "arm is pushed off (tinker_core.loop.goal_hold; a policy trained on episodes that end "
                             "at success never learnt to stay), 'act': the actor goes on." + _RECONF, read_only=True),
    **CHANNEL_PARAMS,
    **LATENCY_PARAMS,
}
"""`tinker.policy.PolicyNode`"""
