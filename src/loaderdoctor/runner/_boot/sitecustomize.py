"""Put first on PYTHONPATH by ``loaderdoctor run``: supervise every DataLoader of this process.

Python imports one module named ``sitecustomize`` at start-up; this one loads loaderdoctor's
bootstrap (``../bootstrap.py``, by path: the package itself loads only once torch does), which
installs an import hook and then runs the ``sitecustomize`` it shadows, if there is one.
"""


def _loaderdoctor_bootstrap() -> None:
    import importlib.machinery
    import os
    import sys
    from types import ModuleType

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bootstrap.py")
    try:
        # Not importlib.util: it imports contextlib and collections, 10 ms in every process.
        loader = importlib.machinery.SourceFileLoader("_loaderdoctor_bootstrap", path)
        module = ModuleType(loader.name)
        module.__file__ = path
        loader.exec_module(module)
    except Exception as error:
        sys.stderr.write(f"loaderdoctor run: cannot supervise this process: {error!r}\n")
        return
    module.install(__file__)


_loaderdoctor_bootstrap()
del _loaderdoctor_bootstrap
