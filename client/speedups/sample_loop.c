/* The sampler's loop, run_passes(): the twin of sampling/thread_pass.py's run_passes_in_python (see there), a pass
   (samples.c's take_pass) every interval, in C so that no bytecode runs between passes.

   Where a pass runs. The sampler's thread needs the GIL for a pass, and the program's thread that holds it gives it up
   only when asked: the sampler waits the switch interval (5 ms) for it, asks, the program's thread drops it and waits
   to take it back, and the sampler hands it back after its pass. At 100 Hz that is 100 handoffs a second, each costing
   the program's thread two context switches, a wake-up and its caches, and the sampler three wake-ups. Most programs
   run their work on their main thread, so the loop asks that thread to run the pass itself, between two of its
   bytecodes, as a pending call (Py_AddPendingCall, which needs no GIL): no handoff, no wake-up; the program pays the
   pass alone. A pass there runs no Python code that may take a lock the interrupted program holds (a thread met anew
   gets its track under the timeline's lock; a sink not yet a plain list starts the flusher): what would is deferred,
   and the loop's next tick runs a full pass on its own thread, with the GIL, as it does where the main thread has not
   run its call since the last tick (it waits in a system call, or runs long C code). A call that runs after such a
   full pass (stale: its tick was sampled) does nothing; a pass of the main thread that fails stores its exception,
   raised by the loop, never into the program. The loop's state is the pending call's argument: freed by the loop as
   it ends, or by the call where one is still queued then (checked under the GIL); a forked child's call (its parent's
   loop is not there) does nothing. Not used on the main thread, nor in a sub-interpreter (pending calls run in the
   main interpreter's main thread only). */

#include "speedups.h"

#include <pthread.h>
#include <unistd.h>

/* The longest sleep between looks at the stop flag (as thread_pass._STOP_LATENCY_S). */
#define STOP_LATENCY_NS 50000000LL
/* counts: passes, samples taken, the loop thread's CPU ns, and (where it has a fourth) passes run by the main thread. */
#define COUNTS 4

typedef struct {
    ModuleState *state;
    PyObject *pass_args[9]; /* borrowed (the loop's arguments, alive while it runs); [3], [4]: made per pass */
    PyObject *flusher, *task_names, *forget_ended, *none, *tasks_module, *current_tasks, *exiting_name;
    int64_t *count;
    int64_t *main_passes; /* count[3], or `uncounted` */
    int64_t uncounted;
    clockid_t own_clock; /* the loop thread's CPU clock */
    int has_own_clock;
    unsigned long loop_ident;
    pid_t pid;
    int outstanding; /* a pending call is queued and has not run (set by the loop, cleared by the call: atomics) */
    int orphaned;    /* the loop ended with a call queued: the call frees this (under the GIL) */
    int stale;       /* a full pass ran since the call was queued: it does nothing (under the GIL) */
    int in_pass;     /* the main thread is in its pass (which may let the GIL go: no full pass then; under the GIL) */
    int deferred;    /* the main thread's pass left work for a full pass (atomics) */
    int ended;       /* the main thread's pass saw the flusher exiting, or failed (atomics) */
    clockid_t main_clock; /* the main thread's CPU clock (Linux: by its thread id) */
    int64_t main_cpu;     /* its CPU time when the last call was queued (-1: not read) */
    int missed;           /* a tick skipped: the main thread ran, but not its call yet */
    PyObject *error_type, *error_value, *error_tb; /* its exception (under the GIL) */
} Loop;

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The loop thread's CPU time in ns (0 where it cannot be read), from whichever thread runs the pass. */
static int64_t
loop_cpu_ns(Loop *loop)
{
    struct timespec ts;
    if (!loop->has_own_clock || clock_gettime(loop->own_clock, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The main thread's CPU time in ns, -1 where it cannot be read. */
static int64_t
main_cpu_ns(Loop *loop)
{
    struct timespec ts;
    if (clock_gettime(loop->main_clock, &ts) != 0) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether the main thread used CPU since its call was queued: it did not wait all along, and so runs its call soon
   (not a handoff of the GIL the sampler waits 5 ms for), or runs long C code. */
static int
main_thread_ran(Loop *loop)
{
    int64_t now = main_cpu_ns(loop);
    return now >= 0 && loop->main_cpu >= 0 && now != loop->main_cpu;
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

/* One pass with the GIL, counted (`deferred`: see take_pass). 0, 1: the flusher is exiting (no pass), -1: an
   exception set. */
static int
one_pass(Loop *loop, int *deferred)
{
    PyObject *flag, **pass_args = loop->pass_args;
    Py_ssize_t taken, met;
    int exiting, failed;
    int64_t *count = loop->count;
    /* Once the exit delivery has begun, a sample would land after its last sweep and count as dropped. */
    if ((flag = PyObject_GetAttr(loop->flusher, loop->exiting_name)) == NULL) return -1;
    exiting = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (exiting != 0) return exiting < 0 ? -1 : 1;
    if ((pass_args[3] = tasks_now(loop->task_names, loop->none, loop->tasks_module, loop->current_tasks)) == NULL) {
        return -1;
    }
    if ((pass_args[4] = PyLong_FromLongLong(monotonic_ns())) == NULL) {
        Py_CLEAR(pass_args[3]);
        return -1;
    }
    failed = take_pass(loop->state, pass_args, &taken, &met, deferred);
    Py_CLEAR(pass_args[3]);
    Py_CLEAR(pass_args[4]);
    if (failed) return -1;
    count[0] += 1;
    count[1] += taken;
    if (PyDict_GET_SIZE(pass_args[0]) > met - 1) { /* threads ended: their tracks go */
        PyObject *called = PyObject_CallNoArgs(loop->forget_ended);
        if (called == NULL) return -1;
        Py_DECREF(called);
    }
    if (count[0] % 16 == 0) count[2] = loop_cpu_ns(loop);
    return 0;
}

static void
free_loop(Loop *loop)
{
    Py_XDECREF(loop->error_type);
    Py_XDECREF(loop->error_value);
    Py_XDECREF(loop->error_tb);
    PyMem_RawFree(loop);
}

/* The pending call: a pass in the main thread, with the GIL, between two of its bytecodes. Always 0: nothing is
   raised into the program (an exception is kept for the loop). */
static int
main_thread_pass(void *arg)
{
    Loop *loop = arg;
    int deferred = 0, result;
    if (loop->pid != getpid()) return 0; /* a forked child: its parent's loop is not here */
    if (loop->orphaned) {
        free_loop(loop);
        return 0;
    }
    __atomic_store_n(&loop->outstanding, 0, __ATOMIC_RELEASE);
    if (loop->stale || PyThread_get_thread_ident() == loop->loop_ident) {
        loop->stale = 0;
        return 0;
    }
    loop->in_pass = 1;
    result = one_pass(loop, &deferred);
    loop->in_pass = 0;
    if (result < 0) {
        PyErr_Fetch(&loop->error_type, &loop->error_value, &loop->error_tb);
    } else if (result == 0) {
        *loop->main_passes += 1;
    }
    if (deferred) __atomic_store_n(&loop->deferred, 1, __ATOMIC_RELEASE);
    if (result != 0) __atomic_store_n(&loop->ended, 1, __ATOMIC_RELEASE);
    return 0;
}

/* 1: the calling thread is not the main interpreter's main thread (which runs the pending calls), 0: it is, or this is
   a sub-interpreter; -1: an exception set. */
static int
off_the_main_thread(unsigned long own, long *native_id)
{
    PyObject *threading, *main, *ident, *native;
    unsigned long main_ident;
    if (PyThreadState_GetInterpreter(PyThreadState_Get()) != PyInterpreterState_Main()) return 0;
    if ((threading = PyImport_ImportModule("threading")) == NULL) return -1;
    main = PyObject_CallMethod(threading, "main_thread", NULL);
    Py_DECREF(threading);
    if (main == NULL) return -1;
    ident = PyObject_GetAttrString(main, "ident");
    native = ident != NULL ? PyObject_GetAttrString(main, "native_id") : NULL;
    Py_DECREF(main);
    if (native == NULL) {
        Py_XDECREF(ident);
        return -1;
    }
    *native_id = PyLong_Check(native) ? PyLong_AsLong(native) : 0;
    Py_DECREF(native);
    if (*native_id == -1 && PyErr_Occurred()) {
        Py_DECREF(ident);
        return -1;
    }
    main_ident = ident == Py_None ? own : PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    if (main_ident == (unsigned long)-1 && PyErr_Occurred()) return -1;
    return main_ident != own;
}

/* run_passes(interval_ns, stopping, counts, flusher, take_args, task_names, forget_ended): the sampler's loop, the
   twin of thread_pass.run_passes_in_python (see there and the top of this file). */
PyObject *
run_passes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *stopping, *take_args, *result = NULL;
    PyThreadState *saved;
    Py_buffer counts = {0};
    long long interval;
    int64_t next;
    int use_main, failed = 0;
    long main_native_id = 0;
    clockid_t own_clock;
    Loop *loop;
    if (nargs != 7 || !PyByteArray_CheckExact(args[1]) || PyByteArray_GET_SIZE(args[1]) < 1 ||
        !PyTuple_CheckExact(args[4]) || PyTuple_GET_SIZE(args[4]) != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "run_passes(interval_ns, stopping: bytearray, counts: array('q', 3 or 4), flusher, take_args: "
                        "(threads, active, own, kind, sampled_of, interner, wake), task_names, forget_ended)");
        return NULL;
    }
    if ((interval = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred()) return NULL;
    if (interval <= 0) {
        PyErr_Format(PyExc_ValueError, "run_passes: an interval of %lld ns", interval);
        return NULL;
    }
    stopping = args[1];
    take_args = args[4];
    if ((loop = PyMem_RawCalloc(1, sizeof(Loop))) == NULL) return PyErr_NoMemory();
    loop->state = PyModule_GetState(module);
    loop->flusher = args[3];
    loop->task_names = args[5];
    loop->forget_ended = args[6];
    loop->has_own_clock = pthread_getcpuclockid(pthread_self(), &own_clock) == 0;
    loop->own_clock = own_clock;
    loop->loop_ident = PyThread_get_thread_ident();
    loop->pid = getpid();
    if (PyObject_GetBuffer(args[2], &counts, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto done;
    if ((counts.len != COUNTS * (Py_ssize_t)sizeof(int64_t) && counts.len != (COUNTS - 1) * (Py_ssize_t)sizeof(int64_t)) ||
        counts.itemsize != sizeof(int64_t) ||
        counts.format == NULL || strcmp(counts.format, "q") != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "run_passes: counts must be an array('q') of 3 or 4: passes, samples, CPU ns[, main thread passes]");
        goto done;
    }
    loop->count = (int64_t *)counts.buf; /* (held: the array cannot be resized while its buffer is out) */
    loop->main_passes = counts.len == COUNTS * (Py_ssize_t)sizeof(int64_t) ? &loop->count[3] : &loop->uncounted;
    loop->count[2] = loop_cpu_ns(loop);
    if ((loop->none = PyDict_New()) == NULL ||
        (loop->tasks_module = PyUnicode_InternFromString("asyncio.tasks")) == NULL ||
        (loop->current_tasks = PyUnicode_InternFromString("_current_tasks")) == NULL ||
        (loop->exiting_name = PyUnicode_InternFromString("exiting")) == NULL) {
        goto done;
    }
    /* In take_samples' order: threads, active, own, tasks, now, kind, sampled_of, interner, wake. */
    loop->pass_args[0] = PyTuple_GET_ITEM(take_args, 0);
    loop->pass_args[1] = PyTuple_GET_ITEM(take_args, 1);
    loop->pass_args[2] = PyTuple_GET_ITEM(take_args, 2);
    loop->pass_args[5] = PyTuple_GET_ITEM(take_args, 3);
    loop->pass_args[6] = PyTuple_GET_ITEM(take_args, 4);
    loop->pass_args[7] = PyTuple_GET_ITEM(take_args, 5);
    loop->pass_args[8] = PyTuple_GET_ITEM(take_args, 6);
    if (check_pass_args(loop->pass_args) < 0) goto done;
    if ((use_main = off_the_main_thread(loop->loop_ident, &main_native_id)) < 0) goto done;
    loop->main_clock = (clockid_t)((~main_native_id << 3) | 6); /* (CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED) */
    next = monotonic_ns();
    saved = PyEval_SaveThread();
    while (!PyByteArray_AS_STRING(stopping)[0]) {
        int64_t now = monotonic_ns();
        next += interval;
        if (next < now) next = now; /* fell behind (a long pause): skip the missed passes */
        while (now < next && !PyByteArray_AS_STRING(stopping)[0]) {
            int64_t until = next - now > STOP_LATENCY_NS ? now + STOP_LATENCY_NS : next;
            struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* (EINTR: looked at again) */
            now = monotonic_ns();
        }
        if (PyByteArray_AS_STRING(stopping)[0] || __atomic_load_n(&loop->ended, __ATOMIC_ACQUIRE)) break;
        if (use_main && __atomic_load_n(&loop->outstanding, __ATOMIC_ACQUIRE) && !loop->missed &&
            main_thread_ran(loop)) {
            loop->missed = 1; /* it was preempted, say: it runs its call soon, a tick late */
            continue;
        }
        loop->missed = 0;
        if (use_main && !__atomic_load_n(&loop->outstanding, __ATOMIC_ACQUIRE) &&
            !__atomic_exchange_n(&loop->deferred, 0, __ATOMIC_ACQ_REL)) {
            loop->main_cpu = main_cpu_ns(loop);
            __atomic_store_n(&loop->outstanding, 1, __ATOMIC_RELEASE);
            if (Py_AddPendingCall(main_thread_pass, loop) == 0) {
                poke_main_thread(); /* (main_thread_call.c) */
                continue;
            }
            __atomic_store_n(&loop->outstanding, 0, __ATOMIC_RELEASE); /* (the queue is full) */
        }
        /* A full pass here: the main thread has not run the last call (it waits), or deferred work to it. */
            PyEval_RestoreThread(saved);
        loop->stale = __atomic_load_n(&loop->outstanding, __ATOMIC_ACQUIRE);
        failed = loop->in_pass ? 0 : one_pass(loop, NULL);
        saved = PyEval_SaveThread();
        if (failed) break;
    }
    PyEval_RestoreThread(saved);
    if (failed >= 0 && loop->error_type != NULL) { /* the main thread's pass failed: raised here */
        PyErr_Restore(loop->error_type, loop->error_value, loop->error_tb);
        loop->error_type = loop->error_value = loop->error_tb = NULL;
        failed = -1;
    }
    if (failed >= 0) result = Py_NewRef(Py_None);
done:
    if (loop->count != NULL) loop->count[2] = loop_cpu_ns(loop);
    if (counts.buf != NULL) PyBuffer_Release(&counts);
    Py_CLEAR(loop->none);
    Py_CLEAR(loop->tasks_module);
    Py_CLEAR(loop->current_tasks);
    Py_CLEAR(loop->exiting_name);
    if (__atomic_load_n(&loop->outstanding, __ATOMIC_ACQUIRE)) {
        loop->orphaned = 1; /* (the call, queued, frees it: it runs under the GIL, held here) */
        loop->count = NULL;
    } else {
        free_loop(loop);
    }
    return result;
}
