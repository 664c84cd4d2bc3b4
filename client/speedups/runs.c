/* The flusher's side of a buffer: take_runs() moves its first events into run lists without a reference count
   change (the wire packer's tracked() hands a run to the cyclic collector again). */

#include "speedups.h"

PyObject *
take_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *list, *runs;
    PyListObject *l;
    Py_ssize_t count, run_values, nruns, i, size;
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "take_runs(list, count, run_values)");
        return NULL;
    }
    list = args[0];
    if ((count = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((run_values = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if (count < 0 || run_values < 1) {
        PyErr_Format(PyExc_ValueError, "take_runs: count %zd, runs of %zd", count, run_values);
        return NULL;
    }
    if (count > PyList_GET_SIZE(list)) count = PyList_GET_SIZE(list); /* taken meanwhile: see below */
    l = (PyListObject *)list;
    for (;;) {
        nruns = count / run_values + (count % run_values != 0); /* (count + run_values - 1) could overflow */
        runs = PyList_New(nruns);
        if (runs == NULL) return NULL;
        for (i = 0; i < nruns; i++) {
            Py_ssize_t start = i * run_values;
            PyObject *run = PyList_New(count - start < run_values ? count - start : run_values);
            if (run == NULL) {
                Py_DECREF(runs);
                return NULL;
            }
            /* Untracked: the cyclic collector, which runs every few hundred allocations (a recording thread's,
               mostly), would otherwise visit every value of every run the flusher holds, at each pass until the run
               is handed over. A run is made here and dropped after its hand-over to the encoders; a listener that
               may keep it gets it tracked again (tracked(), in keyword_args.with_maps), so a cycle through it is
               collected. */
            PyObject_GC_UnTrack(run);
            PyList_SET_ITEM(runs, i, run);
        }
        /* Allocating may have run Python code: a finalizer that flushed drained this very buffer. Start again with
           what is left then (recording only appends, whole events; a drain takes whole events). */
        size = Py_SIZE(l);
        if (count <= size) break;
        Py_DECREF(runs); /* the run lists hold only NULL slots */
        count = size;
    }
    if (count == 0) return runs; /* an empty buffer's ob_item may be NULL: no pointer arithmetic on it */
    /* From here on nothing allocates or runs Python code. Ownership of the values moves into the run lists. */
    for (i = 0; i < nruns; i++) {
        PyListObject *run = (PyListObject *)PyList_GET_ITEM(runs, i);
        memcpy(run->ob_item, l->ob_item + i * run_values, Py_SIZE(run) * sizeof(PyObject *));
    }
    if (size > count) memmove(l->ob_item, l->ob_item + count, (size - count) * sizeof(PyObject *));
    Py_SET_SIZE(l, size - count);
    if (l->allocated > 2 * (size - count) + 1024) {
        /* Give back what a burst made the buffer take, as list_resize would (a plain memory request, no Python). */
        Py_ssize_t keep = (size - count) + 1024;
        PyObject **items = PyMem_Realloc(l->ob_item, keep * sizeof(PyObject *));
        if (items != NULL) {
            l->ob_item = items;
            l->allocated = keep;
        }
    }
    return runs;
}
