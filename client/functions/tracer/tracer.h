/* The function tracer in C (ringtrace.client._functions.Tracer): what the files of this extension share.

Optional: when it is not built (no compiler at install time, an unsupported platform) or RINGTRACE_PURE_PYTHON=1 is
set, ringtrace runs the Python twin (client/functions/python_tracer.py), which writes the same records.

What it does, and why it is safe to do it this way:

- How calls are seen: Python functions' through the frame evaluation hook (PEP 523, evalframe.c), which costs a
  fraction of what sys.monitoring's callbacks or the profile function do (a frame object, two calls into Python-level
  callbacks, exception state saved and restored). C functions' (builtins=True) through sys.monitoring's CALL,
  C_RETURN and C_RAISE on 3.12+ (monitoring.c), and on 3.11 through the profile function, which then sees Python
  functions' calls too (profile.c; the hook is not set).
- A traced call is written when it ends, as one 24-byte record (wire/call_records.py: start ns, end ns, location
  index, kind) straight into its thread's buffer: no Python object per call. A thread's open calls are a stack of
  (start, key, location) entries in C memory; the key (the code object, or the C callable) is only compared, never
  dereferenced, so no frame or code object is kept alive by it.
- Where a code object is recorded is decided once per tracer: the decide callable's answer and the location index
  are kept in the code object's co_extra slot as one word, tagged with the tracer's generation (a tracer started
  later asks again). No dict lookup on the hot path.
- A thread finds its buffer through a one-entry cache keyed by its pthread_t; on a miss, through a capsule kept in
  the thread state dict, whose destructor (run when the thread state is cleared, as the thread ends) marks the buffer
  ended and empties the cache, so that a thread started later with the same pthread_t never finds it.
- asyncio: the first call of recorded coroutine code while no task's step is open on the thread (evalframe.c; on 3.11
  with C functions, profile.c) looks the running task up, once a step (threads.c: in C, asyncio's running loop and
  its task, while asyncio.tasks.current_task is asyncio's own; else asyncio_watch.current_task()): a task notes a
  switch (threads.c: the number of the thread's next record, and the task), and the end of that call another (no
  task). drain_cuts() tells where each thread's records switch, as the Python twin's does. No other call looks up
  anything: a call ends within the step it began in, so a record is the step's task's iff written while it is open.
- Greenlets: each has open calls of its own, put in place of the thread's as the program switches to it
  (greenlets.c, told by client/functions/greenlet_switches.py), and its records go on a lane of its own, noted as a
  task's step is. The hooks see nothing of it: the eval hook's locals live on the greenlet's own C stack.
- Only one tracer runs at a time (rt_running, which holds a reference to it until stop()).
- Calls already running at start() left no entry: their ends find the thread's stack empty and are ignored, as are
  the ends of code not recorded. An end whose key is not on top of the stack (a missed event) closes the calls above
  its entry, or is ignored when its key is not open at all.
- Everything runs with the GIL held. Python code the tracer calls (decide, wake, allocations that collect garbage)
  may let other threads run, so no pointer into shared state is held across such a call but a thread's own buffer.
  That code may also stop the tracer and drop its last reference (3.12+ sys.monitoring holds none to a callback while
  it runs, nor the frame evaluation hook): a hook holds a reference to the tracer across decide, and calls wake last.
  While it runs decide or wake, a thread is busy: the calls they make are not recorded (the interpreter does not
  report them to its own hooks' callbacks either).
- Timestamps handed over are CLOCK_MONOTONIC in ns, which is what time.monotonic_ns() reads on the platforms this
  builds on; records hold ticks until drain() turns them into ns (clock.c).

The files, one job each: threads.c (a thread's buffer and stack: find, push, pop, write, close, drain), locations.c
(a code object's or C callable's location index, decide), clock.c (ticks and ns), evalframe.c (the frame evaluation
hook), monitoring.c (3.12+: the hooks' start and stop, C functions through sys.monitoring), profile.c (3.11: the same
through the profile function), greenlets.c (greenlets' open calls, swapped), module.c (the Tracer type and the
module). */

#ifndef RINGTRACE_FUNCTIONS_TRACER_H
#define RINGTRACE_FUNCTIONS_TRACER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#if defined(_WIN32) || defined(__APPLE__) || defined(__hpux)
#error "time.monotonic_ns() is not CLOCK_MONOTONIC here; ringtrace uses its Python function tracer"
#endif
#ifdef Py_GIL_DISABLED
#error "the function tracer relies on the GIL; ringtrace uses its Python function tracer on free-threaded builds"
#endif
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "call records are little endian and written as they are in memory; ringtrace uses its Python function tracer"
#endif
#if PY_VERSION_HEX < 0x030B0000
#error "the function tracer needs Python 3.11 or later"
#endif

#define RT_MONITORING (PY_VERSION_HEX >= 0x030C0000) /* sys.monitoring (3.12+); else the profile function (3.11) */

/* RT_TSC: records hold the TSC where the kernel's clocksource is the TSC (clock.c) */
#include "tsc_clock.h"

/* What the files share stays inside the extension (PyInit__functions is exported by PyMODINIT_FUNC): the hot path
   reads its globals and calls its functions directly, not through the symbol tables a shared library exports. */
#pragma GCC visibility push(hidden)

/* The head of CPython's _PyInterpreterFrame (Include/internal/pycore_frame.h), up to its owner
   (FRAME_OWNED_BY_THREAD: 0, FRAME_OWNED_BY_GENERATOR: 1). */
#if PY_VERSION_HEX < 0x030C0000
typedef struct {
    PyObject *f_func, *f_globals, *f_builtins, *f_locals;
    PyCodeObject *f_code;
    PyObject *frame_obj;
    void *previous, *prev_instr;
    int stacktop;
    char is_entry; /* bool */
    char owner;
} RtFrame;
#define FRAME_CODE(frame) ((frame)->f_code)
#elif PY_VERSION_HEX < 0x030D0000
typedef struct {
    PyCodeObject *f_code;
    void *previous;
    PyObject *f_funcobj, *f_globals, *f_builtins, *f_locals, *frame_obj;
    void *prev_instr;
    int stacktop;
    uint16_t return_offset;
    char owner;
} RtFrame;
#define FRAME_CODE(frame) ((frame)->f_code)
#elif PY_VERSION_HEX < 0x030E0000
typedef struct {
    PyObject *f_executable; /* the code object, or something else for frames that run no code of their own */
    void *previous;
    PyObject *f_funcobj, *f_globals, *f_builtins, *f_locals, *frame_obj;
    void *instr_ptr;
    int stacktop;
    uint16_t return_offset;
    char owner;
} RtFrame;
#define FRAME_CODE(frame) (PyCode_Check((frame)->f_executable) ? (PyCodeObject *)(frame)->f_executable : NULL)
#else
#error "the function tracer knows CPython 3.11 to 3.13's frames"
#endif

#if PY_VERSION_HEX < 0x030C0000
/* 3.11's frame object (Include/internal/pycore_frame.h), up to its interpreter frame: what the profile function is
   given, its code read without PyFrame_GetCode's call and reference. */
typedef struct {
    PyObject_HEAD
    PyFrameObject *f_back;
    RtFrame *f_frame;
} RtFrameObject;
#define FRAME_OBJECT_CODE(frame) ((PyObject *)((RtFrameObject *)(frame))->f_frame->f_code)
#endif

/* wire/model.py: CALL and CALL_RAISED; wire/call_records.py: RECORD. */
#define RT_CALL 11u
#define RT_CALL_RAISED 12u
#define RT_RECORD_SIZE 24
#define RT_DEFAULT_BUFFER_BYTES (16 * 1024 * 1024)

/* One open call on a thread's stack. */
typedef struct {
    int64_t start;    /* ticks (clock.c); unused when !record */
    const void *key;  /* the code object (Python) or the callable (C): compared, never dereferenced */
    const void *from; /* profile.c: the frame object of a Python call, or the one a C call was made from, else NULL:
                         compared only */
    uint32_t loc;     /* location index */
    uint32_t record;  /* 0: deeper than max_depth, no record at its end */
} OpenCall;

typedef struct Tracer Tracer;

/* An asyncio task switch on a thread: from the record numbered seq (of all the thread wrote), the records are the
   task's (a strong reference) or, NULL, of no task (threads.c: rt_task_step_begin). */
typedef struct {
    uint64_t seq;
    PyObject *task;
} TaskNote;

/* A thread's records and open calls. Owned by the tracer's list and, while the thread lives, by the capsule in its
   thread state dict: freed when both let go (refs). */
typedef struct ThreadBuf {
    struct ThreadBuf *next;
    Tracer *tracer;           /* NULL once the tracer is gone */
    pthread_t thread;         /* compared only */
    unsigned long ident;      /* threading.get_ident() of the thread */
    char *data;               /* records; NULL: every call is dropped */
    Py_ssize_t used;          /* bytes of records in data */
    Py_ssize_t room;          /* the most `used` may be for one more record: buffer_bytes less one, -1 without data */
    Py_ssize_t wake_at;       /* a record that takes `used` past it calls wake: a quarter of the buffer, or
                                 PY_SSIZE_T_MAX once wake was called, until the next drain */
    OpenCall *stack;
    Py_ssize_t depth, capacity;
    Py_ssize_t lost;          /* open calls that found no room on the stack (memory): their ends are dropped */
    int busy;                 /* the tracer runs Python code on this thread (decide, wake): the frame evaluation
                                 hook (3.11) lets its calls be, as the interpreter does for the other hooks */
    int ended;                /* the thread state was cleared: drained once more, then forgotten */
    int refs;
    uint64_t tstate_id;       /* the id of the thread state whose dict holds its capsule */
    int in_task;              /* a step of an asyncio task is open (a recorded coroutine began it) */
    Py_ssize_t step_depth;    /* profile.c: the depth of the call that began it */
    uint64_t drained_records; /* records drained so far: the seq of the first in data */
    TaskNote *notes;          /* task switches not drained yet, in order */
    Py_ssize_t n_notes, notes_capacity;
    PyObject *lane_task;      /* the task (a strong reference, NULL: none) of the records drained last */
    PyObject *step_task;      /* the task of the step open (in_task), a strong reference */
    PyObject *base;           /* whose the records are outside a task's step: the running greenlet's lane (greenlets.c),
                                 a strong reference; NULL: the thread's (its main greenlet, or none) */
} ThreadBuf;

/* The location of a C callable, by its method definition and the type it is bound to (see locations.c). */
typedef struct {
    const void *method;
    PyObject *type; /* a strong reference (NULL: a module's function), so that its address names it for good */
    uint32_t loc;
} CFunctionLocation;

struct Tracer {
    PyObject_HEAD
    /* What every traced call reads (and writes: recorded), together: two cache lines, not spread over four. */
    pthread_t cache_thread;
    ThreadBuf *cache_buf;
    uint32_t generation;    /* tags the co_extra words this tracer wrote */
    int running;
    int builtins;
    int wake_due;           /* a buffer passed a quarter full: wake is called as the hook that wrote it returns */
    Py_ssize_t depth_limit; /* max_depth, or PY_SSIZE_T_MAX for none */
    int64_t min_duration_ticks;
    CFunctionLocation *c_locations;
    size_t c_capacity, c_count; /* open addressing, capacity a power of two */
    uint64_t dropped, recorded;
    /* The rest. */
    PyObject *decide, *locations, *wake;
    PyObject *current_task; /* asyncio's running task, or None (asyncio_watch.current_task; NULL: not looked up) */
    PyObject *indexes;      /* dict: a location (name, file, line) -> its index in locations (a Python int) */
    PyObject *thread_key;   /* the key of this tracer's capsules in thread state dicts */
    PyObject *callbacks;    /* 3.12+: the sys.monitoring callbacks while running (a tuple), else NULL */
    PyObject *weakrefs;
    int64_t min_duration_ns;
    int64_t anchor_ticks, anchor_ns; /* clock.c: where the line from ticks to ns goes through */
    double ns_per_tick;
    Py_ssize_t max_depth;   /* 0: no limit */
    Py_ssize_t buffer_bytes; /* a whole number of records */
    int draining;           /* drain() runs (threads.c) */
    int tool_id;            /* 3.12+: the sys.monitoring tool id while running, else -1 */
    ThreadBuf *threads;
};

/* The tracer that runs (at most one); set by start(), cleared by stop(). */
extern Tracer *rt_running;
extern Py_ssize_t rt_code_extra_index;

static inline int64_t
rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if RT_TSC
extern int rt_use_tsc;
#endif

/* A record's timestamp as written: see clock.c. */
static inline int64_t
rt_ticks(void)
{
#if RT_TSC
    if (rt_use_tsc) {
        return (int64_t)__rdtsc();
    }
#endif
    return rt_now_ns();
}

/* clock.c */
void rt_clock_init(void);
void rt_clock_start(Tracer *self);
void rt_clock_line(Tracer *self, int64_t *ticks, int64_t *ns, double *ns_per_tick);
void rt_ticks_to_ns(char *records, Py_ssize_t size, int64_t ticks, int64_t ns, double ns_per_tick);


/* threads.c */
ThreadBuf *rt_thread_slow(Tracer *self, pthread_t thread);
int rt_call_wake(Tracer *self, ThreadBuf *t, int pass_on);
int rt_unraisable(PyObject *where);
int rt_failed(PyObject *where, int pass_on);
void rt_pass_on(PyObject *saved_type, PyObject *saved_value, PyObject *saved_tb);
int rt_grow_stack(ThreadBuf *t);
int rt_close_above(Tracer *self, ThreadBuf *t, const void *key);
void rt_close_open_calls(Tracer *self);
void rt_reset_stacks(Tracer *self);
PyObject *rt_drain(Tracer *self, int with_cuts);
int rt_task_step_begin(Tracer *self, ThreadBuf *t);
void rt_task_step_end(ThreadBuf *t);
void rt_forget_threads(Tracer *self);
void rt_thread_release(ThreadBuf *t);
int rt_add_note(ThreadBuf *t, PyObject *task);

/* greenlets.c: the open calls of greenlets, swapped as the program switches (greenlet_switches.py) */
PyObject *rt_switch_calls(Tracer *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *rt_close_calls(Tracer *self, PyObject *const *args, Py_ssize_t nargs);

/* This thread's buffer (NULL: none could be made, the call is dropped and counted). The cache is keyed by the
   thread, not its thread state (no thread-local read through the interpreter's library): a thread's buffer is
   forgotten (cache emptied) when its thread state is cleared, before another thread can have its pthread_t. */
static inline ThreadBuf *
rt_thread(Tracer *self)
{
    pthread_t thread = pthread_self();
    if (self->cache_buf != NULL && pthread_equal(thread, self->cache_thread)) {
        return self->cache_buf;
    }
    return rt_thread_slow(self, thread);
}

/* The hot path: a call's record, and a thread's stack of open calls. */

static inline void
rt_write_record(Tracer *self, ThreadBuf *t, int64_t start, int64_t end, uint32_t loc, uint32_t kind)
{
    if (t->used > t->room) {
        self->dropped++;
        return;
    }
    char *p = t->data + t->used;
    uint64_t loc_kind = (uint64_t)loc | (uint64_t)kind << 32; /* little endian: loc, then kind */
    memcpy(p, &start, 8);
    memcpy(p + 8, &end, 8);
    memcpy(p + 16, &loc_kind, 8);
    t->used += RT_RECORD_SIZE;
    self->recorded++;
    if (t->used > t->wake_at) { /* a quarter: room for a flusher scheduled late */
        t->wake_at = PY_SSIZE_T_MAX;
        self->wake_due = 1; /* called last (rt_wake_if_due): wake may stop the tracer and let it go */
    }
}

/* Calls wake if a record was due to: the last thing a hook does, as wake may stop the tracer and drop its last
   reference (after it, neither self nor t is used). 1 (pass_on only): a signal handler raised the exception now set
   while wake ran, the program's. */
static inline int
rt_wake_if_due(Tracer *self, ThreadBuf *t, int pass_on)
{
    return self->wake_due ? rt_call_wake(self, t, pass_on) : 0;
}

static inline void
rt_push_from(Tracer *self, ThreadBuf *t, const void *key, uint32_t loc, const void *from)
{
    if (t->lost || (t->depth == t->capacity && rt_grow_stack(t) < 0)) {
        t->lost++;
        return;
    }
    OpenCall *call = &t->stack[t->depth++];
    call->key = key;
    call->from = from;
    call->loc = loc;
    call->record = t->depth <= self->depth_limit;
    call->start = call->record ? rt_ticks() : 0;
}

static inline void
rt_push(Tracer *self, ThreadBuf *t, const void *key, uint32_t loc)
{
    rt_push_from(self, t, key, loc, NULL);
}

/* The open call on top ends at `end` as `kind`. */
static inline void
rt_end_top(Tracer *self, ThreadBuf *t, int64_t end, uint32_t kind)
{
    OpenCall *call = &t->stack[--t->depth];
    if (call->record && end - call->start >= self->min_duration_ticks) {
        rt_write_record(self, t, call->start, end, call->loc, kind);
    }
}

static inline void
rt_pop(Tracer *self, ThreadBuf *t, const void *key, uint32_t kind)
{
    if (t->lost) {
        t->lost--;
        self->dropped++;
        return;
    }
    if (t->depth == 0) {
        return; /* a call begun before start() */
    }
    if (t->stack[t->depth - 1].key != key && !rt_close_above(self, t, key)) {
        return;
    }
    rt_end_top(self, t, t->stack[t->depth - 1].record ? rt_ticks() : 0, kind);
}

/* locations.c */
/* 1: recorded (*loc set), 0: not; -1 (pass_on only): a signal handler raised the exception now set while decide ran,
   the program's. */
int rt_code_location_first(Tracer *self, PyObject *code, PyObject *globals, uint32_t *loc, int pass_on);
int rt_c_location_first(Tracer *self, PyObject *callable, const void *method, PyObject *type, uint32_t *loc);
void rt_clear_c_locations(Tracer *self);
int rt_index_locations(Tracer *self); /* `indexes` from the locations already listed */

/* CPython's _PyCodeObjectExtra (Include/internal/pycore_code.h), what a code object's co_extra points to. */
typedef struct {
    Py_ssize_t ce_size;
    void *ce_extras[1];
} RtCodeExtra;

/* Whether the code object is recorded (1, *loc set), not (0), or not yet decided by this tracer (-1). */
static inline int
rt_code_decided(Tracer *self, PyObject *code, uint32_t *loc)
{
    /* PyUnstable_Code_GetExtra without the call: co_extra is CPython's _PyCodeObjectExtra (3.11 to 3.13) */
    const RtCodeExtra *extras = (const RtCodeExtra *)((PyCodeObject *)code)->co_extra;
    if (extras == NULL || extras->ce_size <= rt_code_extra_index) {
        return -1;
    }
    uint64_t word = (uint64_t)(uintptr_t)extras->ce_extras[rt_code_extra_index];
    if ((uint32_t)(word >> 32) != self->generation) {
        return -1;
    }
    uint32_t low = (uint32_t)word;
    if (low == 0) {
        return 0;
    }
    *loc = low - 1;
    return 1;
}

/* Whether the code object is recorded (1, *loc set) or not (0), deciding it when first met (its module: the current
   frame's). */
static inline int
rt_code_location(Tracer *self, PyObject *code, uint32_t *loc)
{
    int decided = rt_code_decided(self, code, loc);
    return decided >= 0 ? decided : rt_code_location_first(self, code, NULL, loc, 0);
}

/* Whether the callable is a builtin function or method (PyCFunction_Check, without its call for the two exact types). */
static inline int
rt_is_c_function_object(PyObject *callable)
{
    PyTypeObject *type = Py_TYPE(callable);
    return type == &PyCFunction_Type || type == &PyCMethod_Type || PyType_IsSubtype(type, &PyCFunction_Type);
}

/* A C function, as builtins=True records: a builtin function or method, or a method descriptor (list.append); not
   one of the tracer's own methods. */
static inline int
rt_is_c_function(Tracer *self, PyObject *callable)
{
    if (rt_is_c_function_object(callable)) { /* the tracer's own methods (stop() ends inside itself) are never calls */
        return PyCFunction_GET_SELF(callable) != (PyObject *)self;
    }
    return Py_IS_TYPE(callable, &PyMethodDescr_Type) && PyDescr_TYPE(callable) != Py_TYPE(self);
}

/* A C callable's location key (rt_is_c_function's callables): its method definition, and the type it is bound to as
   its __qualname__ names it (the bound type, or an instance's type; a module's type for a module's function, whose
   name names no type). Keys that name the same function share its location (interned by value). */
static inline const void *
rt_c_function_key(PyObject *callable, PyObject **type)
{
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type)) {
        *type = (PyObject *)PyDescr_TYPE(callable);
        return ((PyMethodDescrObject *)callable)->d_method;
    }
    PyObject *bound = PyCFunction_GET_SELF(callable);
    *type = bound == NULL || PyType_Check(bound) ? bound : (PyObject *)Py_TYPE(bound);
    return ((PyCFunctionObject *)callable)->m_ml;
}

static inline size_t
rt_c_slot(const void *method, PyObject *type, size_t mask)
{
    uint64_t h = ((uint64_t)(uintptr_t)method >> 4) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uintptr_t)type >> 4);
    return (size_t)(h ^ (h >> 29)) & mask;
}

/* Whether the C callable's location index is in the tracer's table (1, *loc set) or not yet (0). */
static inline int
rt_c_location_known(Tracer *self, const void *method, PyObject *type, uint32_t *loc)
{
    if (self->c_capacity == 0) {
        return 0;
    }
    size_t mask = self->c_capacity - 1;
    for (size_t i = rt_c_slot(method, type, mask);; i = (i + 1) & mask) {
        const CFunctionLocation *entry = &self->c_locations[i];
        if (entry->method == method && entry->type == type) {
            *loc = entry->loc;
            return 1;
        }
        if (entry->method == NULL) {
            return 0;
        }
    }
}

/* A C callable's location index (*loc), found in the tracer's table, or made the first time (1); 0: none could be
   made (reported), the call not recorded. */
static inline int
rt_c_location(Tracer *self, PyObject *callable, uint32_t *loc)
{
    PyObject *type;
    const void *method = rt_c_function_key(callable, &type);
    return rt_c_location_known(self, method, type, loc) ||
           rt_c_location_first(self, callable, method, type, loc);
}

/* monitoring.c / profile.c: the interpreter's side of start() and stop(). */
int rt_hooks_start(Tracer *self);
int rt_hooks_stop(Tracer *self);
/* evalframe.c (without C functions) */
int rt_eval_hook_start(Tracer *self);
void rt_eval_hook_stop(Tracer *self);
/* evalframe.c: whether a SystemExit of this code (NULL: none given) ends the program cleanly (None or 0). */
int rt_clean_exit_code(PyObject *code);

#pragma GCC visibility pop

#endif
