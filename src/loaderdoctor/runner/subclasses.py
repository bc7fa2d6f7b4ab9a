"""Loaders of a subclass whose ``__init__`` never reaches torch's, found and named.

A subclass such as torchdata's ``StatefulDataLoader`` (``DataLoader[T]``) that sets torch's
attributes itself and builds its own iterator is not supervised by ``RunDataLoader``'s
``__init__``: torchdata's own is supervised apart (``patch._supervised_stateful``), any other such
class runs unsupervised. Such a loader is told apart from a supervised one after its ``__init__`` returned (at the next state write)
or at its death, and named in the report with the line that built it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from loaderdoctor.call_site import building_site

_lock = threading.RLock()  # checked from the lifeline's thread and from finalizers too

# Loaders of a subclass whose __init__ never reached torch's (torchdata's StatefulDataLoader sets
# torch's attributes itself and builds its own iterator, so nothing of ours ever runs for it):
# (class, where it was built, why) -> how many. Each one is named in the report.
_unsupervised: dict[tuple[str, str, str], int] = {}


def watch(loader: Any, on_unsupervised: Callable[[], None]) -> None:
    """Learn, at this process's next state write (``check_all``) or when the loader dies, whether
    it was supervised. Nothing here holds the loader (a weak reference, a finalizer);
    ``on_unsupervised`` is called when its death tells (the state must be written again)."""
    check = SubclassCheck(loader, building_site())
    with _lock:
        _checks[id(loader)] = check  # by id: a subclass may be unhashable
    weakref.finalize(loader, _died, id(loader), check, on_unsupervised)


def reached(loader: Any) -> None:
    """The loader's __init__ reached ``RunDataLoader.__init__``."""
    check = _checks.get(id(loader))
    if check is not None:
        check.reached = True


class SubclassCheck:
    """One loader of a subclass with its own ``__init__``, not yet known to be supervised."""

    def __init__(self, loader: Any, site: str) -> None:
        self.cls = type(loader)
        self.site = site
        self.loader = weakref.ref(loader)
        self.reached = False  # its __init__ reached ours (RunDataLoader.__init__)
        self.decided = False

    def decide(self, *, final: bool) -> bool:
        """True when the loader turned out unsupervised (it is then recorded once). ``final``: the
        loader is gone, and whether its __init__ reached ours decides."""
        if self.decided:
            return False
        loader = None if final else self.loader()
        if loader is not None:
            from loaderdoctor.torch_compat import loader_init_finished  # torch is loaded by now

            # torch's __init__ finishes and ours sets ``_ld`` right after it: before that, the
            # loader is still being built (or its __init__ raised, as torch's would have).
            if not loader_init_finished(loader):
                return False
            unsupervised = "_ld" not in loader.__dict__
        elif final:
            unsupervised = not self.reached
        else:
            return False  # gone: its finalizer decides
        self.decided = True
        if unsupervised:
            with _lock:
                key = (self.cls.__qualname__, self.site, unsupervised_reason(self.cls))
                _unsupervised[key] = _unsupervised.get(key, 0) + 1
        return unsupervised


def unsupervised_reason(cls: type) -> str:
    package = cls.__module__.split(".")[0]
    return (
        f"its __init__ ({cls.__module__}.{cls.__qualname__}) never calls torch's "
        f"DataLoader.__init__, and {package} builds its own iterator: its workers were not "
        "watched (a worker death there is torch's own error) and its batches are not counted"
    )


# id(loader) -> its check, while the loader lives (its finalizer removes it)
_checks: dict[int, SubclassCheck] = {}


def _died(key: int, check: SubclassCheck, on_unsupervised: Callable[[], None]) -> None:
    with _lock:
        if _checks.get(key) is check:
            del _checks[key]
    if check.decide(final=True):
        on_unsupervised()


def check_all() -> None:
    with _lock:
        checks = list(_checks.values())
    for check in checks:
        check.decide(final=False)


def pending() -> bool:
    """Loaders not decided yet, or unsupervised ones found: the state has something to say."""
    return bool(_checks or _unsupervised)


def unsupervised_loaders() -> list[dict[str, Any]]:
    """The state file's entries: one per class and site, with how many loaders were built there."""
    with _lock:
        return [
            {"loader": name, "site": site, "reason": reason, "count": count}
            for (name, site, reason), count in _unsupervised.items()
        ]
