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

/* The value at `i` of `list` (borrowed), or NULL with IndexError set where the list is shorter, as run[i] raises. */
static PyObject *
item_at(PyObject *list, Py_ssize_t i)
{
    if (i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    return PyList_GET_ITEM(list, i);
}

/* `task`'s name (task.get_name()), a new reference, or NULL with an exception set. */
static PyObject *
task_name(ModuleState *state, PyObject *task)
{
    return PyObject_CallMethodNoArgs(task, state->str_get_name);
}

/* The args at `i` of `run` named by `name` (see name_tasks): 0, or -1 with an exception set. A dict the run alone
   holds is named in place: no one else can see it change (the twin copies it, not knowing), and a server's span's
   args are such a dict; a dict held elsewhere too is copied, as the twin does: the caller may hold on to its map. */
static int
name_args(ModuleState *state, PyObject *run, Py_ssize_t i, PyObject *name)
{
    PyObject *given = item_at(run, i), *args, *named;
    Py_ssize_t alone; /* the references of a dict the run alone holds, counting `args` */
    int has;
    if (given == NULL) return -1;
    if (Py_IS_TYPE(given, state->keywords_type)) { /* keyword_args.as_map: a new dict */
        if ((args = PyObject_CallMethodNoArgs(given, state->str_as_dict)) == NULL) return -1;
        alone = 1;
    }
    else {
        args = Py_NewRef(given);
        alone = 2;
    }
    if (args == Py_None) {
        named = PyDict_New();
        if (named != NULL && PyDict_SetItem(named, state->str_task, name) < 0) Py_CLEAR(named);
    }
    else if (PyDict_CheckExact(args)) {
        if ((has = PyDict_Contains(args, state->str_task)) != 0) { /* named already (or the lookup raised) */
            Py_DECREF(args);
            return has < 0 ? -1 : 0;
        }
        if (Py_REFCNT(args) == alone) {
            int failed = PyDict_SetItem(args, state->str_task, name) < 0;
            if (failed || alone == 2) { /* (in place in the run: nothing to store) */
                Py_DECREF(args);
                return failed ? -1 : 0;
            }
            named = args; /* a Keywords' new dict: stored in its place below */
            args = NULL;
        }
        else {
            named = PyDict_Copy(args);
            if (named != NULL && PyDict_SetItem(named, state->str_task, name) < 0) Py_CLEAR(named);
        }
    }
    else { /* another mapping: left as it is */
        Py_DECREF(args);
        return 0;
    }
    Py_XDECREF(args);
    if (named == NULL) return -1;
    if (i >= PyList_GET_SIZE(run)) { /* shortened by the code a call ran: as the store into it would raise */
        Py_DECREF(named);
        PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
        return -1;
    }
    return PyList_SetItem(run, i, named); /* (steals named) */
}

/* Moves the record at `from` of `run` to `to` (before it, over what was there: a record moved on or a switch taken
   out), whole or as far as the run goes; returns where the next goes. Each slot holds a reference of its own at every
   step (the cyclic collector may look at the run whenever a release runs a finalizer). */
static Py_ssize_t
move_record(PyObject *run, Py_ssize_t from, Py_ssize_t to)
{
    for (int field = 0; field < RECORD_FIELDS && from + field < PyList_GET_SIZE(run) && to < from; field++, to++) {
        PyObject *old = PyList_GET_ITEM(run, to);
        PyList_SET_ITEM(run, to, Py_NewRef(PyList_GET_ITEM(run, from + field)));
        Py_DECREF(old);
    }
    return to;
}

/* Cuts `run`'s values from `from` to `to` out without allocating (list_ass_slice allocates to cut more than 8: a
   drain out of memory must still leave each event once in the run): the values after them swap places with them, no
   reference changes, and the list ends before them; each is let go of once it is out of the list. (A release that
   runs a finalizer cannot reach the run: the flusher alone holds it.) */
static void
cut(PyObject *run, Py_ssize_t from, Py_ssize_t to)
{
    PyListObject *l = (PyListObject *)run;
    Py_ssize_t size = Py_SIZE(l), k;
    if (to > size) to = size;
    if (from >= to) return;
    for (k = to; k < size; k++) {
        PyObject *kept = l->ob_item[k];
        l->ob_item[k] = l->ob_item[from + k - to];
        l->ob_item[from + k - to] = kept;
    }
    Py_SET_SIZE(l, size - (to - from));
    for (k = size - (to - from); k < size; k++) {
        PyObject *cut_out = l->ob_item[k];
        l->ob_item[k] = NULL;
        Py_DECREF(cut_out);
    }
}

/* name_tasks(run, task, task_switch, span, instant): the twin of drain._name_tasks, which defines what it does (a
   lane's run: the TASK_SWITCH records taken out, each span and instant named by the task that recorded it), for the
   flusher, which did it a value at a time in bytecode: a server's lane holds a task switch and a span a request.
   The run is compacted in place as it goes (the twin builds the run kept, then puts it in the run's place); where it
   fails, what was compacted is cut out of the middle, so that the run holds each of its events once. */
PyObject *
name_tasks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *run, *task, *task_switch, *name;
    Py_ssize_t i = 0, size, to = -1; /* to: where the next record kept goes, once a switch was met */
    if (nargs != 5 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "name_tasks(run, task, task_switch, span, instant): run a list");
        return NULL;
    }
    run = args[0];
    task_switch = args[2];
    task = Py_NewRef(args[1]);
    if ((name = task_name(state, task)) == NULL) goto fail;
    size = PyList_GET_SIZE(run); /* (the twin's range(), made once) */
    for (i = 0; i < size; i += RECORD_FIELDS) {
        PyObject *kind = item_at(run, i), *next;
        int named = 0;
        if (kind == NULL) goto fail;
        if (kind == task_switch) {
            if (to < 0) to = i;
            if ((next = item_at(run, i + 1)) == NULL) goto fail;
            Py_SETREF(task, Py_NewRef(next));
            Py_SETREF(name, task_name(state, task));
            if (name == NULL) goto fail;
            continue;
        }
        Py_INCREF(kind); /* (compared with code that may run Python: an __eq__) */
        named = PyObject_RichCompareBool(args[3], kind, Py_EQ); /* kind in (SPAN, INSTANT), as a tuple compares */
        if (named == 0) named = PyObject_RichCompareBool(args[4], kind, Py_EQ);
        Py_DECREF(kind);
        if (named < 0 || (named && name_args(state, run, i + 4, name) < 0)) goto fail;
        if (to >= 0) to = move_record(run, i, to);
    }
    if (to >= 0) cut(run, to, PyList_GET_SIZE(run));
    Py_DECREF(name);
    return task;
fail:
    if (to >= 0) { /* (an exception set meanwhile: what is cut may run a finalizer) */
        PyObject *exc_type, *exc, *tb;
        PyErr_Fetch(&exc_type, &exc, &tb);
        cut(run, to, i);
        PyErr_Restore(exc_type, exc, tb);
    }
    Py_XDECREF(name);
    Py_DECREF(task);
    return NULL;
}
