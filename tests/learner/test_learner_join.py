"""Rollout workers join a running learner by its control endpoint (``ctl join``): the learner's config does not
describe them, and their own names no learner (``tinker learner workers --learner ENDPOINT``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_workers_ask_the_running_learner_what_to_step_and_where_to_send(learner_factory, tmp_path):
    lp = learner_factory().start()
    rep = lp.ctl("join")
    assert rep["ok"] and rep["env_id"] == "Pendulum-v1", rep
    assert (rep["transitions_endpoint"], rep["params_endpoint"]) == (lp.cfg["transitions_endpoint"],
                                                                       lp.cfg["params_endpoint"])
    workers = tmp_path / "workers.yaml"  # the workers' own settings: nothing about the learner
    workers.write_text(yaml.safe_dump({"workers": {"backend": "local", "num_workers": 1, "worker_cache_size": 50}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "tinker_cli", "learner", "workers", "--learner",
                        lp.cfg["control_endpoint"], "--config", str(workers), "--steps", "300"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["steps"] == 300 and out["sent"] + out["dropped"] == 300, out
    lp.wait(lambda s: s["ingested"].get("sim", 0) == out["sent"], timeout=30)  # every sent one reached the learner
    assert lp.stop() == 0


def test_a_learner_that_does_not_answer_is_named():
    from tinker_cli.learner import _join, _reachable
    from tinker_core.errors import TransportError
    from tinker_core.transport import free_endpoints

    nobody = free_endpoints(1)[0]
    try:
        _join(nobody, timeout_s=0.5)
    except TransportError as e:
        assert f"--learner {nobody}: no learner answered" in str(e) and "tinker learner --config" in str(e)
    else:
        raise AssertionError("no error for a learner that is not there")
    # a learner bound on every interface is reached where its control socket was
    assert _reachable("tcp://*:5555", "tcp://10.0.0.5:5557") == "tcp://10.0.0.5:5555"
    assert _reachable("tcp://0.0.0.0:5555", "tcp://robot-pc:5557") == "tcp://robot-pc:5555"
    assert _reachable("tcp://127.0.0.1:5555", "tcp://10.0.0.5:5557") == "tcp://127.0.0.1:5555"
