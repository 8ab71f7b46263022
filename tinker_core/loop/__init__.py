"""The robot loop's logic without ROS: what the ROS nodes, the environment and the CLI share.

- `observation`: the observation vector from named raw terms (the env's and perception's one assembly);
- `cycle_join`: control cycles joined into transitions (the experience bridge and ``tinker replay import``);
- `perception`: which inputs make one perception cycle (state, frame, task terms, last action);
- `policy`: the policy's cycle (features joined to the state's pose, the action chain per episode);
- `input_ages`: each node input's age on the node's monotonic clock, and when a silent input is stale.
"""
