"""EnvReport, the env catalog and the env renderers: data in, exact output out."""

from __future__ import annotations

import json

from loaderdoctor.env.catalog import CATALOG
from loaderdoctor.env.core import run_env_checks
from loaderdoctor.env.findings import EnvReport, make_check
from loaderdoctor.report.env import format_json, format_summary, format_text

EXPECTED_IDS = [
    "shm-size",
    "shm-need",
    "memory-limit",
    "worker-memory",
    "open-files",
    "cpu",
    "start-method",
    "container",
    "threads",
    "kernel-log",
    "oom-priority",
    "versions",
    "dependencies",
]


def fixed_report() -> EnvReport:
    return EnvReport(
        checks=[
            make_check(
                "shm-size",
                "fail",
                64 * 1024 * 1024,
                "/dev/shm: 64.0 MiB total, 63.0 MiB free",
                fix="Restart the container with `docker run --shm-size=2g ...`.",
            ),
            make_check("open-files", "warn", 128, "soft limit 128 (hard 128)"),
            make_check("cpu", "pass", 2, "2 cores, affinity 2, cgroup quota none: 2 usable"),
            make_check("worker-memory", "unknown", None, "give --target to measure it"),
            make_check("versions", "pass", {"python": "3.11.7", "torch": None}, "python 3.11.7"),
        ],
        target="data.py:train",
        settings={"batch_size": 32, "num_workers": 4, "prefetch_factor": 2, "assumed": []},
    )


EXPECTED_TEXT = """\
loaderdoctor env: data.py:train
┏━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃ status  ┃ check         ┃ value         ┃ finding                                          ┃
┡━━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩
│ fail    │ shm-size      │ 64.0 MiB      │ /dev/shm: 64.0 MiB total, 63.0 MiB free          │
│ warn    │ open-files    │ 128           │ soft limit 128 (hard 128)                        │
│ pass    │ cpu           │ 2             │ 2 cores, affinity 2, cgroup quota none: 2 usable │
│ unknown │ worker-memory │ -             │ give --target to measure it                      │
│ pass    │ versions      │ python 3.11.7 │ python 3.11.7                                    │
└─────────┴───────────────┴───────────────┴──────────────────────────────────────────────────┘

fixes
  shm-size:   Restart the container with `docker run --shm-size=2g ...`.
  open-files: Raise the limit (`ulimit -n 65536`, docker `--ulimit nofile=65536:65536`), or call
              `torch.multiprocessing.set_sharing_strategy('file_system')`.

2 pass, 1 warn, 1 fail, 1 unknown
"""


def test_terminal_rendering_is_exact() -> None:
    assert format_text(fixed_report(), width=100) == EXPECTED_TEXT


def test_summary_has_one_word_per_status() -> None:
    assert format_summary(fixed_report()) == "2 pass, 1 warn, 1 fail, 1 unknown"


def test_json_shape_and_round_trip() -> None:
    report = fixed_report()
    data = json.loads(format_json(report))
    assert data["schema"] == 1
    assert [c["id"] for c in data["checks"]] == [
        "shm-size",
        "open-files",
        "cpu",
        "worker-memory",
        "versions",
    ]
    for check in data["checks"]:
        assert {"id", "status", "value", "message", "fix"} <= set(check)
    again = EnvReport.from_dict(data)
    assert again == report
    assert again.failed


def test_catalog_rows_are_complete_and_stable() -> None:
    assert [spec.id for spec in CATALOG] == EXPECTED_IDS
    for spec in CATALOG:
        assert spec.title and spec.why and spec.fix, spec.id
        assert spec.unit in ("bytes", "count", "text", "mapping")


def test_every_catalog_check_is_measured_without_a_target() -> None:
    report = run_env_checks()
    assert [check.id for check in report.checks] == EXPECTED_IDS
    for check in report.checks:
        assert check.status in ("pass", "warn", "fail", "unknown")
        assert check.message and check.fix
    # without a target the dataset checks say what they need instead of guessing
    assert report.check("shm-need").status == "unknown"
    assert report.check("worker-memory").status == "unknown"
    assert EnvReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
