"""``tinker train`` end to end on a tiny budget: run directory, curve, checkpoint, summary, resume."""

from __future__ import annotations

import json

import pytest

from tinker_core.algos import load_algorithm
from tinker_cli import main


def test_tinker_train_writes_run_directory_and_resumes(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo: sac\nenv: Pendulum-v1\ntotal_timesteps: 300\n"
                   "sac:\n  net_arch: [16, 16]\n  batch_size: 16\n  learning_starts: 50\n  log_interval: 100\n")
    out = tmp_path / "run"
    rc = main(["train", "--config", str(cfg), "--seed", "2", "--out", str(out), "--checkpoint-every", "200",
               "--no-progress"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["timesteps"] == 300 and summary["algo"] == "sac"
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert (out / "metrics.jsonl").read_text().count("\n") >= 3
    assert list((out / "tb").iterdir()), "no TensorBoard event file"
    algo = load_algorithm(out / "final")
    assert algo.num_timesteps == 300 and algo.config.seed == 2

    rc = main(["train", "--resume", str(out / "checkpoints" / "step_200"), "--total-timesteps", "400",
               "--out", str(tmp_path / "run2"), "--no-progress"])
    assert rc == 0
    assert load_algorithm(tmp_path / "run2" / "final").num_timesteps == 400


def test_tinker_train_reports_bad_input(tmp_path, capsys):
    assert main(["train", "--algo", "sac", "--env", "CartPole-v1", "--total-timesteps", "10",
                 "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "continuous (Box) action space" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: ppo\nenv: Pendulum-v1\nppo:\n  n_stepz: 3\n")
    assert main(["train", "--config", str(bad), "--no-progress", "--out", str(tmp_path / "y")]) == 2
    assert "n_stepz" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--algo", "a2c"])
