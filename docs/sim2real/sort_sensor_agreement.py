"""How often the sorting success sensor, reading the camera sorter's features, agrees with the simulator.

python docs/sim2real/sort_sensor_agreement.py DYNAMICS_YAML COMPENSATION EPISODES FIRST_SEED
Each state the env reaches: the sensor's reward and success from perception's features of it
(`tinker.reward_source.reward_source("sensors", bundle)`, as the experience bridge builds it) against the env's.
The env ends an episode at the simulator's success, so a sensor success after that cannot be seen here.
"""
import sys, json, numpy as np
from tinker_cli._compose import bundle_modules, policy_env_for_bundle, wire_commanded
from tinker.reward_source import reward_source
B = "pretrained/arm_sort_vision"
dyn, lc, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
mods = bundle_modules(B, latency_compensation=lc)
env = policy_env_for_bundle(mods, "tinker/ArmSort-v0", dynamics=dyn or None, latency_compensation=lc)
wire_commanded(mods, env)
sensor = reward_source("sensors", B).sensor
eps = []
state_agree = states = 0
rdiff = []
for ep in range(n):
    obs, info = env.reset(seed=seed + ep)
    for m in (mods.perception, mods.policy):
        m.reset()
    sim_first = sen_first = None
    r_sim = None
    for t in range(201):
        f = mods.perception(obs)
        rd = sensor.read(f)
        if t > 0:
            states += 1
            state_agree += rd.success == info["is_success"]
            rdiff.append(rd.reward - r_sim)
            if rd.success and sen_first is None: sen_first = t
            if info["is_success"] and sim_first is None: sim_first = t
        if t == 200 or (t > 0 and (term or trunc)):
            break
        a = mods.policy(f)
        obs, r_sim, term, trunc, info = env.step(a)
    eps.append((sim_first, sen_first))
sim_s = sum(a is not None for a, _ in eps); sen_s = sum(b is not None for _, b in eps)
both = sum(a is not None and b is not None for a, b in eps)
false_s = sum(a is None and b is not None for a, b in eps); missed = sum(a is not None and b is None for a, b in eps)
rd = np.abs(rdiff)
print(json.dumps({"dynamics": dyn, "compensation": lc, "episodes": n, "seeds": [seed, seed + n - 1],
                  "sim_successes": sim_s, "sensor_successes": sen_s, "both": both, "false_successes": false_s,
                  "missed": missed, "state_agreement": state_agree / states, "states": states,
                  "reward_abs_diff_median": float(np.median(rd)), "reward_abs_diff_p90": float(np.percentile(rd, 90)),
                  "sensor_late_cycles": [b - a for a, b in eps if a is not None and b is not None][:20]}))
