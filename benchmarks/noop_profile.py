"""The no-op C profile function of ``workloads/noop_profile.c``, compiled on first use with the interpreter's own
compiler and flags into a temporary directory: the floor under any tracer that is a profile function (Python 3.11's
way to see C calls), which the interpreter adds to every call, Python or C, whatever the function does."""

from __future__ import annotations

import atexit
import importlib.util
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).parent / "workloads" / "noop_profile.c"


def build() -> ModuleType | None:
    """The module (``start()``, ``stop()``), or None where it could not be built (said on standard output)."""
    compiler = sysconfig.get_config_var("CC")
    if not compiler:
        print("no C compiler configured for this Python: the no-op profile floor is not measured")
        return None
    build_dir = Path(tempfile.mkdtemp(prefix="noop_profile_"))
    atexit.register(shutil.rmtree, build_dir, ignore_errors=True)  # (the module stays loaded: removed at exit)
    out = build_dir / f"noop_profile{sysconfig.get_config_var('EXT_SUFFIX')}"
    command = [
        *shlex.split(compiler),
        *shlex.split(sysconfig.get_config_var("CFLAGS") or ""),
        "-O2",
        "-fPIC",
        "-shared",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-o",
        str(out),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:  # (the configured compiler is not on this machine)
        print(f"the no-op profile floor could not be built: {exc}")
        return None
    if done.returncode != 0:
        print(f"the no-op profile floor could not be built: {done.stderr.strip()[:300]}")
        return None
    spec = importlib.util.spec_from_file_location("noop_profile", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
