"""``loaderdoctor run`` of a Ray job on a cluster started before it: the DataLoaders of Ray
workers that run did not start are reached through Ray's own hooks (``runner.ray_hook``), and the
report says how each was reached; where none was, it says so and never blames the command.

The real cluster is ``test_scan_ray``'s (one per test session, two nodes); each job is one task.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import test_scan_ray
from conftest import FIXTURES, run_python
from loaderdoctor.report.run_text import format_verdict
from loaderdoctor.runner.core import merge
from loaderdoctor.runner.model import RunReport
from test_scan_ray import HERMETIC, Cluster

JOB = FIXTURES / "run" / "ray_job.py"
cluster = test_scan_ray.cluster  # the session's cluster, shared with scan --ray's tests


def ray_job(cluster: Cluster, tmp_path: Path, *options: str, **env: str) -> tuple[Any, Any, Any]:
    ledger, report_dir = tmp_path / "ids.json", tmp_path / "report"
    command = ["-m", "loaderdoctor", "run", *options, "--report-dir", str(report_dir), "--"]
    command += [sys.executable, str(JOB), str(ledger)]
    result = run_python(
        command, timeout=180, env={**HERMETIC, "RAY_ADDRESS": cluster.address, **env}
    )
    report = json.loads((report_dir / "report.json").read_text())
    ids = json.loads(ledger.read_text()) if ledger.exists() else None
    return result, report, ids


@pytest.mark.slow
@pytest.mark.ray
def test_a_loader_in_a_ray_worker_is_reached_through_rays_setup_hook_and_healed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One job (a Ray job's start-up is most of its cost): a DataLoader worker SIGKILLed in a
    Ray worker is an incident, healed; every sample arrives once."""
    result, report, ids = ray_job(cluster, tmp_path, "--heal", LD_KILL_AT="21")
    assert result.returncode == 0, result.stderr[-4000:]
    assert ids == list(range(40))
    assert (report["status"], report["delivered"]["samples"]) == ("healed", 40)
    [incident] = report["incidents"]
    assert (incident["cause"], incident["action"]) == ("killed-by-signal", "respawned")
    [worker] = [r for r in report["ranks"] if r["loaders"]]
    assert (worker["reached"], worker["workers"], worker["incidents"]) == ("ray-hook", 3, 1)
    assert report["notes"] == [
        "1 supervised DataLoader(s) in 1 Ray worker process(es) that run did not start were "
        "reached through Ray's worker_process_setup_hook (the job's runtime environment, set by "
        "run's RAY_RUNTIME_ENV_HOOK)"
    ]
    assert report["unreached"] == []
    assert "verdict: 1 incident(s) healed (killed-by-signal)" in result.stdout + result.stderr


def test_a_ray_job_whose_workers_wrote_nothing_is_not_called_the_commands_own_failure(
    tmp_path: Path,
) -> None:
    """The driver joined Ray (its state says so) and no Ray worker wrote a record."""
    from loaderdoctor.runner import protocol

    incidents = Path(protocol.incidents_dir(tmp_path))
    incidents.mkdir(parents=True)
    driver = {"pid": 10, "image": 0, "created": 0, "ray_joined": ["127.0.0.1:6379"]}
    (incidents / "10-0.state.json").write_text(json.dumps(driver))
    report: RunReport = merge(
        tmp_path,
        command=["python", "train.py"],
        returncode=1,
        started_wall=0.0,
        duration_s=1.0,
        memory=None,
        interrupted=False,
    )
    assert report.unreached == [
        "DataLoaders in the Ray workers of 127.0.0.1:6379 were not reached: the command joined "
        "Ray, and run's worker setup hook (Ray's worker_process_setup_hook) wrote no record from "
        "any of its workers: they imported no torch, or the hook could not run there (the "
        "cluster's Python cannot import loaderdoctor, the report folder is not on that node's "
        "disk, or the driver ran under uv run, whose own hook replaces run's); a DataLoader "
        "worker death there is torch's own error, above the summary"
    ]
    assert report.notes == report.unreached  # never "built none"
    assert format_verdict(report) == (
        "verdict: no supervised DataLoader worker died (DataLoaders in Ray workers were not "
        "reached: a worker death there is torch's own error, above); the command failed"
    )
    assert RunReport.from_json(report.to_json()).unreached == report.unreached


def with_user_variable(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """A user's own RAY_RUNTIME_ENV_HOOK (run keeps it, and runs it first)."""
    env = dict(runtime_env or {})
    env["env_vars"] = {**env.get("env_vars", {}), "USER": "theirs"}
    return env


def test_the_jobs_runtime_environment_gets_runs_settings_and_setup_hook_beside_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loaderdoctor.runner import protocol, ray_hook

    monkeypatch.setattr(ray_hook, "joined", [])
    monkeypatch.setenv(protocol.RUN_DIR_ENV, "/reports/job")
    monkeypatch.setenv(protocol.HEAL_ENV, "1")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    monkeypatch.delenv(protocol.RAY_USER_ENV_HOOK_ENV, raising=False)
    assert ray_hook.runtime_env(None) == {
        "env_vars": {
            protocol.RUN_DIR_ENV: "/reports/job",
            protocol.HEAL_ENV: "1",
            protocol.RAY_WORKER_ENV: "run",
        },
        "worker_process_setup_hook": "loaderdoctor.runner.ray_hook.setup",
    }
    assert ray_hook.joined == ["10.0.0.2:6379"]
    # the user's own hooks: their environment hook first, their setup hook (by name) run by ours
    monkeypatch.setenv(protocol.RAY_USER_ENV_HOOK_ENV, "test_run_ray.with_user_variable")
    env = ray_hook.runtime_env({"worker_process_setup_hook": "their.setup", "pip": ["x"]})
    assert env["pip"] == ["x"]
    assert env["worker_process_setup_hook"] == "loaderdoctor.runner.ray_hook.setup"
    assert env["env_vars"]["USER"] == "theirs"
    assert env["env_vars"][ray_hook.USER_SETUP_ENV] == "their.setup"
    # a setup function: one function (Ray pickles it by value) that calls theirs, then ours
    called: list[str] = []
    env = ray_hook.runtime_env({"worker_process_setup_hook": lambda: called.append("theirs")})
    chained = env["worker_process_setup_hook"]
    assert chained.__name__ == "loaderdoctor_setup"
    monkeypatch.setattr(ray_hook, "setup", lambda: called.append("ours"))
    chained()
    assert called == ["theirs", "ours"]


def test_run_hands_ray_its_environment_hook_and_keeps_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loaderdoctor.runner import protocol
    from loaderdoctor.runner.core import RunSettings, child_environment

    settings = RunSettings(command=["python", "x.py"])
    monkeypatch.delenv(protocol.RAY_ENV_HOOK_ENV, raising=False)
    env = child_environment(settings, tmp_path)
    assert env[protocol.RAY_ENV_HOOK_ENV] == "loaderdoctor.runner.ray_hook.runtime_env"
    assert protocol.RAY_USER_ENV_HOOK_ENV not in env
    monkeypatch.setenv(protocol.RAY_ENV_HOOK_ENV, "their.hook")
    env = child_environment(settings, tmp_path)
    assert env[protocol.RAY_ENV_HOOK_ENV] == "loaderdoctor.runner.ray_hook.runtime_env"
    assert env[protocol.RAY_USER_ENV_HOOK_ENV] == "their.hook"
