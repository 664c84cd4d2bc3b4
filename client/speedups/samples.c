/* The sampler's pass over the threads, take_samples(): the twin of sampling/thread_pass.py's take_samples_in_python,
   which defines what it does (see there), but for the walk: a thread's frames are read by stack_walk.c, not as frame
   objects (on 3.11 those are unsafe to make of another thread's frames: see there). The point of C here is the idle
   thread, at 100 Hz the common case: right after the sampler's sleep every cache is cold (a pass that costs 10 us back
   to back costs 70 us then), so an idle thread must cost little more than the read of its CPU clock: its frames are
   not looked at (sys._current_frames() would make a dict of them all), only the thread state list is walked for the
   threads' idents.

   It reads and sets a SampledThread's attributes by name, calls the same Python code as the twin (sampled_of for a
   thread met anew, the interner's intern_walk for what stack_walk.c read where the twin calls its intern, a sink's
   extend or count_full where the sink is not a plain list, wake at the wake mark) in the same order, and records a
   sample whole or not at all (append_event) into a list sink.

   The thread states are read under the GIL, as sys._current_frames() does (threads are created and deleted holding
   it); the idents are taken first, before any Python code can run and end a thread, and a thread whose stack must be
   walked is looked up again by its ident (gone meanwhile: no sample, as in the twin's next pass). */

#include "speedups.h"

/* The CPU time of the thread whose clock id is `clock` (an int, or None: no clock), in *cpu; 0: none (no clock, or
   the thread has just ended, as the twin's OSError), 1: read, -1: an exception set. */
static int
read_cpu(PyObject *clock, int64_t *cpu)
{
    long id;
    struct timespec ts;
    if (clock == Py_None) return 0;
    id = PyLong_AsLong(clock);
    if (id == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear(); /* not a clock id this platform has: as the twin, none */
        return 0;
    }
    if (id < INT32_MIN || id > INT32_MAX || clock_gettime((clockid_t)id, &ts) != 0) return 0;
    *cpu = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    return 1;
}

/* The int value of `value` in *out; 0: not an int (None, say), 1: read, -1: an exception set. */
static int
int64_of(PyObject *value, int64_t *out)
{
    long long v;
    if (!PyLong_Check(value)) return 0;
    v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)v;
    return 1;
}

/* Bring `sampled`'s stack up to date (see the twin): the same while its thread's CPU clock did not move, else walked
   from its innermost frame. 1: up to date, 0: the thread has no frame (gone), -1: an exception set. */
static int
update_stack(ModuleState *state, PyInterpreterState *interp, unsigned long ident, PyObject *sampled,
             PyObject *interner)
{
    PyObject *clock, *then = NULL, *cpu = NULL, *key = NULL, *codes = NULL, *stack = NULL;
    PyThreadState *tstate;
    int64_t now_cpu = 0, then_cpu = 0;
    int read, known = 0, result = -1;
    if ((clock = PyObject_GetAttr(sampled, state->str_clock)) == NULL) return -1;
    read = read_cpu(clock, &now_cpu);
    Py_DECREF(clock);
    if (read < 0 || (then = PyObject_GetAttr(sampled, state->str_cpu)) == NULL) return -1;
    if (read && (known = int64_of(then, &then_cpu)) < 0) goto done;
    if (read && known && now_cpu == then_cpu) {
        result = 1; /* ran no code: the stack it had */
        goto done;
    }
    /* The walk (stack_walk.c) in place of the twin's frame objects; its thread looked up again by its ident. */
    if ((tstate = thread_state_of(interp, ident)) == NULL || (result = walk_thread(tstate, &key, &codes)) <= 0) {
        result = tstate == NULL ? 0 : result;
        goto done;
    }
    result = -1;
    if ((cpu = read ? PyLong_FromLongLong(now_cpu) : Py_NewRef(Py_None)) == NULL ||
        (stack = PyObject_CallMethodObjArgs(interner, state->str_intern_walk, key, codes, NULL)) == NULL ||
        PyObject_SetAttr(sampled, state->str_stack, stack) < 0 ||
        PyObject_SetAttr(sampled, state->str_cpu, cpu) < 0) {
        goto done;
    }
    result = 1;
done:
    Py_XDECREF(then);
    Py_XDECREF(cpu);
    Py_XDECREF(key);
    Py_XDECREF(codes);
    Py_XDECREF(stack);
    return result;
}

/* The sample's values (kind, name, now, now, stack) into `track`'s recording, as Source.open records: into a list
   sink directly (whole or not at all), any other sink through its extend; a full one counts it (count_full). 0, or
   -1 with an exception set. */
static int
record_sample(ModuleState *state, PyObject *track, PyObject *kind, PyObject *name, PyObject *now, PyObject *stack,
              PyObject *wake)
{
    PyObject *recording, *sink, *count_full, *called;
    Py_ssize_t held, limit, wake_at;
    int result = -1;
    if ((recording = PyObject_GetAttr(track, state->str_recording)) == NULL) return -1;
    if (!PyTuple_CheckExact(recording) || PyTuple_GET_SIZE(recording) != 4) {
        PyErr_SetString(PyExc_TypeError, "a source's recording must be a tuple (sink, limit, wake_at, count_full)");
        goto done;
    }
    sink = PyTuple_GET_ITEM(recording, 0);
    count_full = PyTuple_GET_ITEM(recording, 3);
    if ((limit = PyLong_AsSsize_t(PyTuple_GET_ITEM(recording, 1))) == -1 && PyErr_Occurred()) goto done;
    if ((wake_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(recording, 2))) == -1 && PyErr_Occurred()) goto done;
    held = PyList_CheckExact(sink) ? PyList_GET_SIZE(sink) : PyObject_Size(sink);
    if (held < 0) goto done;
    if (held >= limit) {
        called = PyObject_CallNoArgs(count_full);
    } else if (PyList_CheckExact(sink)) {
        PyObject *values[RECORD_FIELDS] = {Py_NewRef(kind), Py_NewRef(name), Py_NewRef(now), Py_NewRef(now),
                                           Py_NewRef(stack)};
        if (append_event(state, sink, values, limit) < 0) goto done; /* (not full: held < limit) */
        called = held == wake_at ? PyObject_CallNoArgs(wake) : Py_NewRef(Py_None);
    } else {
        PyObject *values = PyTuple_Pack(RECORD_FIELDS, kind, name, now, now, stack);
        if (values == NULL) goto done;
        called = PyObject_CallMethodOneArg(sink, state->str_extend, values);
        Py_DECREF(values);
        if (called != NULL && held == wake_at) {
            Py_DECREF(called);
            called = PyObject_CallNoArgs(wake);
        }
    }
    if (called == NULL) goto done;
    Py_DECREF(called);
    result = 0;
done:
    Py_DECREF(recording);
    return result;
}

/* One thread's sample, its ident `id` (`ident` as an int) (see the twin's loop body). 1: taken, 0: not this
   thread's, -1: an exception set. */
static int
sample_thread(ModuleState *state, PyObject *const *args, PyInterpreterState *interp, unsigned long id, PyObject *ident)
{
    PyObject *threads = args[0], *active = args[1], *own = args[2], *tasks = args[3], *now = args[4], *kind = args[5],
             *sampled_of = args[6], *interner = args[7], *wake = args[8];
    PyObject *sampled, *thread, *track = NULL, *stack = NULL, *name;
    int result = -1, current;
    if ((sampled = PyDict_GetItemWithError(threads, ident)) == NULL && PyErr_Occurred()) return -1;
    if ((thread = PyDict_GetItemWithError(active, ident)) == NULL && PyErr_Occurred()) return -1;
    Py_XINCREF(thread); /* (held across the Python code called below, which may end it) */
    Py_XINCREF(sampled);
    if (sampled != NULL) {
        PyObject *known = PyObject_GetAttr(sampled, state->str_thread);
        if (known == NULL) goto done;
        Py_DECREF(known); /* (compared, not used: the sampled thread holds it) */
        if (known != thread) Py_CLEAR(sampled);
    }
    if (sampled == NULL) {
        int is_own = PyObject_RichCompareBool(ident, own, Py_EQ);
        if (is_own != 0) {
            result = is_own < 0 ? -1 : 0;
            goto done;
        }
        sampled = PyObject_CallFunctionObjArgs(sampled_of, ident, thread != NULL ? thread : Py_None, NULL);
        if (sampled == NULL) goto done;
        if (sampled == Py_None) {
            result = 0;
            goto done;
        }
    }
    if ((track = PyObject_GetAttr(sampled, state->str_track)) == NULL) goto done;
    if (track == Py_None) {
        result = 0;
        goto done;
    }
    if ((current = update_stack(state, interp, id, sampled, interner)) <= 0) {
        result = current;
        goto done;
    }
    if ((stack = PyObject_GetAttr(sampled, state->str_stack)) == NULL) goto done;
    if (PyDict_GET_SIZE(tasks) == 0) {
        name = Py_NewRef(state->empty_name);
    } else if ((name = PyDict_GetItemWithError(tasks, ident)) != NULL) {
        Py_INCREF(name);
    } else if (PyErr_Occurred()) {
        goto done;
    } else {
        name = Py_NewRef(state->empty_name);
    }
    result = record_sample(state, track, kind, name, now, stack, wake) < 0 ? -1 : 1;
    Py_DECREF(name);
done:
    Py_XDECREF(thread);
    Py_XDECREF(sampled);
    Py_XDECREF(track);
    Py_XDECREF(stack);
    return result;
}

/* One pass (args as take_samples'): the samples taken in *taken, the thread states met in *met. 0, or -1. */
static int
take_pass(ModuleState *state, PyObject *const *args, Py_ssize_t *taken, Py_ssize_t *met)
{
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    PyThreadState *t;
    unsigned long on_stack[64], *idents = on_stack;
    Py_ssize_t count = 0, room = 64, i;
    int result = -1;
    *taken = 0;
    /* The idents first: no Python code runs (and so no thread ends) while the list is walked. */
    for (t = PyInterpreterState_ThreadHead(interp); t != NULL; t = PyThreadState_Next(t)) {
        if (count == room) {
            unsigned long *more = PyMem_Malloc(2 * room * sizeof(unsigned long));
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            memcpy(more, idents, count * sizeof(unsigned long));
            if (idents != on_stack) PyMem_Free(idents);
            idents = more;
            room *= 2;
        }
        idents[count++] = t->thread_id;
    }
    for (i = 0; i < count; i++) {
        PyObject *ident = PyLong_FromUnsignedLong(idents[i]);
        int r;
        if (ident == NULL) goto done;
        r = sample_thread(state, args, interp, idents[i], ident);
        Py_DECREF(ident);
        if (r < 0) goto done;
        *taken += r;
    }
    *met = count;
    result = 0;
done:
    if (idents != on_stack) PyMem_Free(idents);
    return result;
}

/* The dicts a pass takes are dicts (the tasks too, unless NULL: run_passes makes them). 0, or -1 with TypeError. */
static int
check_pass_args(PyObject *const *args)
{
    if (!PyDict_Check(args[0]) || !PyDict_Check(args[1]) || (args[3] != NULL && !PyDict_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError,
                        "take_samples(threads: dict, active: dict, own, tasks: dict, now, kind, sampled_of, interner, "
                        "wake)");
        return -1;
    }
    return 0;
}

/* take_samples(threads, active, own, tasks, now, kind, sampled_of, interner, wake) -> (samples taken, threads met). */
PyObject *
take_samples(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t taken, met;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "take_samples() takes 9 arguments");
        return NULL;
    }
    if (check_pass_args(args) < 0 || take_pass(PyModule_GetState(module), args, &taken, &met) < 0) return NULL;
    return Py_BuildValue("(nn)", taken, met);
}

/* The longest sleep between looks at the stop flag (as thread_pass._STOP_LATENCY_S). */
#define STOP_LATENCY_NS 50000000LL

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This thread's CPU time in ns (0 where it cannot be read). */
static int64_t
own_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The running tasks' names (a new reference): task_names() where asyncio's table of current tasks has any, else the
   empty dict `none` (looked up without a call: in most passes of most programs no loop runs a task). */
static PyObject *
tasks_now(PyObject *task_names, PyObject *none, PyObject *tasks_module_name, PyObject *current_tasks_name)
{
    PyObject *modules = PyImport_GetModuleDict(), *module, *current, *tasks;
    int empty;
    if ((module = PyDict_GetItemWithError(modules, tasks_module_name)) == NULL) {
        return PyErr_Occurred() ? NULL : Py_NewRef(none);
    }
    if ((current = PyObject_GetAttr(module, current_tasks_name)) == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        return Py_NewRef(none);
    }
    empty = PyDict_Check(current) && PyDict_GET_SIZE(current) == 0;
    Py_DECREF(current);
    if (empty) return Py_NewRef(none);
    if ((tasks = PyObject_CallNoArgs(task_names)) != NULL && !PyDict_Check(tasks)) {
        PyErr_Format(PyExc_TypeError, "task_names() must return a dict, not %.100s", Py_TYPE(tasks)->tp_name);
        Py_CLEAR(tasks);
    }
    return tasks;
}

/* run_passes(interval_ns, stopping, counts, flusher, take_args, task_names, forget_ended): the sampler's loop, the
   twin of thread_pass.run_passes_in_python (see there). */
PyObject *
run_passes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *stopping, *flusher, *take_args, *task_names, *forget_ended, *none = NULL, *tasks_module = NULL,
        *current_tasks = NULL, *exiting_name = NULL, *result = NULL;
    PyObject *pass_args[9];
    Py_buffer counts = {0};
    long long interval;
    int64_t *count = NULL, next;
    if (nargs != 7 || !PyByteArray_CheckExact(args[1]) || PyByteArray_GET_SIZE(args[1]) < 1 ||
        !PyTuple_CheckExact(args[4]) || PyTuple_GET_SIZE(args[4]) != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "run_passes(interval_ns, stopping: bytearray, counts: array('q', 3), flusher, take_args: "
                        "(threads, active, own, kind, sampled_of, interner, wake), task_names, forget_ended)");
        return NULL;
    }
    if ((interval = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred()) return NULL;
    if (interval <= 0) {
        PyErr_Format(PyExc_ValueError, "run_passes: an interval of %lld ns", interval);
        return NULL;
    }
    stopping = args[1];
    flusher = args[3];
    take_args = args[4];
    task_names = args[5];
    forget_ended = args[6];
    if (PyObject_GetBuffer(args[2], &counts, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return NULL;
    if (counts.len != 3 * (Py_ssize_t)sizeof(int64_t) || counts.itemsize != sizeof(int64_t) || counts.format == NULL ||
        strcmp(counts.format, "q") != 0) {
        PyErr_SetString(PyExc_TypeError, "run_passes: counts must be an array('q') of 3: passes, samples, CPU ns");
        goto done;
    }
    count = (int64_t *)counts.buf; /* (held: the array cannot be resized while its buffer is out) */
    count[2] = own_cpu_ns();
    if ((none = PyDict_New()) == NULL || (tasks_module = PyUnicode_InternFromString("asyncio.tasks")) == NULL ||
        (current_tasks = PyUnicode_InternFromString("_current_tasks")) == NULL ||
        (exiting_name = PyUnicode_InternFromString("exiting")) == NULL) {
        goto done;
    }
    /* In take_samples' order: threads, active, own, tasks, now, kind, sampled_of, interner, wake. */
    pass_args[0] = PyTuple_GET_ITEM(take_args, 0);
    pass_args[1] = PyTuple_GET_ITEM(take_args, 1);
    pass_args[2] = PyTuple_GET_ITEM(take_args, 2);
    pass_args[5] = PyTuple_GET_ITEM(take_args, 3);
    pass_args[6] = PyTuple_GET_ITEM(take_args, 4);
    pass_args[7] = PyTuple_GET_ITEM(take_args, 5);
    pass_args[8] = PyTuple_GET_ITEM(take_args, 6);
    pass_args[3] = pass_args[4] = NULL;
    if (check_pass_args(pass_args) < 0) goto done;
    next = monotonic_ns();
    while (!PyByteArray_AS_STRING(stopping)[0]) {
        int64_t now = monotonic_ns();
        Py_ssize_t taken, met;
        int exiting, failed;
        PyObject *flag;
        next += interval;
        if (next < now) next = now; /* fell behind (a long pause): skip the missed passes */
        while (now < next && !PyByteArray_AS_STRING(stopping)[0]) {
            int64_t until = next - now > STOP_LATENCY_NS ? now + STOP_LATENCY_NS : next;
            struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
            Py_BEGIN_ALLOW_THREADS
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* (EINTR: looked at again) */
            Py_END_ALLOW_THREADS
            now = monotonic_ns();
        }
        if (PyByteArray_AS_STRING(stopping)[0]) break;
        /* Once the exit delivery has begun, a sample would land after its last sweep and count as dropped. */
        if ((flag = PyObject_GetAttr(flusher, exiting_name)) == NULL) goto done;
        exiting = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (exiting != 0) {
            if (exiting < 0) goto done;
            break;
        }
        if ((pass_args[3] = tasks_now(task_names, none, tasks_module, current_tasks)) == NULL) goto done;
        if ((pass_args[4] = PyLong_FromLongLong(monotonic_ns())) == NULL) {
            Py_CLEAR(pass_args[3]);
            goto done;
        }
        failed = take_pass(state, pass_args, &taken, &met);
        Py_CLEAR(pass_args[3]);
        Py_CLEAR(pass_args[4]);
        if (failed) goto done;
        count[0] += 1;
        count[1] += taken;
        if (PyDict_GET_SIZE(pass_args[0]) > met - 1) { /* threads ended: their tracks go */
            PyObject *called = PyObject_CallNoArgs(forget_ended);
            if (called == NULL) goto done;
            Py_DECREF(called);
        }
        if (count[0] % 16 == 0) count[2] = own_cpu_ns();
    }
    result = Py_NewRef(Py_None);
done:
    if (count != NULL) count[2] = own_cpu_ns();
    if (counts.buf != NULL) PyBuffer_Release(&counts);
    Py_XDECREF(none);
    Py_XDECREF(tasks_module);
    Py_XDECREF(current_tasks);
    Py_XDECREF(exiting_name);
    return result;
}
