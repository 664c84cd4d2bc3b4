/* The flusher's side of a buffer: take_runs() moves its first events into run lists without a reference count
   change (the wire packer's tracked() hands a run to the cyclic collector again); a segment of compact records
   (records.c) in the buffer is a run of its own, in its place. */

#include "speedups.h"

/* How the first `count` values of `l` fall into runs: each segment (its five values) alone, which `lengths` marks -1,
and the values between segments in runs of run_values (the last one of each stretch shorter). Returns the number of
runs. */
static Py_ssize_t
plan_runs(PyListObject *l, Py_ssize_t count, Py_ssize_t run_values, PyTypeObject *segment_type, Py_ssize_t *starts,
          Py_ssize_t *lengths)
{
    Py_ssize_t i, nruns = 0, open = 0; /* open: where the values not planned yet begin */
    for (i = 0; i + RECORD_FIELDS <= count; i += RECORD_FIELDS) {
        if (!Py_IS_TYPE(l->ob_item[i], segment_type)) continue;
        for (; open < i; open += run_values) {
            starts[nruns] = open;
            lengths[nruns++] = i - open < run_values ? i - open : run_values;
        }
        starts[nruns] = i;
        lengths[nruns++] = -1;
        open = i + RECORD_FIELDS;
    }
    for (; open < count; open += run_values) {
        starts[nruns] = open;
        lengths[nruns++] = count - open < run_values ? count - open : run_values;
    }
    return nruns;
}

PyObject *
take_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *list, *runs = NULL;
    PyListObject *l;
    Py_ssize_t count, run_values, nruns, i, size, most, *plan = NULL, *check = NULL;
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
    /* Room for any plan of up to `count` values: a segment splits a stretch of values in two at most. */
    most = 2 * (count / RECORD_FIELDS) + count / run_values + 2;
    plan = PyMem_Malloc(sizeof(Py_ssize_t) * 4 * (size_t)most);
    if (plan == NULL) return PyErr_NoMemory();
    check = plan + 2 * most;
    for (;;) {
        nruns = plan_runs(l, count, run_values, state->segment_type, plan, plan + most);
        runs = PyList_New(nruns);
        if (runs == NULL) goto done;
        for (i = 0; i < nruns; i++) {
            Py_ssize_t length = plan[most + i];
            PyObject *run;
            if (length < 0) continue; /* a segment: moved in below */
            run = PyList_New(length);
            if (run == NULL) goto fail;
            /* Untracked: the cyclic collector, which runs every few hundred allocations (a recording thread's,
               mostly), would otherwise visit every value of every run the flusher holds, at each pass until the run
               is handed over. A run is made here and dropped after its hand-over to the encoders; a listener that
               may keep it gets it tracked again (tracked(), in keyword_args.with_maps), so a cycle through it is
               collected. */
            PyObject_GC_UnTrack(run);
            PyList_SET_ITEM(runs, i, run);
        }
        /* Allocating may have run Python code: a finalizer that flushed drained this very buffer, or a thread that
           recorded started a segment. Start again with what is there then (recording only appends, whole events; a
           drain takes whole events), unless the plan still holds. */
        size = Py_SIZE(l);
        if (count > size) count = size;
        else if (plan_runs(l, count, run_values, state->segment_type, check, check + most) == nruns &&
                 memcmp(plan, check, sizeof(Py_ssize_t) * (size_t)nruns) == 0 &&
                 memcmp(plan + most, check + most, sizeof(Py_ssize_t) * (size_t)nruns) == 0) {
            break;
        }
        Py_CLEAR(runs); /* the run lists hold only NULL slots; segment slots are NULL */
    }
    if (count == 0) goto done; /* an empty buffer's ob_item may be NULL: no pointer arithmetic on it */
    /* From here on nothing allocates or runs Python code. Ownership of the values moves into the run lists. */
    for (i = 0; i < nruns; i++) {
        Py_ssize_t start = plan[i], length = plan[most + i];
        if (length < 0) {
            PyObject *segment = l->ob_item[start];
            int field;
            PyList_SET_ITEM(runs, i, segment); /* (the list's reference) */
            segment_taken(segment);
            for (field = 1; field < RECORD_FIELDS; field++) {
                Py_DECREF(l->ob_item[start + field]); /* None: nothing is freed */
            }
            continue;
        }
        memcpy(((PyListObject *)PyList_GET_ITEM(runs, i))->ob_item, l->ob_item + start, length * sizeof(PyObject *));
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
    goto done;
fail:
    Py_CLEAR(runs);
done:
    PyMem_Free(plan);
    return runs;
}
