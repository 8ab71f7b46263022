"""The scripted sort expert (`tinker_sim.scripted.ScriptedSortController`) on a fixed dynamics set, with the
SafetyWrapper in the loop as ``tinker eval`` runs a bundle (the ceiling an imitation of it can reach).

    python docs/sim2real/expert_eval.py DYNAMICS.yaml|nominal EPISODES [FIRST_SEED]   -> one JSON line
"""

import json
import sys

from tinker_cli._compose import make_env
from tinker_core.evaluate import evaluate
from tinker_sim.scripted import ScriptedSortController


class ExpertPolicy:
    """The controller as `evaluate` calls a policy: ``reset()`` per episode, then ``policy(obs)``."""

    def __init__(self, env):
        self.ctl = ScriptedSortController(env.unwrapped)

    def reset(self) -> None:
        self.ctl.reset()

    def __call__(self, obs):
        return self.ctl.act(obs)


def main() -> None:
    dyn = None if sys.argv[1] == "nominal" else sys.argv[1]
    env = make_env("tinker/ArmSort-v0", dynamics=dyn)
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    res = evaluate(env, ExpertPolicy(env), int(sys.argv[2]), seed=seed, control_period=env.unwrapped.control_period)
    env.close()
    print(json.dumps(res.to_dict()))


if __name__ == "__main__":
    main()
