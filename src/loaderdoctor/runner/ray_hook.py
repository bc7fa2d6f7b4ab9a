"""Reach the DataLoaders of Ray workers that ``loaderdoctor run`` did not start.

A Ray cluster started before ``run`` (``ray start --head``, joined through ``RAY_ADDRESS``) starts
its worker processes from its own raylet, whose environment is not the command's: the bootstrap
on ``PYTHONPATH`` and the report folder never reach them, and a Ray Train job's loaders ran
unwatched. Ray offers two documented hooks, and run uses both:

- ``RAY_RUNTIME_ENV_HOOK`` (``runtime_env`` below), set by run in the command's environment: the
  driver's ``ray.init`` hands it the job's runtime environment, and it adds run's settings
  (``env_vars``) and Ray's ``worker_process_setup_hook`` (``setup`` below);
- ``worker_process_setup_hook``: every worker process of the job runs it at start, before any
  task, and it installs the bootstrap there, as ``sitecustomize`` does in the command's processes.

A user's own hooks are kept and run first. The worker must import loaderdoctor (the cluster's
Python has it installed) and its node must see the report folder (the same machine, or a shared
file system): where it cannot, the report says that the Ray workers wrote nothing.
"""

from __future__ import annotations

import importlib
import os

from loaderdoctor.runner.protocol import (
    HANG_TIMEOUT_ENV,
    HEAL_ENV,
    MAX_DEATHS_ENV,
    MAX_SKIPPED_ENV,
    RAY_USER_ENV_HOOK_ENV,
    RAY_WORKER_ENV,
    RUN_DIR_ENV,
    STRICT_DATA_ENV,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# As Ray's ``load_class`` reads it (the environment hook's name is protocol.RAY_ENV_HOOK)
SETUP_HOOK = "loaderdoctor.runner.ray_hook.setup"
# A user's ``worker_process_setup_hook`` given by name, run by ours before it installs the bootstrap
USER_SETUP_ENV = "LOADERDOCTOR_RAY_USER_SETUP"
# run's settings, which a worker's loaders read from its environment
SETTINGS = (
    RUN_DIR_ENV,
    HEAL_ENV,
    HANG_TIMEOUT_ENV,
    MAX_SKIPPED_ENV,
    MAX_DEATHS_ENV,
    STRICT_DATA_ENV,
)

joined: list[str] = []  # in the driver: the clusters this process joined (its ray.init calls)


def load(name: str) -> Callable[..., Any]:
    """``module.function`` (Ray's form) or ``module:function``, imported."""
    module, _, attribute = name.replace(":", ".").rpartition(".")
    function = getattr(importlib.import_module(module), attribute)
    if not callable(function):
        raise TypeError(f"{name} is not a function")
    return function


def runtime_env(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """``RAY_RUNTIME_ENV_HOOK``: the job's runtime environment with run's settings and setup hook."""
    user_hook = os.environ.get(RAY_USER_ENV_HOOK_ENV)
    if user_hook:
        runtime_env = load(user_hook)(runtime_env)
    env = dict(runtime_env or {})
    env_vars = dict(env.get("env_vars") or {})
    for name in SETTINGS:
        if name in os.environ:
            env_vars.setdefault(name, os.environ[name])
    env_vars[RAY_WORKER_ENV] = "run"  # ``setup`` says "ray-hook" where it installs the bootstrap
    user_setup = env.get("worker_process_setup_hook")
    if isinstance(user_setup, str) and user_setup != SETUP_HOOK:
        env_vars[USER_SETUP_ENV] = user_setup
        env["worker_process_setup_hook"] = SETUP_HOOK
    elif callable(user_setup):
        env["worker_process_setup_hook"] = _after(user_setup)
    else:
        env["worker_process_setup_hook"] = SETUP_HOOK
    env["env_vars"] = env_vars
    joined.append(os.environ.get("RAY_ADDRESS") or "a Ray cluster")
    _note_joined()
    return env


def _after(user_setup: Callable[[], Any]) -> Callable[[], None]:
    """The user's setup function, then ours: one function, which Ray pickles by value."""

    def loaderdoctor_setup() -> None:
        user_setup()
        setup()

    return loaderdoctor_setup


def setup() -> None:
    """``worker_process_setup_hook``: supervise the DataLoaders this Ray worker builds."""
    user_setup = os.environ.get(USER_SETUP_ENV)
    if user_setup:
        load(user_setup)()
    from loaderdoctor.runner import bootstrap

    if not bootstrap.installed():  # not already there through an inherited PYTHONPATH
        os.environ[RAY_WORKER_ENV] = "ray-hook"
    bootstrap.install()


def _note_joined() -> None:
    """The driver's state says it joined Ray (where it has imported torch under run)."""
    import sys

    patch = sys.modules.get("loaderdoctor.runner.patch")
    if patch is not None:
        patch.ray_joined()
