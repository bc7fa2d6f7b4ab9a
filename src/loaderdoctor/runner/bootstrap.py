"""The child side of ``loaderdoctor run``, loaded by its ``sitecustomize`` in every Python process.

``_boot/sitecustomize.py`` loads this file by its path, without importing the ``loaderdoctor``
package: a process that never imports torch pays a millisecond, not the package's imports.

It must stay light: most processes a command starts (shells, compilers, torchrun's helpers) never
import torch, and they must not pay for it. So it only installs an import hook; the DataLoader is
replaced (``loaderdoctor.runner.patch``) right after ``torch`` has finished importing.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

# Every Python process of the command loads this module, most of them never torch: the typing
# module and importlib.abc (which pulls importlib.resources, tempfile, shutil, ...) cost more than
# the rest of this file, so they are imported for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import Any

# The environment ``loaderdoctor run`` hands its command (read again by every child process).
RUN_DIR_ENV = "LOADERDOCTOR_RUN_DIR"
HANG_TIMEOUT_ENV = "LOADERDOCTOR_RUN_HANG_TIMEOUT"
HEAL_ENV = "LOADERDOCTOR_RUN_HEAL"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


class TorchImportHook:
    """Finds ``torch`` with the other finders and patches the DataLoader once it has executed."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self._finding:
            return None
        self._finding = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _remove_hook(self)
            try:
                from loaderdoctor.runner import patch

                patch.apply()
            except Exception as error:  # never break the user's import of torch
                sys.stderr.write(f"loaderdoctor run: DataLoader not supervised: {error!r}\n")

        # An attribute of this one loader instance (one per spec), not of its class.
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _remove_hook(hook: Any) -> None:
    try:
        sys.meta_path.remove(hook)
    except ValueError:
        pass


def _chain_shadowed_sitecustomize(boot_file: str) -> None:
    """Run the ``sitecustomize`` ours hides (a venv's or a distribution's), as Python would have."""
    boot_dir = os.path.realpath(os.path.dirname(boot_file))
    rest = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != boot_dir]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = type(sys)(spec.name)
    module.__file__ = spec.origin
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # Python itself only warns about a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{error!r}\n")


def install(boot_file: str) -> None:
    _chain_shadowed_sitecustomize(boot_file)
    if not os.environ.get(RUN_DIR_ENV):
        return
    if "torch" in sys.modules:  # imported by the shadowed sitecustomize: patch now
        from loaderdoctor.runner import patch

        patch.apply()
        return
    if not any(isinstance(finder, TorchImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchImportHook())
