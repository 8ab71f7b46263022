"""The demo's report from episode rows (no graph is started): a sorting run counts its objects per phase, with an
interval, beside the episodes; a reaching run's table has no objects column."""

from __future__ import annotations

from tinker.demo_report import format_report, phase_summary


def _row(phase: str, success: bool, objects: tuple[int, int] | None) -> dict:
    row = {"episode": 0, "success": success, "phase": phase, "policy_version": 0, "time_to_success_s": None}
    if objects is not None:
        row.update(objects_sorted=objects[0], num_objects=objects[1])
    return row


def _report(rows: list[dict]) -> dict:
    return {"env_id": "tinker/ArmSort-v0", "dynamics": "far_latency_sort.yaml", "control_period": 0.05,
            "before": phase_summary(rows, "before"), "finetune": phase_summary(rows, "finetune"),
            "after": phase_summary(rows, "after"),
            "latency": {"e2e_p50_ms": 2.0, "e2e_p99_ms": 3.0, "cycles": 10}, "deadline_misses": 0,
            "unsafe_states": {}, "safety_interventions": 0, "estops": [], "learner": {}, "policy_reloads": 0,
            "bridge": {}}


def test_a_sorting_run_counts_its_objects_in_each_phase():
    rows = [_row("before", False, (1, 2)), _row("before", True, (2, 2)), _row("after", True, (2, 2)),
            _row("after", True, (2, 2)), _row("finetune", False, (0, 2))]
    r = _report(rows)
    assert (r["before"]["objects_sorted"], r["before"]["objects_total"]) == (3, 4)
    assert r["before"]["objects_sorted_rate"] == 0.75 and r["after"]["objects_sorted_rate"] == 1.0
    assert 0.0 < r["before"]["objects_ci_low"] < 0.75 < r["before"]["objects_ci_high"] <= 1.0
    text = format_report(r)
    assert "objects sorted, 95% CI" in text
    assert "| before fine-tuning | 2 | 50.0% |" in text and "75.0% (3/4)" in text and "100.0% (4/4)" in text


def test_a_reaching_run_has_no_objects_column():
    r = _report([_row("before", True, None), _row("after", True, None)])
    assert "objects_total" not in r["before"]
    text = format_report(r)
    assert "objects sorted" not in text and "| before fine-tuning | 1 | 100.0% | " in text


def test_the_report_says_what_latency_the_safety_node_measured_and_what_to_set():
    r = _report([_row("before", True, (2, 2))])
    r["command_latency"] = {"measured": "4", "fit": "1.000 (next 0.822)", "compensated": 0}
    text = format_report(r)
    assert "command latency measured by the safety node from its states and commands: 4 control periods" in text
    assert "tinker demo --latency-compensation 4" in text
    r["command_latency"] = {"measured": "4", "fit": "1.000 (next 0.822)", "compensated": 4}
    assert "compensated: 4" in format_report(r) and "--latency-compensation 4" not in format_report(r)
    r["command_latency"] = {"measured": "unknown: the arm has hardly moved", "fit": "", "compensated": 0}
    assert "not measured by the safety node (unknown: the arm has hardly moved)" in format_report(r)
    r["command_latency"] = {"measured": "4", "fit": "1.000 (next 0.822)", "compensated": 4, "auto": True}
    assert "compensated: 4 (latency_auto)" in format_report(r)


def test_the_report_says_how_each_version_did_on_the_robot():
    """Versions in the order they first ran, each episode counted for the version that ran its end, every phase."""
    from tinker.demo_report import version_summary

    ran = [("before", False, (1, 2), 43064), ("finetune", True, (2, 2), 1), ("finetune", False, (0, 2), 1),
           ("after", True, (2, 2), 2)]
    rows = [_row(phase, ok, objects) | {"policy_version": v} for phase, ok, objects, v in ran]
    versions = version_summary(rows)
    assert [(v["version"], v["episodes"], v["successes"], v["objects_sorted"]) for v in versions] == \
           [(43064, 1, 0, 1), (1, 2, 1, 2), (2, 1, 1, 2)]
    text = format_report(_report(rows) | {"by_version": versions})
    assert "by policy version (successes/episodes, every phase; few episodes each): v43064 0/1, objects 1/2; " \
           "v1 1/2, objects 2/4; v2 1/1, objects 2/2" in text
    assert "objects" not in version_summary([_row("after", True, None)])[0]
