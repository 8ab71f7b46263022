"""The pipeline on Pendulum-v1 with real modules: runs, hot swap from another thread with no
transition lost, refusal of an incompatible swap while the old module keeps running, the flow
monitor's figures, and the tracer CLI on a trace the pipeline wrote."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tinker_core.errors import PipelineError, SpecError
from tinker_core.pipeline import Pipeline
from tinker_core.tracer import main as tracer_main
from tinker_core.tracer import read_trace


def _assert_chain_unbroken(seen, episodes_expected: int) -> None:
    """Each transition starts where the previous one ended, except right after an episode end."""
    ends = 0
    for prev, t in zip(seen, seen[1:]):
        if prev.done:
            ends += 1
        else:
            np.testing.assert_array_equal(t.obs, prev.next_obs)
    assert ends + int(seen[-1].done) == episodes_expected


def test_pipeline_runs_pendulum_and_feeds_the_learner(pendulum, parts):
    learner = parts.KeepLearner()
    p = Pipeline().connect(pendulum, parts.Normalize(), parts.MLPPolicy(), learner)
    stats = p.run(450)
    assert stats.steps == stats.transitions == len(learner.seen) == 450
    assert stats.episodes == 2  # Pendulum truncates at 200 steps
    assert [t.truncated for t in learner.seen].count(True) == 2
    assert len(stats.episode_returns) == 2 and all(r < 0 for r in stats.episode_returns)
    _assert_chain_unbroken(learner.seen, 2)
    stats = p.run(50)  # a second run continues the same episode and counters
    assert stats.steps == len(learner.seen) == 500
    _assert_chain_unbroken(learner.seen, 2)
    assert all(learner.seen[i].action.dtype == np.float32 for i in (0, -1))


def test_hot_swap_mid_run_loses_no_transition(pendulum, parts):
    learner = parts.KeepLearner()
    old = parts.MLPPolicy(parts.MLPConfig(seed=1))
    new = parts.MLPPolicy(parts.MLPConfig(seed=2))
    p = Pipeline().connect(pendulum, parts.Normalize(), old, learner)
    steps = 1500
    runner = threading.Thread(target=p.run, args=(steps,))
    runner.start()
    while p.stats.steps < 300 and runner.is_alive():
        time.sleep(0.005)
    assert runner.is_alive(), "the run ended before the swap could happen mid-run"
    p.swap("policy", new)  # returns once the pipeline switched between two steps
    at_swap = p.stats.steps
    runner.join(timeout=120)
    assert not runner.is_alive()
    assert p.modules["policy"] is new
    assert 300 <= at_swap < steps
    assert old.calls + new.calls == steps  # every step was served by exactly one policy
    assert old.calls >= 300 and new.calls >= 1
    assert p.stats.steps == p.stats.transitions == len(learner.seen) == steps
    _assert_chain_unbroken(learner.seen, p.stats.episodes)
    # after the switch, actions are the new policy's
    t = learner.seen[-1]
    np.testing.assert_array_equal(t.action, new(parts.Normalize()(t.obs)))


def test_incompatible_swap_is_refused_and_the_old_module_keeps_running(pendulum, parts):
    old = parts.MLPPolicy()
    learner = parts.KeepLearner()
    p = Pipeline().connect(pendulum, parts.Normalize(), old, learner)
    runner = threading.Thread(target=p.run, args=(800,))
    runner.start()
    while p.stats.steps < 100 and runner.is_alive():
        time.sleep(0.005)
    wrong = parts.MLPPolicy(out_dim=2)
    with pytest.raises(SpecError) as e:
        p.swap("policy", wrong)
    calls_at_refusal = old.calls
    assert str(e.value) == ("swap of 'policy' refused, the old module keeps running: "
                            "env.action: expected float32[1], got float32[2] (edge policy->env)")
    wide = parts.MLPPolicy(parts.MLPConfig(max_action=3.0))
    with pytest.raises(SpecError, match="producer may emit lower"):
        p.swap("policy", wide)
    runner.join(timeout=120)
    assert p.modules["policy"] is old and wrong.calls == 0 and wide.calls == 0
    assert old.calls == 800 > calls_at_refusal
    assert len(learner.seen) == 800


def test_swap_errors_and_swap_while_idle(pendulum, parts):
    p = Pipeline().connect(pendulum, None, parts.MLPPolicy(in_spec=parts.OBS))
    with pytest.raises(PipelineError, match=r"no module in role 'learner'; roles here: \['env', 'perception', 'policy'\]"):
        p.swap("learner", parts.KeepLearner())
    with pytest.raises(PipelineError, match="the env cannot be swapped"):
        p.swap("env", parts.Normalize())
    other = parts.MLPPolicy(parts.MLPConfig(seed=5), in_spec=parts.OBS)
    p.swap("policy", other)  # not running: applied at once
    assert p.modules["policy"] is other
    p.run(10)
    assert other.calls == 10
    with pytest.raises(PipelineError, match="call connect"):
        Pipeline().run(1)


def test_flow_monitor_figures_are_plausible(pendulum, parts):
    # long enough that the run's fixed start-up (connect, first reset) is a small part of the wall time,
    # on a fast machine too: 300 steps took 17 ms there, and start-up alone moved rate * wall by 6%;
    # and after a warm-up run, so that first-call initialisation is not counted in the wall time either
    Pipeline().connect(pendulum, parts.Normalize(), parts.MLPPolicy(), parts.KeepLearner()).run(20)
    n = 2000
    p = Pipeline().connect(pendulum, parts.Normalize(), parts.MLPPolicy(), parts.KeepLearner())
    t0 = time.perf_counter()
    p.run(n)
    wall = time.perf_counter() - t0
    snap = p.monitor.snapshot()
    assert set(snap) == {"env->perception", "perception->policy", "policy->env", "env->learner"}
    assert snap["env->perception"]["bytes"] == n * 12  # float32[3]
    assert snap["policy->env"]["bytes"] == n * 4  # float32[1]
    assert snap["env->learner"]["bytes"] == n * (12 + 4 + 12 + 10)
    for name, s in snap.items():
        assert s["messages"] == n, name
        # the rate is measured over the run itself, so rate * wall time is about the count
        assert 0.5 * n < s["messages_per_s"] * wall < 1.05 * n, (name, s, wall)
        assert s["bytes_per_s"] == pytest.approx(s["messages_per_s"] * s["bytes"] / n)
        assert 0 < s["latency_p50_us"] <= s["latency_p99_us"] < wall * 1e6
    assert "env->learner" in p.monitor.format()


def test_tracer_cli_on_a_pipeline_trace(tmp_path, pendulum, parts, capsys):
    trace = tmp_path / "trace.jsonl"
    p = Pipeline(trace_path=str(trace)).connect(pendulum, parts.Normalize(), parts.MLPPolicy(), parts.KeepLearner())
    p.run(120)
    events = read_trace([trace])
    assert len(events) == 4 * 120
    assert {e["module"] for e in events} == {"perception", "policy", "env", "learner"}
    assert sorted({e["cycle"] for e in events}) == list(range(120))
    assert all(e["dur_ns"] > 0 and e["node"] == "pipeline" for e in events)
    with open(trace, "a") as f:
        f.write('{"cycle": 1, "module": "poli')  # a line cut off mid-write is skipped, not fatal
    png = tmp_path / "lat.png"
    r = subprocess.run([sys.executable, "-m", "tinker_core.tracer", "--latency_breakdown", str(trace),
                        "--plot", str(png), "--flow"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["module", "count", "p50", "us", "p99", "us", "max", "us", "share"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:5]}
    assert set(rows) == {"perception", "policy", "env", "learner"}
    assert all(row[1] == "120" for row in rows.values())
    assert abs(sum(float(row[-1].rstrip("%")) for row in rows.values()) - 100.0) < 0.5
    assert "env->learner" in r.stdout and "skipped a line that is not JSON" in r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tracer_main(["--latency_breakdown", str(tmp_path / "nope")]) == 2
    assert "trace file(s) not found" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium warns about the NaN we let through on purpose
def test_run_time_validation_can_be_switched_off(pendulum, parts):
    class Broken(parts.Normalize):
        def forward(self, x):
            return np.full(3, np.nan, np.float32)  # would be refused with validation on

    p = Pipeline(validate=False).connect(pendulum, Broken(), parts.MLPPolicy())
    assert p.run(20).steps == 20
    wrong_dtype = parts.MLPPolicy()
    wrong_dtype.forward = lambda x: np.zeros(1, np.float64)  # type: ignore[method-assign]
    p = Pipeline(validate=True).connect(pendulum, parts.Normalize(), wrong_dtype)
    with pytest.raises(Exception, match=r"env.action: expected float32\[1\], got float64\[1\]"):
        p.run(1)


def test_the_flow_table_keeps_its_columns_and_says_when_a_latency_is_unknown():
    """A learner's edges over ZeroMQ: a transition 20 s late, parameters whose latency is unknown, a slow rate."""
    from tinker_core.monitor import FlowMonitor, format_flow

    m = FlowMonitor()
    m.record("transitions", 100, 20.4865, now=0.0)
    m.record("transitions", 100, 0.155, now=1.0)
    m.record("params", 3_000_000, float("nan"), now=0.0)
    m.record("params", 3_000_000, float("nan"), now=2.0)
    rows = {r.split()[0]: r.split() for r in format_flow(m.snapshot()).splitlines()[1:]}
    assert rows["transitions"][1:] == ["1.0", "0.1", "10320750", "20283185", "2"], rows  # p50: the mean of the two
    assert rows["params"][1:] == ["0.5", "1500.0", "-", "-", "2"], rows
    assert m.snapshot()["params"]["latency_samples"] == 0 and m.snapshot()["transitions"]["latency_samples"] == 2


def test_run_by_episodes_stops_at_an_episode_end_and_the_next_run_starts_fresh(pendulum, parts):
    resets = []
    reset = pendulum.reset
    pendulum.reset = lambda **kw: (resets.append(kw.get("seed")), reset(**kw))[1]
    p = Pipeline(seed=5, seed_each_episode=True).connect(pendulum, parts.Normalize(), parts.MLPPolicy())
    stats = p.run(episodes=2)
    assert (stats.episodes, stats.steps) == (2, 400)
    assert resets == [5, 6]  # episode k from seed + k, and no reset after the last one
    p.run(episodes=1)
    assert resets == [5, 6, 7] and p.stats.steps == 600
    p.run(steps=10, episodes=5)  # whichever comes first
    assert p.stats.steps == 610 and p.stats.episodes == 3
    with pytest.raises(PipelineError, match="give steps, episodes or both"):
        p.run()
    with pytest.raises(PipelineError, match="episodes must be >= 0"):
        p.run(episodes=-1)
