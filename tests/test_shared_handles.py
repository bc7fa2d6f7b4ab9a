"""A worker that finds a socket, connection or file of the main process in the dataset warns once,
naming the attribute: the finder alone on real handles, then real workers under ``run``."""

from __future__ import annotations

import io
import multiprocessing
import socket
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python
from loaderdoctor.supervise.worker.shared_handles import (
    event,
    find_handles,
    inherited,
    warning_text,
)


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.name = "kv"


class _Dataset:
    pass


def test_find_handles_two_levels_deep_on_real_handles(tmp_path: Path) -> None:
    left, right = socket.socketpair()
    reader, writer = multiprocessing.Pipe()
    dataset = _Dataset()
    dataset.client = _Client(left)  # type: ignore[attr-defined]
    dataset.pipe = reader  # type: ignore[attr-defined]
    dataset.index = open(tmp_path / "index.txt", "w")  # type: ignore[attr-defined]
    dataset.memory = io.BytesIO(b"x")  # type: ignore[attr-defined]  # no descriptor: not shared
    dataset.closed = socket.socket()  # type: ignore[attr-defined]
    dataset.closed.close()  # type: ignore[attr-defined]
    try:
        found = find_handles(dataset)
        assert {path: kind for path, (_, kind) in found.items()} == {
            "self.client.sock": "socket",
            "self.pipe": "connection",
            "self.index": "file",
        }
        assert find_handles(dataset, depth=1).keys() == {"self.pipe", "self.index"}
    finally:
        for handle in (left, right, reader, writer, dataset.index):  # type: ignore[attr-defined]
            handle.close()


def test_a_handle_replaced_by_the_workers_init_is_not_inherited() -> None:
    before = {"self.a": (1, "socket"), "self.b": (2, "file")}
    after = {"self.a": (3, "socket"), "self.b": (2, "file"), "self.c": (4, "socket")}
    assert inherited(before, after) == ["self.b"]


def test_the_warning_names_each_attribute() -> None:
    sent = event(_Dataset(), ["self.client.sock"], {"self.client.sock": "socket"})
    assert warning_text(sent) == (
        "loaderdoctor: _Dataset holds self.client.sock (a socket), opened in the main process "
        "and shared by every DataLoader worker: their reads interleave on one handle, so a "
        "worker can get another's data without an error [LD106]. Open it lazily in __getitem__ "
        "or in worker_init_fn, once per worker."
    )


WARNING = (
    "UserWarning: loaderdoctor: KeyValue holds self.client (a socket), opened in the main "
    "process and shared by every DataLoader worker: their reads interleave on one handle, so a "
    "worker can get another's data without an error [LD106]. Open it lazily in __getitem__ or in "
    "worker_init_fn, once per worker."
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("start_method", "extra", "warnings"),
    [("fork", [], [WARNING]), ("spawn", [], [WARNING]), ("fork", ["reconnect"], [])],
)
def test_run_warns_once_about_a_socket_every_worker_shares(
    tmp_path: Path, start_method: str, extra: list[str], warnings: list[str]
) -> None:
    """Two workers share the socket: one warning. Reconnected in worker_init_fn: none."""
    script = str(FIXTURES / "run" / "shared_socket.py")
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path), "--", sys.executable, script,
         start_method, *extra],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "delivered 8\n"
    warned = [line for line in result.stderr.splitlines() if "UserWarning: loaderdoctor" in line]
    assert [line.split(": ", 1)[1] for line in warned] == warnings
