/* A thread's buffer and stack: found, pushed, popped, written, closed and drained. */

#include "tracer.h"

#include <signal.h>

/* The exception set, raised by Python code the tracer ran for itself (decide, wake), reported and cleared: it never
   reaches the program. But a KeyboardInterrupt is Ctrl-C's, raised in whatever Python code ran when it came: not
   reported, and the interrupt made pending again, so that the program gets it at its next instruction, as untraced.
   1: it was a KeyboardInterrupt, else 0. */
int
rt_unraisable(PyObject *where)
{
    return rt_failed(where, 0);
}

/* Whether the exception set (kept set) was raised by one of the program's signal handlers, as the Python twin tells
   (callback_errors.raised_by_a_signal_handler: a handler's frame in its traceback). */
static int
raised_by_a_signal_handler(void)
{
    static PyObject *check; /* kept for good once found */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    if (check == NULL) {
        PyObject *module = PyImport_ImportModule("ringtrace.client.functions.callback_errors");
        check = module == NULL ? NULL : PyObject_GetAttrString(module, "raised_by_a_signal_handler");
        Py_XDECREF(module);
    }
    int raised = 0;
    if (check != NULL && value != NULL) {
        PyObject *answer = PyObject_CallOneArg(check, value);
        raised = answer != NULL && PyObject_IsTrue(answer) == 1;
        Py_XDECREF(answer);
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return raised;
}

/* As rt_unraisable, and with pass_on, an exception a signal handler raised is the program's: left set, 2. */
int
rt_failed(PyObject *where, int pass_on)
{
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        PyErr_Clear();
        PyErr_SetInterruptEx(SIGINT);
        return 1;
    }
    if (pass_on && raised_by_a_signal_handler()) {
        return 2;
    }
    PyErr_WriteUnraisable(where);
    return 0;
}

/* The exception set goes on to the program; the one saved before the tracer's callback ran (an exception on its way
   out of a frame) becomes its context, as if the handler had run in the program's code. Takes the saved three. */
void
rt_pass_on(PyObject *saved_type, PyObject *saved_value, PyObject *saved_tb)
{
    if (saved_type == NULL) {
        Py_XDECREF(saved_value);
        Py_XDECREF(saved_tb);
        return;
    }
    PyErr_NormalizeException(&saved_type, &saved_value, &saved_tb);
    if (saved_tb != NULL && saved_value != NULL) {
        PyException_SetTraceback(saved_value, saved_tb);
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && saved_value != NULL && value != saved_value) {
        PyException_SetContext(value, saved_value); /* takes it */
        saved_value = NULL;
    }
    Py_XDECREF(saved_type);
    Py_XDECREF(saved_value);
    Py_XDECREF(saved_tb);
    PyErr_Restore(type, value, tb);
}

/* Forget the thread's task switches (with the GIL: a task may go with its last reference). */
static void
clear_notes(ThreadBuf *t)
{
    Py_ssize_t n = t->n_notes;
    t->n_notes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(t->notes[i].task);
    }
    t->in_task = 0;
    Py_CLEAR(t->step_task);
    Py_CLEAR(t->base);
    Py_CLEAR(t->lane_task);
}

void
rt_thread_release(ThreadBuf *t)
{
    if (--t->refs == 0) {
        clear_notes(t);
        free(t->notes);
        free(t->data);
        free(t->stack);
        free(t);
    }
}

/* The id of this thread's thread state whose capsule is gone (0: none): it is being cleared, and what its dict's
   other values run as they go (a threading.local's value's __del__) finds no dict, and would make one that is never
   cleared, its new capsule and buffer never let go. So its calls are dropped (counted) instead. Thread states' ids
   are never reused; a thread that gets another thread state (PyGILState_Ensure again) records again. */
static __thread uint64_t cleared_tstate_id;

#if PY_VERSION_HEX < 0x030D0000
#define PyThreadState_GetUnchecked _PyThreadState_UncheckedGet
#endif

/* The capsule's destructor: the thread state is being cleared, the thread is ending (or, in a child after fork, the
   thread state of a thread that did not fork is deleted). */
static void
thread_capsule_gone(PyObject *capsule)
{
    ThreadBuf *t = PyCapsule_GetPointer(capsule, NULL);
    if (t == NULL) {
        PyErr_Clear();
        return;
    }
    PyThreadState *current = PyThreadState_GetUnchecked();
    if (current != NULL && current->id == t->tstate_id) {
        cleared_tstate_id = t->tstate_id;
    }
    t->ended = 1;
    if (t->tracer != NULL && t->tracer->cache_buf == t) {
        t->tracer->cache_buf = NULL;
    }
    rt_thread_release(t);
}

ThreadBuf *
rt_thread_slow(Tracer *self, pthread_t thread)
{
    PyThreadState *tstate = PyThreadState_Get();
    if (tstate->id == cleared_tstate_id) {
        return NULL; /* being cleared: see cleared_tstate_id */
    }
    PyObject *saved_type, *saved_value, *saved_tb; /* an exception may be on its way (PY_UNWIND) */
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    ThreadBuf *found = NULL;
    PyObject *dict = PyThreadState_GetDict(); /* borrowed; NULL when the thread state has none and none can be made */
    if (dict != NULL) {
        PyObject *capsule = PyDict_GetItemWithError(dict, self->thread_key);
        if (capsule != NULL && PyCapsule_CheckExact(capsule)) {
            ThreadBuf *t = PyCapsule_GetPointer(capsule, NULL);
            if (t != NULL && t->tracer == self && !t->ended) {
                found = t;
            }
        }
        PyErr_Clear();
    }
    if (found == NULL) {
        ThreadBuf *t = calloc(1, sizeof(ThreadBuf));
        if (t == NULL) {
            goto done;
        }
        t->tracer = self;
        t->thread = thread;
        t->ident = PyThread_get_thread_ident();
        t->tstate_id = tstate->id;
        t->data = malloc((size_t)self->buffer_bytes); /* NULL: every call of this thread is dropped (counted) */
        t->room = t->data != NULL ? self->buffer_bytes - RT_RECORD_SIZE : -1;
        t->wake_at = self->buffer_bytes / 4;
        t->refs = 1;
        if (dict != NULL) {
            PyObject *capsule = PyCapsule_New(t, NULL, thread_capsule_gone);
            if (capsule != NULL) {
                t->refs++; /* the capsule's, released by its destructor (or below, when it never goes into the dict) */
                if (PyDict_SetItem(dict, self->thread_key, capsule) < 0) {
                    PyErr_Clear();
                    /* not in the dict: its end says nothing of the thread state's (cleared_tstate_id) */
                    PyCapsule_SetDestructor(capsule, NULL);
                    t->refs--;
                }
                Py_DECREF(capsule);
            }
            else {
                PyErr_Clear();
            }
        }
        if (t->refs == 1 || t->ended) {
            /* no capsule says when the thread ends: not kept, or the buffer would outlive the thread */
            t->ended = 1;
        }
        t->next = self->threads;
        self->threads = t;
        found = t;
    }
    if (!found->ended) {
        self->cache_thread = thread;
        self->cache_buf = found;
    }
done:
    PyErr_Restore(saved_type, saved_value, saved_tb);
    return found;
}

/* wake, on the thread of `t` (NULL: stop()'s), whose calls meanwhile are not recorded (busy). The tracer and `t`
   are held while it runs, and may be gone when it returns. */
int
rt_call_wake(Tracer *self, ThreadBuf *t, int pass_on)
{
    self->wake_due = 0;
    PyObject *wake = self->wake;
    if (wake == NULL || wake == Py_None) {
        return 0;
    }
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    Py_INCREF(self);
    Py_INCREF(wake);
    if (t != NULL) {
        t->refs++;
        t->busy++;
    }
    PyObject *result = PyObject_CallNoArgs(wake);
    int failure = result == NULL ? rt_failed(wake, pass_on) : 0; /* (busy still: it may run Python code) */
    if (t != NULL) {
        t->busy--;
        rt_thread_release(t);
    }
    Py_XDECREF(result);
    Py_DECREF(wake);
    if (failure == 2) {
        rt_pass_on(saved_type, saved_value, saved_tb);
    }
    else {
        PyErr_Restore(saved_type, saved_value, saved_tb);
    }
    Py_DECREF(self);
    return failure == 2;
}

int
rt_grow_stack(ThreadBuf *t)
{
    Py_ssize_t capacity = t->capacity ? t->capacity * 2 : 64;
    OpenCall *stack = realloc(t->stack, (size_t)capacity * sizeof(OpenCall));
    if (stack == NULL) {
        return -1;
    }
    t->stack = stack;
    t->capacity = capacity;
    return 0;
}

/* An end whose key is not on top: a missed end (of a C call, say). Closes what is above this key's entry and
   returns 1, or returns 0 when the key is not open at all. */
int
rt_close_above(Tracer *self, ThreadBuf *t, const void *key)
{
    Py_ssize_t i = t->depth - 1;
    while (i > 0 && t->stack[i - 1].key != key) {
        i--;
    }
    if (i == 0) {
        return 0;
    }
    int64_t now = rt_ticks();
    while (t->depth > i) {
        rt_end_top(self, t, now, RT_CALL);
    }
    return 1;
}

/* Note a task switch (task: a new reference, or NULL: the step ended) before the next record of the thread's. 0, or
   -1 with no memory for it (the task let go). A note of no record since the one before takes its place: notes are
   taken with the records after them, and a thread that switches greenlets (or steps tasks) but records nothing for a
   while would otherwise keep one a switch (60 MB for 2 million switches). */
int
rt_add_note(ThreadBuf *t, PyObject *task)
{
    uint64_t seq = t->drained_records + (uint64_t)(t->used / RT_RECORD_SIZE);
    if (t->n_notes > 0 && t->notes[t->n_notes - 1].seq == seq) {
        Py_XSETREF(t->notes[t->n_notes - 1].task, task); /* (set before the old one goes, which may run Python code) */
        return 0;
    }
    if (t->n_notes == t->notes_capacity) {
        Py_ssize_t capacity = t->notes_capacity ? t->notes_capacity * 2 : 16;
        TaskNote *notes = realloc(t->notes, (size_t)capacity * sizeof(TaskNote));
        if (notes == NULL) {
            Py_XDECREF(task);
            return -1;
        }
        t->notes = notes;
        t->notes_capacity = capacity;
    }
    t->notes[t->n_notes].seq = seq;
    t->notes[t->n_notes].task = task;
    t->n_notes++;
    return 0;
}

/* asyncio's own running loop and running task, read in C where asyncio_watch.current_task costs about 1 us a step in
   Python: _asyncio._get_running_loop(), then the loop's task: _asyncio.current_task(loop) on 3.12+, on 3.11 the
   _asyncio._current_tasks dict that asyncio.tasks.current_task reads. Found once asyncio.tasks has run with them
   (else, while asyncio is not loaded, looked for again; where it runs without them, not); used while
   asyncio.tasks.current_task is the one found (checked each step: one replaced is obeyed, through Python). */
static int c_asyncio_state;         /* 0: not looked for yet or not loaded; 1: found; -1: asyncio runs without */
static PyObject *tasks_namespace;   /* asyncio.tasks' __dict__ */
static PyObject *found_current;     /* asyncio.tasks.current_task, as found */
static PyObject *c_running_loop;    /* _asyncio._get_running_loop */
static PyObject *c_task_of;         /* 3.12+: _asyncio.current_task; 3.11: _asyncio._current_tasks */
static PyObject *current_task_name; /* "current_task" */

static PyObject *
loaded_module(const char *name)
{
    PyObject *key = PyUnicode_FromString(name);
    PyObject *module = key == NULL ? NULL : PyImport_GetModule(key);
    Py_XDECREF(key);
    return module;
}

/* Whether tasks.current_task is the one that reads what c_task_of is. */
static int
fits(PyObject *namespace, PyObject *current, PyObject *task_of)
{
#if PY_VERSION_HEX >= 0x030C0000
    (void)namespace;
    return current == task_of;
#else
    return PyFunction_Check(current) && PyFunction_GetGlobals(current) == namespace && PyDict_CheckExact(task_of) &&
           PyDict_GetItemString(namespace, "_current_tasks") == task_of;
#endif
}

static void
find_c_asyncio(void)
{
    if (current_task_name == NULL && (current_task_name = PyUnicode_InternFromString("current_task")) == NULL) {
        return;
    }
    PyObject *c_module = loaded_module("_asyncio");
    PyObject *tasks = c_module == NULL ? NULL : loaded_module("asyncio.tasks");
    if (tasks == NULL) { /* not loaded yet */
        Py_XDECREF(c_module);
        return;
    }
    PyObject *namespace = PyModule_Check(tasks) ? PyModule_GetDict(tasks) : NULL; /* borrowed */
    PyObject *running = PyObject_GetAttrString(c_module, "_get_running_loop");
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *task_of = running == NULL ? NULL : PyObject_GetAttr(c_module, current_task_name);
#else
    PyObject *task_of = running == NULL ? NULL : PyObject_GetAttrString(c_module, "_current_tasks");
#endif
    PyObject *current = namespace == NULL ? NULL : PyDict_GetItemWithError(namespace, current_task_name);
    c_asyncio_state = -1;
    if (task_of != NULL && current != NULL && fits(namespace, current, task_of)) {
        tasks_namespace = Py_NewRef(namespace);
        found_current = Py_NewRef(current);
        c_running_loop = Py_NewRef(running);
        c_task_of = Py_NewRef(task_of);
        c_asyncio_state = 1;
    }
    Py_DECREF(c_module);
    Py_DECREF(tasks);
    Py_XDECREF(running);
    Py_XDECREF(task_of);
}

/* The running task, or None; NULL with an exception where the look-up failed. The caller saved its exception. */
static PyObject *
running_task(Tracer *self)
{
    if (c_asyncio_state == 0) {
        find_c_asyncio();
        PyErr_Clear();
    }
    if (c_asyncio_state < 1 || PyDict_GetItemWithError(tasks_namespace, current_task_name) != found_current) {
        PyErr_Clear();
        return PyObject_CallNoArgs(self->current_task);
    }
    PyObject *loop = PyObject_CallNoArgs(c_running_loop);
    if (loop == NULL || loop == Py_None) {
        return loop;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *task = PyObject_CallOneArg(c_task_of, loop);
#else
    PyObject *task = PyDict_GetItemWithError(c_task_of, loop); /* borrowed */
    task = task != NULL ? Py_NewRef(task) : PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
#endif
    Py_DECREF(loop);
    return task;
}

/* A recorded coroutine begins (or resumes) while no task's step is open on the thread: the task that runs it, if
   one does, opens a step, whose records are the task's (1). Once a step: no other call looks the task up. Runs
   Python code (the look-up): the caller holds the tracer, and records none of its calls (busy). */
int
rt_task_step_begin(Tracer *self, ThreadBuf *t)
{
    if (self->current_task == NULL) {
        return 0;
    }
    PyObject *saved_type, *saved_value, *saved_tb; /* a coroutine resumed by throw() has an exception on its way */
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    t->busy++;
    PyObject *task = running_task(self);
    t->busy--;
    if (task == NULL) {
        rt_failed(self->current_task, 0);
    }
    PyErr_Restore(saved_type, saved_value, saved_tb);
    if (task == NULL || task == Py_None || rt_running != self) {
        Py_XDECREF(task);
        return 0;
    }
    Py_XSETREF(t->step_task, Py_NewRef(task));
    if (rt_add_note(t, task) < 0) {
        Py_CLEAR(t->step_task);
        return 0;
    }
    t->in_task = 1;
    return 1;
}

/* The coroutine that began a step of a task ended or suspended: the step ends, the records after it are the running
   greenlet's (base; NULL: the thread's). */
void
rt_task_step_end(ThreadBuf *t)
{
    if (t->in_task) {
        t->in_task = 0;
        Py_CLEAR(t->step_task);
        rt_add_note(t, Py_XNewRef(t->base)); /* (no memory: the records after stay the task's) */
    }
}

static PyObject *drain_all(Tracer *self, int with_cuts);

void
rt_close_open_calls(Tracer *self)
{
    int64_t now = rt_ticks();
    for (ThreadBuf *t = self->threads; t != NULL; t = t->next) {
        self->dropped += (uint64_t)t->lost;
        t->lost = 0;
        while (t->depth > 0) {
            rt_end_top(self, t, now, RT_CALL);
        }
        rt_task_step_end(t);
    }
}

void
rt_reset_stacks(Tracer *self)
{
    for (ThreadBuf *t = self->threads; t != NULL; t = t->next) {
        t->depth = 0;
        t->lost = 0;
        t->in_task = 0;
        Py_CLEAR(t->step_task);
        Py_CLEAR(t->base);
    }
}

PyObject *
rt_drain(Tracer *self, int with_cuts)
{
    /* One drain at a time: the garbage collector, run by an allocation below, may run Python code that drains (a
       finalizer), or let another thread run one, which would take the same records and free buffers this one reads.
       A drain begun while another runs gets [], what it would take being the running one's. */
    if (self->draining) {
        return PyList_New(0);
    }
    self->draining = 1;
    PyObject *runs = drain_all(self, with_cuts);
    self->draining = 0;
    return runs;
}

/* Where in the `taken` records just drained each task's begin: [(byte offset, task or None)], the first at 0; the
   notes used are forgotten (NULL: no memory, the notes kept). Allocating may run Python code that records on this
   thread and notes after them (never before: its seq counts the records taken). */
static PyObject *
take_cuts(ThreadBuf *t, Py_ssize_t taken)
{
    uint64_t first = t->drained_records - (uint64_t)(taken / RT_RECORD_SIZE);
    Py_ssize_t used = 0;
    while (used < t->n_notes && t->notes[used].seq < t->drained_records) {
        used++;
    }
    PyObject *cuts = PyList_New(used + 1);
    if (cuts == NULL) {
        return NULL;
    }
    PyObject *lane = t->lane_task != NULL ? t->lane_task : Py_None;
    PyObject *cut = Py_BuildValue("(nO)", (Py_ssize_t)0, lane);
    if (cut == NULL) {
        Py_DECREF(cuts);
        return NULL;
    }
    PyList_SET_ITEM(cuts, 0, cut);
    for (Py_ssize_t i = 0; i < used; i++) {
        TaskNote note = t->notes[i]; /* (the array may move as Python code notes more: read it anew each time) */
        cut = Py_BuildValue("(nO)", (Py_ssize_t)((note.seq - first) * RT_RECORD_SIZE),
                            note.task != NULL ? note.task : Py_None);
        if (cut == NULL) {
            Py_DECREF(cuts);
            return NULL;
        }
        PyList_SET_ITEM(cuts, i + 1, cut);
    }
    PyObject *last = t->lane_task;
    t->lane_task = NULL;
    for (Py_ssize_t i = 0; i < used; i++) {
        Py_XDECREF(last);
        last = t->notes[i].task; /* the note's reference, now the lane's */
    }
    t->lane_task = last;
    if (t->n_notes > used) { /* (no notes: the array may not be there, and no offset may be applied to NULL) */
        memmove(t->notes, t->notes + used, (size_t)(t->n_notes - used) * sizeof(TaskNote));
    }
    t->n_notes -= used;
    return cuts;
}

static PyObject *
drain_all(Tracer *self, int with_cuts)
{
    PyObject *runs = PyList_New(0);
    if (runs == NULL) {
        return NULL;
    }
    int64_t ticks, ns;
    double ns_per_tick;
    rt_clock_line(self, &ticks, &ns, &ns_per_tick);
    ThreadBuf **link = &self->threads;
    while (*link != NULL) {
        ThreadBuf *t = *link;
        Py_ssize_t taken = t->used;
        if (taken > 0) {
            /* Allocating may run Python code (the garbage collector), which may record on this thread: what is
               written meanwhile stays for the next drain. */
            t->refs++; /* kept while Python code may run */
            PyObject *records = PyBytes_FromStringAndSize(t->data, taken);
            if (records != NULL) {
                rt_ticks_to_ns(PyBytes_AS_STRING(records), taken, ticks, ns, ns_per_tick);
            }
            PyObject *run = records == NULL ? NULL : Py_BuildValue("(kN)", t->ident, records);
            int gone = t->tracer != self;
            if (!gone && run != NULL) {
                memmove(t->data, t->data + taken, (size_t)(t->used - taken));
                t->used -= taken;
                t->wake_at = self->buffer_bytes / 4;
                t->drained_records += (uint64_t)(taken / RT_RECORD_SIZE);
                PyObject *cuts = take_cuts(t, taken); /* (taken by drain() too: the notes go with their records) */
                PyObject *pair = run;
                if (!with_cuts) {
                    run = cuts == NULL ? NULL : pair;
                    Py_XDECREF(cuts);
                }
                else {
                    run = cuts == NULL ? NULL : Py_BuildValue("(OON)", PyTuple_GET_ITEM(pair, 0),
                                                              PyTuple_GET_ITEM(pair, 1), cuts);
                    Py_DECREF(pair);
                }
            }
            else if (with_cuts && run != NULL) { /* forgotten meanwhile: its calls of no task */
                PyObject *pair = run;
                run = Py_BuildValue("(OO[(iO)])", PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), 0, Py_None);
                Py_DECREF(pair);
            }
            rt_thread_release(t);
            if (run == NULL || PyList_Append(runs, run) < 0) {
                Py_XDECREF(run);
                Py_DECREF(runs);
                return NULL;
            }
            Py_DECREF(run);
            if (gone) { /* forgotten meanwhile (the tracer cleared): the list changed */
                link = &self->threads;
                continue;
            }
        }
        if (t->ended && t->used == 0) {
            *link = t->next;
                    if (self->cache_buf == t) {
                self->cache_buf = NULL;

            }
            t->tracer = NULL;
            rt_thread_release(t);
        }
        else {
            link = &t->next;
        }
    }
    return runs;
}

void
rt_forget_threads(Tracer *self)
{
    ThreadBuf *t = self->threads;
    self->threads = NULL;
    self->cache_buf = NULL;

    while (t != NULL) {
        ThreadBuf *next = t->next;
        t->tracer = NULL;
        clear_notes(t);
        free(t->data); /* a capsule may keep the small rest until its thread ends */
        t->data = NULL;
        t->room = -1;
        free(t->stack);
        t->stack = NULL;
        t->depth = t->capacity = 0;
        rt_thread_release(t);
        t = next;
    }
}
