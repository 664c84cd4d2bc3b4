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

/* The name of `task` (a task, or its name: a str), a new reference, or NULL with an exception set. */
static PyObject *
task_name(ModuleState *state, PyObject *task)
{
    return PyUnicode_CheckExact(task) ? Py_NewRef(task) : PyObject_CallMethodNoArgs(task, state->str_get_name);
}

/* Whether every key of the dict `map` is a str (not a subclass): then a lookup or an insert in it runs no Python code
   (no __hash__ or __eq__ of ours to call). */
static int
str_keys_only(PyObject *map)
{
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(map, &position, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return 0;
    }
    return 1;
}

/* The args at `i` of `run` named by `name` (see name_tasks): 0, or -1 with an exception set. A dict the run alone
   holds, of str keys only, is named in place: no one else can see it change (the twin copies it, not knowing), and a
   server's span's args are such a dict; any other dict is copied, as the twin does: the caller may hold on to its
   map, and code a lookup runs (a key's __eq__) could take it meanwhile. */
static int
name_args(ModuleState *state, PyObject *run, Py_ssize_t i, PyObject *name)
{
    PyObject *given = item_at(run, i), *args, *named;
    Py_ssize_t alone; /* the references of a dict the run alone holds, counting `args` */
    int has;
    if (given == NULL) return -1;
    Py_INCREF(given); /* (the code as_dict runs, a key's __hash__, may take it out of the run) */
    if (Py_IS_TYPE(given, state->keywords_type)) { /* keyword_args.as_map: a new dict */
        args = PyObject_CallMethodNoArgs(given, state->str_as_dict);
        Py_DECREF(given);
        if (args == NULL) return -1;
        alone = 1;
    }
    else {
        args = given;
        alone = 2;
    }
    if (args == Py_None) {
        named = PyDict_New();
        if (named != NULL && PyDict_SetItem(named, state->str_task, name) < 0) Py_CLEAR(named);
    }
    else if (PyDict_CheckExact(args)) {
        if (Py_REFCNT(args) == alone && str_keys_only(args)) { /* (no Python code runs from here to the store) */
            if ((has = PyDict_Contains(args, state->str_task)) == 0) has = PyDict_SetItem(args, state->str_task, name);
            if (has != 0 || alone == 2) { /* named already, failed, or named in place in the run */
                Py_DECREF(args);
                return has < 0 ? -1 : 0;
            }
            named = args; /* a Keywords' new dict: stored in its place below */
            args = NULL;
        }
        else if ((has = PyDict_Contains(args, state->str_task)) != 0) { /* named already (or the lookup raised) */
            Py_DECREF(args);
            return has < 0 ? -1 : 0;
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

/* kept += run[i : i + RECORD_FIELDS]: 0, or -1 with an exception set. */
static int
keep_record(PyObject *kept, PyObject *run, Py_ssize_t i)
{
    for (Py_ssize_t k = i; k < i + RECORD_FIELDS && k < PyList_GET_SIZE(run); k++) {
        if (PyList_Append(kept, PyList_GET_ITEM(run, k)) < 0) return -1;
    }
    return 0;
}

/* run[:] = kept, without allocating: the two lists swap their values (no Python code runs meanwhile), and kept, ours
   alone, then holds what the run held, let go of with it, when the run is whole again (the code a release runs may
   look at the run). */
static void
replace_values(PyObject *run, PyObject *kept)
{
    PyListObject *to = (PyListObject *)run, *from = (PyListObject *)kept;
    PyObject **items = to->ob_item;
    Py_ssize_t size = Py_SIZE(to), allocated = to->allocated;
    to->ob_item = from->ob_item;
    Py_SET_SIZE(to, Py_SIZE(from));
    to->allocated = from->allocated;
    from->ob_item = items;
    Py_SET_SIZE(from, size);
    from->allocated = allocated;
}

/* name_tasks(run, task, task_switch, span, instant): the twin of drain._name_tasks, which defines what it does (a
   lane's run: the TASK_SWITCH records taken out, each span and instant named by the task that recorded it), for the
   flusher, which did it a value at a time in bytecode: a server's lane holds a task switch and a span a request.
   Step for step as the twin (the run read again after each call that may run Python code); where it fails, the run
   holds its switches still, as the twin's does (events_in counts them as none). */
PyObject *
name_tasks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *run, *task, *task_switch, *name, *kept = NULL; /* kept: the records kept, once a switch is met */
    Py_ssize_t i, size;
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
        int named;
        if (kind == NULL) goto fail;
        if (kind == task_switch) {
            if (kept == NULL && (kept = PyList_GetSlice(run, 0, i)) == NULL) goto fail;
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
        if (kept != NULL && keep_record(kept, run, i) < 0) goto fail;
    }
    if (kept != NULL) {
        replace_values(run, kept);
        Py_DECREF(kept);
    }
    Py_DECREF(name);
    return task;
fail:
    Py_XDECREF(kept);
    Py_XDECREF(name);
    Py_DECREF(task);
    return NULL;
}
