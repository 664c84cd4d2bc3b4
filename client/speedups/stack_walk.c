/* A thread's Python stack read under the GIL: each frame's code object and instruction offset, innermost first, as
   sampling/stack_capture.py's StackInterner.intern reads them from frame objects (its twin: `frame.f_code`,
   `frame.f_lasti`, `frame.f_back`); the sampler's pass's walk (samples.c), and walk_stack() for the tests.

   Why no frame objects on 3.11: making one allocates, and on 3.11 an allocation may run a garbage collection there
   and then (3.12 runs it later, from the eval loop). The collection's finalisers may let the GIL go (a socket or a
   file closed, any Python code), and the thread being walked then runs on: it returns from the very frame whose
   object was being made, or ends and frees its frame stack, and PyThreadState_GetFrame or PyFrame_GetBack goes on
   with the interpreter frame it had read: a segfault in PyFrame_GetBack, or a stack read from dead frames
   (tests/unit/test_sample_frames.py brings it about). So on 3.11 the walk reads the interpreter frames themselves
   (3.11's layout, as the function tracer's tracer.h mirrors it), leaves out the incomplete ones as CPython's frame
   objects do (_PyFrame_IsIncomplete: pushed, their first RESUME not yet run), and allocates nothing until it has read
   them all, their code objects held. From 3.12 on, where no allocation runs a collection, the public API
   (PyThreadState_GetFrame, PyFrame_GetBack) is safe, and is used. */

#include "speedups.h"

/* Frames read per stack at most (stack_capture.MAX_DEPTH). */
#define WALK_DEPTH 512

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* The head of 3.11's _PyInterpreterFrame (Include/internal/pycore_frame.h), up to its owner. */
typedef struct Frame311 {
    PyObject *f_func, *f_globals, *f_builtins, *f_locals;
    PyCodeObject *f_code;
    PyObject *frame_obj;
    struct Frame311 *previous;
    _Py_CODEUNIT *prev_instr;
    int stacktop;
    char is_entry; /* bool */
    char owner;    /* FRAME_OWNED_BY_GENERATOR: 1 */
} Frame311;

/* The code objects (new references) and byte offsets of `tstate`'s complete frames, innermost first; the count. */
static int
read_frames(PyThreadState *tstate, PyCodeObject **codes, int *offsets)
{
    Frame311 *frame = (Frame311 *)tstate->cframe->current_frame;
    int count = 0;
    for (; frame != NULL && count < WALK_DEPTH; frame = frame->previous) {
        PyCodeObject *code = frame->f_code;
        _Py_CODEUNIT *first = (_Py_CODEUNIT *)code->co_code_adaptive;
        /* _PyFrame_IsIncomplete: not a generator's, and before its first traceable instruction (RESUME). */
        if (frame->owner != 1 && frame->prev_instr < first + code->_co_firsttraceable) continue;
        offsets[count] = (int)(frame->prev_instr - first) * (int)sizeof(_Py_CODEUNIT); /* (frame.f_lasti) */
        codes[count++] = (PyCodeObject *)Py_NewRef(code);
    }
    return count;
}
#else
/* The same through the public API, which skips incomplete frames from 3.12 on: a frame object per frame (made once
   and kept by its frame), each one's back taken from it. -1 with an exception set where one cannot be made. */
static int
read_frames(PyThreadState *tstate, PyCodeObject **codes, int *offsets)
{
    PyFrameObject *frame = PyThreadState_GetFrame(tstate);
    int count = 0;
    while (frame != NULL && count < WALK_DEPTH) {
        PyFrameObject *back = PyFrame_GetBack(frame);
        offsets[count] = PyFrame_GetLasti(frame);
        codes[count++] = PyFrame_GetCode(frame);
        Py_SETREF(frame, back);
    }
    Py_XDECREF(frame);
    if (PyErr_Occurred()) {
        while (count > 0) Py_DECREF(codes[--count]);
        return -1;
    }
    return count;
}
#endif

int
walk_thread(PyThreadState *tstate, PyObject **key, PyObject **codes)
{
    PyCodeObject *read[WALK_DEPTH];
    int offsets[WALK_DEPTH], count, i;
    *key = *codes = NULL;
    if ((count = read_frames(tstate, read, offsets)) < 0) return -1;
    if (count == 0) return 0;
    if ((*key = PyTuple_New(2 * (Py_ssize_t)count)) == NULL || (*codes = PyTuple_New(count)) == NULL) goto fail;
    for (i = 0; i < count; i++) {
        PyObject *id = PyLong_FromVoidPtr(read[i]), *offset = id != NULL ? PyLong_FromLong(offsets[i]) : NULL;
        if (offset == NULL) {
            Py_XDECREF(id);
            goto fail;
        }
        PyTuple_SET_ITEM(*key, 2 * i, id);
        PyTuple_SET_ITEM(*key, 2 * i + 1, offset);
        PyTuple_SET_ITEM(*codes, i, (PyObject *)read[i]); /* (the reference read took) */
        read[i] = NULL;
    }
    return 1;
fail:
    for (i = 0; i < count; i++) Py_XDECREF(read[i]);
    Py_CLEAR(*key);
    Py_CLEAR(*codes);
    return -1;
}

PyThreadState *
thread_state_of(PyInterpreterState *interp, unsigned long ident)
{
    PyThreadState *t;
    for (t = PyInterpreterState_ThreadHead(interp); t != NULL; t = PyThreadState_Next(t)) {
        if (t->thread_id == ident) return t;
    }
    return NULL;
}

/* walk_stack(ident) -> (key, codes) | None: the stack of the thread `ident` as the sampler's pass reads it (see
   walk_thread); None where it has no Python frame, or no such thread runs. */
PyObject *
walk_stack(PyObject *module, PyObject *arg)
{
    unsigned long ident = PyLong_AsUnsignedLong(arg);
    PyThreadState *tstate;
    PyObject *key, *codes;
    int found;
    if (ident == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    tstate = thread_state_of(PyThreadState_GetInterpreter(PyThreadState_Get()), ident);
    if (tstate == NULL) Py_RETURN_NONE;
    if ((found = walk_thread(tstate, &key, &codes)) < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    return Py_BuildValue("(NN)", key, codes);
}
