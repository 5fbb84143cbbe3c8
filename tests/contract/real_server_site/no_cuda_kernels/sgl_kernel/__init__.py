"""Stands in for `sgl_kernel`, SGLang's compiled CUDA kernels, for releases whose server imports
it unconditionally (0.5.5: the MoE runner, the host KV cache and others import kernels at import
time). The published wheel needs the CUDA runtime and cannot load on a CPU machine. Every name and
submodule exists so the imports succeed; calling any kernel raises, so nothing the harness checks
can rest on one: the stand-in scheduler runs the model with transformers, never these kernels.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+absent"


class KernelAbsent(RuntimeError):
    pass


class _Absent:
    """A kernel (or a constant of the kernel library): attributes are absent too; calling raises."""

    def __init__(self, qualname):
        self.__qualname = qualname

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self.__qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise KernelAbsent(f"{self.__qualname} is a CUDA kernel; it does not exist on CPU")


def _absent(qualname):
    return _Absent(qualname)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _absent(f"sgl_kernel.{name}")


class _Submodule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _absent(f"{self.__name__}.{name}")


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Submodule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


__path__ = []
sys.meta_path.append(_SubmoduleFinder())
