# sandboxd: when a run sets SANDBOX_SEED, seed Python's random module, and
# numpy's global generator when numpy is first imported, so that the run
# reproduces. Without SANDBOX_SEED nothing is seeded.
import os as _os

_seed = _os.environ.get("SANDBOX_SEED")
if _seed is not None:
    import importlib.abc as _abc
    import importlib.util as _util
    import random as _random
    import sys as _sys

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
del _os, _seed
