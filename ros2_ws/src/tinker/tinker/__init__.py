"""tinker ROS 2 nodes: thin adapters over tinker_core, sim, safety and deploy."""
