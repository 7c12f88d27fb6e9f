# sandboxd's Python start-up.
#
# Output is line-buffered, so that a program's prints reach its caller as
# they happen. Not unbuffered (python -u, PYTHONUNBUFFERED): an unbuffered
# stdout writes each chunk once, and a pipe may take only part of it (gVisor
# returns short writes where Linux blocks), so the rest would be lost.
# Buffered writes retry until all is written.
#
# When a run sets SANDBOX_SEED, Python's random module is seeded, and numpy's
# global generator when numpy is first imported, so that the run
# reproduces. Without SANDBOX_SEED nothing is seeded.
import os as _os
import sys as _sys

for _stream in (_sys.stdout, _sys.stderr):
    try:
        _stream.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass

_seed = _os.environ.get("SANDBOX_SEED")
if _seed is not None:
    import importlib.abc as _abc
    import importlib.util as _util
    import random as _random

    _random.seed(int(_seed))

    class _SeedNumpy(_abc.MetaPathFinder):
        """Seeds numpy.random right after numpy is imported, so that runs
        that do not use numpy do not pay for importing it."""

        def find_spec(self, name, path, target=None):
            if name != "numpy":
                return None
            _sys.meta_path.remove(self)
            spec = _util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def seeded(module):
                exec_module(module)
                module.random.seed(int(_seed) % 2**32)

            spec.loader.exec_module = seeded
            return spec

    _sys.meta_path.insert(0, _SeedNumpy())
del _seed, _stream

# pip installs into the user's site below HOME=/tmp (the system's is
# read-only): it goes on the path before the system's packages even before
# it exists, so that a program that installs a package at run time can
# import it after importlib.invalidate_caches(). Nothing is made here: a
# task's /tmp holds only what the task writes.
def _user_site_first():
    import site

    user = site.getusersitepackages()
    if site.ENABLE_USER_SITE and user not in _sys.path:
        at = next((i for i, p in enumerate(_sys.path) if p.endswith("-packages")), len(_sys.path))
        _sys.path.insert(at, user)


_user_site_first()
del _user_site_first
del _os
