"""Put first on PYTHONPATH by ``loaderdoctor run``: supervise every DataLoader of this process.

Python imports one module named ``sitecustomize`` at start-up. This one first runs the
``sitecustomize`` it hides (a venv's or a distribution's), as Python would have, then imports
loaderdoctor's bootstrap (``loaderdoctor.runner.bootstrap``), which installs an import hook: the
DataLoader is replaced once torch is imported, and a process that never imports torch pays about
a millisecond.
"""


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import os
    import sys

    boot_dir = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
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


def _loaderdoctor_bootstrap() -> None:
    import sys

    try:
        from loaderdoctor.runner import bootstrap
    except ImportError:
        # This Python cannot import loaderdoctor (another interpreter, ``python -I``): its
        # DataLoaders go unsupervised, and the report says that none was seen.
        return
    try:
        bootstrap.install()
    except Exception as error:  # the user's program must run, supervised or not
        sys.stderr.write(f"loaderdoctor run: cannot supervise this process: {error!r}\n")


_run_shadowed_sitecustomize()
_loaderdoctor_bootstrap()
del _run_shadowed_sitecustomize, _loaderdoctor_bootstrap
