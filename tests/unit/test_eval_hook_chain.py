"""The C function tracer's frame evaluation hook (PEP 523) beside another's, a debugger's: put over the tracer's, the
other hook calls it; the tracer stopped and started again meanwhile must trace through it, not chain it a second time
(the two hooks then called each other for every frame, without end: the process crashed), and, that hook gone with
the interpreter's own evaluation put back, chain itself anew (it traced nothing more, silently). The other hook is a
small C extension built here with the interpreter's own compiler settings; the program runs in a process of its
own."""

from __future__ import annotations

import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("ringtrace.client._functions", reason="the C function tracer is not built")

#: A hook over whatever hook is in place, calling it for every frame, as debuggers and JIT front ends do.
HOOK = r"""
#include <Python.h>
static _PyFrameEvalFunction below;
static long frames;
static PyObject *
hook(PyThreadState *tstate, struct _PyInterpreterFrame *frame, int throwflag)
{
    frames++;
    return below(tstate, frame, throwflag);
}
static PyObject *
install(PyObject *module, PyObject *unused)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    below = _PyInterpreterState_GetEvalFrameFunc(interp);
    _PyInterpreterState_SetEvalFrameFunc(interp, hook);
    Py_RETURN_NONE;
}
static PyObject *
uninstall(PyObject *module, PyObject *unused)
{
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), below);
    Py_RETURN_NONE;
}
static PyObject *
leave(PyObject *module, PyObject *unused)
{
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), _PyEval_EvalFrameDefault);
    Py_RETURN_NONE;
}
static PyObject *
count(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(frames);
}
static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, NULL},
    {"uninstall", uninstall, METH_NOARGS, NULL},
    {"leave", leave, METH_NOARGS, NULL},
    {"frames", count, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "debughook", NULL, -1, methods};
PyMODINIT_FUNC
PyInit_debughook(void)
{
    return PyModule_Create(&module);
}
"""

#: Five calls of f, traced: alone, under the other hook, under it after a stop and a start, alone again, and after
#: the other hook left by putting the interpreter's own evaluation back.
PROGRAM = """
import debughook
from ringtrace.client import _functions as functions
from ringtrace.wire.call_records import RECORD

tracer = functions.Tracer(lambda code, module: module == "__main__" and code.co_name == "f", [])

def f():
    return 1

tracer.start()
f()
debughook.install()
f()
tracer.stop()  # (the tracer's hook stays under the other one, which calls it)
tracer.start()
f()
tracer.stop()
debughook.uninstall()
tracer.start()
f()
tracer.stop()
# Under the other hook again, stopped, and the other hook leaves putting the interpreter's own back (not the one it
# was put over): started again, the tracer chains anew, and traces.
tracer.start()
debughook.install()
tracer.stop()
debughook.leave()
tracer.start()
f()
tracer.stop()
calls = sum(len(records) for _, records in tracer.drain()) // RECORD.size
print(calls, debughook.frames() > 0)
"""


def build_hook(directory: Path) -> None:
    source = directory / "debughook.c"
    source.write_text(HOOK)
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    output = directory / f"debughook{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = sysconfig.get_paths()["include"]
    subprocess.run([*compiler, "-shared", "-fPIC", "-I", include, str(source), "-o", str(output)], check=True)


def test_a_tracer_stopped_and_started_under_another_hook_traces_through_it(tmp_path: Path) -> None:
    build_hook(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "5 True\n", "")
