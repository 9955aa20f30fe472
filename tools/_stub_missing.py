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
        m = _StubModule(spec.name); m.__path__ = []; m.__spec__ = spec
        return m
    def exec_module(self, module): pass
import abc


class _StubMeta(abc.ABCMeta):
    """Class-level attributes of a stand-in class (enum members, constants) are MagicMocks."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=name)

    def __getitem__(cls, item):
        return cls


class _Stub(metaclass=_StubMeta):
    """A stand-in class: any arguments, any attribute (so it can also be subclassed)."""

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return mock.MagicMock(name=name)


class _StubModule(types.ModuleType):
    """A stubbed module: CamelCase names are stand-in classes, CONSTANTS MagicMocks, other names callable submodules."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper() and any(c.islower() for c in name):
            value = type(name, (_Stub,), {})
        elif name.isupper():
            value = mock.MagicMock(name=name)
        else:  # a submodule or a function: both work
            value = _StubModule(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

    def __call__(self, *a, **k):
        return mock.MagicMock(name=self.__name__)


sys.meta_path.append(_Finder())
