"""Which code function tracing records: the ``decide(code, module)`` a tracer asks once per code object it meets.

The rules, in order: ringtrace's own code is never recorded (the tracer would trace the flusher tracing it); a module
matching an ``exclude`` glob is not; with ``include`` globs, only a module matching one is; library code (the
standard library, site-packages, frozen modules, and what they make from strings) is not, unless ``library`` is
set. Globs are ``fnmatch`` patterns on the module's name (``__main__`` for the script run): ``app.*`` matches the
package's modules, ``app*`` the package too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

__all__ = ["CallFilter", "call_filter", "library_roots"]

#: ringtrace's own packages, by module name (the collector's too: a program may embed it).
_OWN_PREFIX: Final = "ringtrace"
#: The directories of ringtrace's own code (an editable install maps ``ringtrace.client`` to ``client/``).
_HERE: Final = Path(__file__).resolve()
_OWN_ROOTS: Final = tuple(
    os.path.join(str(directory), "")
    for directory in (_HERE.parents[1], _HERE.parents[2] / "wire", _HERE.parents[2] / "collector")
)


def library_roots() -> tuple[str, ...]:
    """The directories whose code is library code: the standard library's and every site-packages (the venv's, the
    base interpreter's, the user's), each ending in a separator."""
    import site  # (here: what importing ringtrace.client costs a process that never traces functions, it does not)
    import sysconfig

    roots: set[str] = set()
    for scheme_paths in (sysconfig.get_paths(), sysconfig.get_paths(vars={"base": sys.base_prefix})):
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if scheme_paths.get(key):
                roots.add(scheme_paths[key])
    with contextlib.suppress(AttributeError):  # (an old virtualenv's site module has none)
        roots.update(site.getsitepackages())
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(user_site)
    found = {os.path.join(root, "") for root in roots} | {os.path.join(os.path.realpath(root), "") for root in roots}
    return tuple(sorted(found))


class CallFilter:
    """``decide(code, module)`` from the options; see the module docstring.

    Args:
        include: module globs: with any, only the modules matching one are recorded.
        exclude: module globs: a module matching one is not recorded (over ``include``).
        library: record library code too (the standard library, site-packages, frozen modules).
    """

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = (), *, library: bool = False) -> None:
        from fnmatch import fnmatchcase  # (see library_roots)

        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.with_library_code = library
        self._library_roots = library_roots()
        self._matches = fnmatchcase

    def __call__(self, code: types.CodeType, module: str) -> bool:
        return self.decide(code, module)

    def decide(self, code: types.CodeType, module: str) -> bool:
        """Whether the calls of ``code``, of module ``module`` ("" if its globals name none), are recorded."""
        if module == _OWN_PREFIX or module.startswith(_OWN_PREFIX + "."):
            return False
        filename = code.co_filename
        if filename.startswith(_OWN_ROOTS):
            return False
        matches = self._matches
        if any(matches(module, pattern) for pattern in self.exclude):
            return False
        if self.include and not any(matches(module, pattern) for pattern in self.include):
            return False
        return self.with_library_code or not self.is_library(filename, module)

    def is_library(self, filename: str, module: str = "") -> bool:
        """Whether code of ``filename`` in ``module`` is library code. Code made from a string (``<string>``: what
        ``namedtuple`` and ``dataclass`` make, a program's own ``exec``) is its module's: the program's where that is
        ``__main__`` or a module of a file that is not library code; a library's where the module is not one imported
        (``namedtuple_Point``)."""
        if filename.startswith("<frozen "):
            return True
        if filename.startswith("<"):
            if module == "__main__":
                return False
            module_file = getattr(sys.modules.get(module), "__file__", None)
            return not isinstance(module_file, str) or self.is_library(module_file)
        if filename.startswith(self._library_roots):
            return True
        parts = Path(filename).parts
        return "site-packages" in parts or "dist-packages" in parts


def call_filter(
    include: Iterable[str] = (), exclude: Iterable[str] = (), *, library: bool = False
) -> Callable[[types.CodeType, str], bool]:
    """The ``decide`` of ``CallFilter(include, exclude, library=library)``."""
    return CallFilter(include, exclude, library=library).decide
