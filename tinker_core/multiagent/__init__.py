"""Multi-agent training: the agents file, PettingZoo Parallel envs, the multi-agent trainer."""
