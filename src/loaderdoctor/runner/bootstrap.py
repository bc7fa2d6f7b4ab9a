"""The child side of ``loaderdoctor run``, imported by its ``sitecustomize`` in every Python process.

It must stay light: most processes a command starts (shells, compilers, torchrun's helpers) never
import torch, and they must not pay for it. So it only installs an import hook; the DataLoader is
replaced (``loaderdoctor.runner.patch``) right after ``torch`` has finished importing. In the
command's own process (the direct child of ``loaderdoctor run``) it also arms the lifeline, which
writes the report and stops the command should ``loaderdoctor run`` die first.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

from loaderdoctor.runner.protocol import RUN_DIR_ENV, SUPERVISOR_ENV

# Every Python process of the command imports this module, most of them never torch: the typing
# module and importlib.abc (which pulls importlib.resources, tempfile, shutil, ...) cost more than
# the rest of this file, so they are imported for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType


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
            _apply_patch()

        # An attribute of this one loader instance (one per spec), not of its class.
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _remove_hook(hook: TorchImportHook) -> None:
    try:
        sys.meta_path.remove(hook)
    except ValueError:
        pass


def _apply_patch() -> None:
    try:
        from loaderdoctor.runner import patch

        patch.apply()
    except Exception as error:  # never break the user's import of torch
        sys.stderr.write(f"loaderdoctor run: DataLoader not supervised: {error!r}\n")


def is_direct_child() -> bool:
    """This process was started by ``loaderdoctor run`` itself (an exec'd image still is)."""
    return os.environ.get(SUPERVISOR_ENV) == str(os.getppid())


def installed() -> bool:
    """The bootstrap is already at work in this process: its import hook waits for torch, or
    torch's DataLoader is replaced."""
    if any(isinstance(finder, TorchImportHook) for finder in sys.meta_path):
        return True
    patch = sys.modules.get("loaderdoctor.runner.patch")
    return bool(getattr(patch, "_applied", False))


def install() -> None:
    if not os.environ.get(RUN_DIR_ENV):
        return
    if is_direct_child():
        from loaderdoctor.runner import lifeline

        lifeline.arm()
    if "torch" in sys.modules:  # imported by the shadowed sitecustomize: patch now
        _apply_patch()
        return
    if not any(isinstance(finder, TorchImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchImportHook())
