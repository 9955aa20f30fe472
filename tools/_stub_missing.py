"""Side checks only (never imported by the package or the tests): import a package with named missing modules stubbed."""
import importlib.abc, importlib.machinery, sys, types
from unittest import mock
STUBBED = []
import os
ALLOW = set(os.environ.get('STUB_ALLOW', '').split(','))
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith(("sgl_jax", "jax", "flax", "numpy", "tunix_lit", "ml_dtypes", "libtpu", "_")):
            return None
        top = name.split(".")[0]
        if top not in ALLOW:
            return None
        if "." in name and top not in STUBBED:
            return None
        if "." not in name:
            for f in sys.meta_path:
                if f is self: continue
                try:
                    s = f.find_spec(name, path, target)
                except Exception:
                    s = None
                if s is not None: return None
        STUBBED.append(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name); m.__path__ = []; m.__spec__ = spec; m.__name__ = spec.name
        return m
    def exec_module(self, module): pass
sys.meta_path.append(_Finder())
