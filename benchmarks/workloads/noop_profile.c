/* A profile function that does nothing: what the interpreter itself adds to every call once any C profile function
   is set (PyEval_SetProfile), the floor under any tracer built on it. Built by bench_functions.py on Python 3.11. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

static int
noop(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)obj, (void)frame, (void)what, (void)arg;
    return 0;
}

static PyObject *
start(PyObject *module, PyObject *unused)
{
    PyEval_SetProfile(noop, NULL);
    Py_RETURN_NONE;
}

static PyObject *
stop(PyObject *module, PyObject *unused)
{
    PyEval_SetProfile(NULL, NULL);
    Py_RETURN_NONE;
}

/* ns per read of the CPU's time stamp counter, read `n` times in a row (None where there is none): what the
   two time stamps a traced call needs cost at least (a tracer's reads overlap the interpreter's work in part). */
static PyObject *
tsc_read_ns(PyObject *module, PyObject *arg)
{
#ifdef HAVE_TSC
    long n = PyLong_AsLong(arg);
    if (n <= 0) {
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "n must be above 0, not %ld", n);
    }
    struct timespec a, b;
    volatile unsigned long long sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        sink += __rdtsc();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)sink;
    return PyFloat_FromDouble(((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n);
#else
    Py_RETURN_NONE;
#endif
}

static PyMethodDef methods[] = {
    {"tsc_read_ns", tsc_read_ns, METH_O, "ns per read of the time stamp counter, read n times (None: none)"},
    {"start", start, METH_NOARGS, "set the no-op profile function on this thread"},
    {"stop", stop, METH_NOARGS, "unset it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "noop_profile", NULL, -1, methods};

PyMODINIT_FUNC
PyInit_noop_profile(void)
{
    return PyModule_Create(&module);
}
