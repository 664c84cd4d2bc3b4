/* The module: its functions, its per-interpreter state, and the types it adds at import. */

#include "speedups.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>

static PyObject *
module_record_labels(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ModuleState *state = PyModule_GetState(module);
    return Py_NewRef(state->labels);
}

/* fd_identity(fd): (st_dev, st_ino) of the descriptor, or None (a number no descriptor has: negative, or past a C
   int; or fstat failed): owned_fds's check of a socket of ours, as its pure-Python twin answers. The interpreter lock
   is held through the fstat (on a socket, a call that does not wait): the delivery threads check their sockets on
   each pass, and a call that let go of the lock handed the interpreter to the program's threads and back each time.
   Retried when a signal interrupts it, as os.fstat is. */
static PyObject *
module_fd_identity(PyObject *module, PyObject *arg)
{
    struct stat status;
    int failed, overflow;
    long fd = PyLong_AsLongAndOverflow(arg, &overflow);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (overflow || fd < 0 || fd > INT_MAX) Py_RETURN_NONE; /* (no descriptor has that number) */
    do {
        failed = fstat((int)fd, &status) != 0;
    } while (failed && errno == EINTR);
    if (failed) Py_RETURN_NONE;
    return Py_BuildValue("(KK)", (unsigned long long)status.st_dev, (unsigned long long)status.st_ino);
}

static PyMethodDef module_methods[] = {
    {"fd_identity", module_fd_identity, METH_O,
     "fd_identity(fd): (st_dev, st_ino) of the descriptor, or None; the interpreter lock held throughout."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop]): what the recorder needs from "
     "the Python side; returns whether the running loop is read from the thread state, without a call."},
    {"running_loop", module_running_loop, METH_NOARGS,
     "running_loop(): this thread's running asyncio loop (or None), as the recorder finds it."},
    {"clock_ns", module_clock_ns, METH_NOARGS, "clock_ns(): the recorder's clock now, in monotonic ns."},
    {"clock_source", module_clock_source, METH_NOARGS,
     "clock_source(): 'tsc' where the recorder reads the TSC (turned into monotonic ns), else 'monotonic'."},
    {"clock_offset", module_clock_offset, METH_NOARGS,
     "clock_offset(): (low, high), the ns between which the recorder's clock less the monotonic clock lies now."},
    {"take_runs", (PyCFunction)(void (*)(void))take_runs, METH_FASTCALL,
     "take_runs(list, count, run_values): the first count values of list in runs, removed from it."},
    {"name_tasks", (PyCFunction)(void (*)(void))name_tasks, METH_FASTCALL,
     "name_tasks(run, task, task_switch, span, instant): a lane's run with its task switches taken out and its spans "
     "and instants named by their tasks (recording/drain.py's _name_tasks); returns the task of the last events."},
    {"record_labels", module_record_labels, METH_NOARGS,
     "record_labels(): the table of labels compact records index (a list, append only; record_runs.RecordRun's)."},
    {"take_samples", (PyCFunction)(void (*)(void))take_samples, METH_FASTCALL,
     "take_samples(threads, active, own, tasks, now, kind, sampled_of, interner, wake): the sampler's pass over the "
     "threads (sampling/thread_pass.py); returns the samples taken and the threads met."},
    {"run_passes", (PyCFunction)(void (*)(void))run_passes, METH_FASTCALL,
     "run_passes(interval_ns, stopping, counts, flusher, take_args, task_names, forget_ended): the sampler's loop "
     "(sampling/thread_pass.py), until stopping[0] is set."},
    {"configure_spans", (PyCFunction)(void (*)(void))configure_spans, METH_FASTCALL,
     "configure_spans(SpanContext, _Active, _ACTIVE, getrandbits): what begin_span() needs from trace_context.py."},
    {"begin_span", (PyCFunction)(void (*)(void))begin_span, METH_FASTCALL,
     "begin_span(parent, args, kind, otel_span): (context, args, token), as trace_context._begin_span returns them."},
    {"configure_open_span", (PyCFunction)(void (*)(void))configure_open_span, METH_FASTCALL,
     "configure_open_span(modules, otel_name, ended_entries, incoming, outgoing, extract, current_span, inject, "
     "ended_elsewhere, open_span): what open_span() and close_span() ask of trace_context.py."},
    {"open_span", (PyCFunction)(void (*)(void))open_span, METH_FASTCALL,
     "open_span(make_scope, label, kind, headers, args): (scope, args, token, context), as trace_context's twin."},
    {"close_span", (PyCFunction)(void (*)(void))close_span, METH_FASTCALL,
     "close_span(scope, token, context, exc_type, exc, tb): the span open_span() began ended, as trace_context's "
     "twin."},
    {"configure_server_spans", (PyCFunction)(void (*)(void))configure_server_spans, METH_FASTCALL,
     "configure_server_spans(new_label, error_text): what the server spans ask of aiohttp_server.py."},
    {"configure_aiohttp_reads", (PyCFunction)(void (*)(void))configure_aiohttp_reads, METH_FASTCALL,
     "configure_aiohttp_reads(properties, attributes): aiohttp's properties a server span reads, and the attribute "
     "each one's getter returns (read in its place)."},
    {"begin_server_span", (PyCFunction)(void (*)(void))begin_server_span, METH_FASTCALL,
     "begin_server_span(spans, request): an aiohttp request's span begun, or None, as aiohttp_server's twin."},
    {"end_server_span", (PyCFunction)(void (*)(void))end_server_span, METH_FASTCALL,
     "end_server_span(spans, span, request, result, exc): the request's span labelled and ended, as "
     "aiohttp_server's twin."},
    {"walk_stack", walk_stack, METH_O,
     "walk_stack(ident): the stack of the thread ident as the sampler reads it, (key, codes) (StackInterner."
     "intern_walk's arguments), or None (no Python frame, or no such thread)."},
    {NULL, NULL, 0, NULL},
};

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ModuleState *state = PyModule_GetState(module);
    Py_VISIT(state->recorder_core_type);
    Py_VISIT(state->scope_type);
    Py_VISIT(state->null_scope_type);
    Py_VISIT(state->message_type);
    Py_VISIT(state->traced_type);
    Py_VISIT(state->keywords_type);
    Py_VISIT(state->record_buffer_type);
    Py_VISIT(state->segment_type);
    Py_VISIT(state->labels);
    Py_VISIT(state->current_tasks);
    Py_VISIT(state->c_task_type);
    Py_VISIT(state->c_task_get_name);
    Py_VISIT(state->label_ids);
    Py_VISIT(state->null_scope);
    Py_VISIT(state->get_running_loop);
    Py_VISIT(state->probe_kept);
    Py_VISIT(state->loop_holder_type);
    Py_VISIT(state->wake);
    Py_VISIT(state->span_kind);
    Py_VISIT(state->instant_kind);
    Py_VISIT(state->span_context_type);
    Py_VISIT(state->active_type);
    Py_VISIT(state->active_var);
    Py_VISIT(state->random_bits);
    Py_VISIT(state->modules);
    Py_VISIT(state->otel_name);
    Py_VISIT(state->ended_entries);
    Py_VISIT(state->incoming);
    Py_VISIT(state->outgoing);
    Py_VISIT(state->extract);
    Py_VISIT(state->current_span);
    Py_VISIT(state->inject);
    Py_VISIT(state->ended_elsewhere);
    Py_VISIT(state->open_span_twin);
    Py_VISIT(state->serving_twin);
    Py_VISIT(state->new_label);
    Py_VISIT(state->error_text);
    for (int i = 0; i < AIOHTTP_READS; i++) {
        Py_VISIT(state->aiohttp_property[i]);
        Py_VISIT(state->aiohttp_attribute[i]);
    }
    return 0;
}

static int
module_clear(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    Py_CLEAR(state->recorder_core_type);
    Py_CLEAR(state->null_scope);
    Py_CLEAR(state->scope_type);
    Py_CLEAR(state->null_scope_type);
    Py_CLEAR(state->message_type);
    Py_CLEAR(state->traced_type);
    Py_CLEAR(state->keywords_type);
    Py_CLEAR(state->record_buffer_type);
    Py_CLEAR(state->segment_type);
    Py_CLEAR(state->labels);
    Py_CLEAR(state->label_ids);
    Py_CLEAR(state->str_thread_records);
    Py_CLEAR(state->get_running_loop);
    Py_CLEAR(state->str_running_loop);
    Py_CLEAR(state->probe_kept);
    Py_CLEAR(state->loop_holder_type);
    Py_CLEAR(state->wake);
    Py_CLEAR(state->current_tasks);
    Py_CLEAR(state->c_task_type);
    Py_CLEAR(state->c_task_get_name);
    Py_CLEAR(state->str_events);
    Py_CLEAR(state->str_lane_events);
    Py_CLEAR(state->span_kind);
    Py_CLEAR(state->instant_kind);
    Py_CLEAR(state->room);
    Py_CLEAR(state->str_thread_events);
    Py_CLEAR(state->str_task_events);
    Py_CLEAR(state->str_exception);
    Py_CLEAR(state->str_name);
    Py_CLEAR(state->str_kind_id);
    Py_CLEAR(state->str_label);
    Py_CLEAR(state->str_not_an_event);
    Py_CLEAR(state->str_on);
    Py_CLEAR(state->str_marker);
    Py_CLEAR(state->str_thread);
    Py_CLEAR(state->str_track);
    Py_CLEAR(state->str_clock);
    Py_CLEAR(state->str_cpu);
    Py_CLEAR(state->str_stack);
    Py_CLEAR(state->str_intern_walk);
    Py_CLEAR(state->str_recording);
    Py_CLEAR(state->str_extend);
    Py_CLEAR(state->empty_name);
    Py_CLEAR(state->str_get_name);
    Py_CLEAR(state->str_c_asyncio);
    Py_CLEAR(state->str_task);
    Py_CLEAR(state->str_as_dict);
    for (int i = 0; i < LANE_NAMES; i++) {
        Py_CLEAR(state->lane_names[i]);
    }
    Py_CLEAR(state->span_context_type);
    Py_CLEAR(state->active_type);
    Py_CLEAR(state->active_var);
    Py_CLEAR(state->random_bits);
    Py_CLEAR(state->str_trace_id);
    Py_CLEAR(state->str_span_id);
    Py_CLEAR(state->str_parent_span_id);
    Py_CLEAR(state->str_kind);
    Py_CLEAR(state->int_64);
    Py_CLEAR(state->int_192);
    Py_CLEAR(state->int_sampled);
    Py_CLEAR(state->modules);
    Py_CLEAR(state->otel_name);
    Py_CLEAR(state->ended_entries);
    Py_CLEAR(state->incoming);
    Py_CLEAR(state->outgoing);
    Py_CLEAR(state->extract);
    Py_CLEAR(state->current_span);
    Py_CLEAR(state->inject);
    Py_CLEAR(state->ended_elsewhere);
    Py_CLEAR(state->open_span_twin);
    Py_CLEAR(state->serving_twin);
    Py_CLEAR(state->new_label);
    Py_CLEAR(state->error_text);
    Py_CLEAR(state->str_path);
    Py_CLEAR(state->str_headers);
    Py_CLEAR(state->str_method);
    Py_CLEAR(state->str_response);
    Py_CLEAR(state->str_route);
    Py_CLEAR(state->str_traceparent);
    Py_CLEAR(state->str_match_info);
    Py_CLEAR(state->str_status);
    Py_CLEAR(state->str_error);
    Py_CLEAR(state->str_get);
    Py_CLEAR(state->str_enter);
    Py_CLEAR(state->str_exit);
    Py_CLEAR(state->str_scope_label);
    Py_CLEAR(state->str_server);
    Py_CLEAR(state->str_traceback);
    Py_CLEAR(state->int_500);
    for (int i = 0; i < AIOHTTP_READS; i++) {
        Py_CLEAR(state->aiohttp_property[i]);
        Py_CLEAR(state->aiohttp_attribute[i]);
    }
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* A type of this module, made from its spec and added to the module; NULL on error. */
static PyTypeObject *
add_type(PyObject *module, PyType_Spec *spec, PyObject *base)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
    if (type == NULL) return NULL;
    if (PyModule_AddType(module, (PyTypeObject *)type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

/* The wire packer's Keywords (a new reference), whose instances instant() makes: its packers know them. The layout
   is keywords.h's, which both were compiled with; checked all the same. NULL with an exception set (ImportError where
   the packer is not built: the recorder is then not used either). */
static PyTypeObject *
packer_keywords_type(void)
{
    PyObject *packer = PyImport_ImportModule("ringtrace.wire._packer"), *type;
    if (packer == NULL) return NULL;
    type = PyObject_GetAttrString(packer, "Keywords");
    Py_DECREF(packer);
    if (type == NULL) return NULL;
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)offsetof(Keywords, values) ||
        ((PyTypeObject *)type)->tp_itemsize != (Py_ssize_t)sizeof(PyObject *)) {
        PyErr_SetString(PyExc_ImportError, "ringtrace.wire._packer.Keywords is not the type the recorder was built for");
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

static int
module_exec(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    recorder_clock_start(&state->clock);
    if ((state->recorder_core_type = add_type(module, &core_spec, NULL)) == NULL ||
        (state->scope_type = add_type(module, &scope_spec, NULL)) == NULL ||
        (state->null_scope_type = add_type(module, &null_scope_spec, NULL)) == NULL ||
        (state->message_type = add_type(module, &message_spec, NULL)) == NULL ||
        (state->traced_type = add_type(module, &traced_spec, NULL)) == NULL ||
        (state->record_buffer_type = add_type(module, &record_buffer_spec, NULL)) == NULL ||
        (state->segment_type = add_type(module, &segment_spec, NULL)) == NULL ||
        (state->keywords_type = packer_keywords_type()) == NULL) {
        return -1;
    }
    state->room = PyTuple_Pack(RECORD_FIELDS, Py_None, Py_None, Py_None, Py_None, Py_None);
    if ((state->null_scope = new_null_scope(state->null_scope_type)) == NULL) return -1;
    state->str_thread_events = PyUnicode_InternFromString("_thread_events");
    state->str_task_events = PyUnicode_InternFromString("_task_events");
    state->str_events = PyUnicode_InternFromString("events");
    state->str_lane_events = PyUnicode_InternFromString("_lane_events");
    state->str_exception = PyUnicode_InternFromString("exception");
    state->str_name = PyUnicode_InternFromString("__name__");
    state->str_kind_id = PyUnicode_InternFromString("_kind_id");
    state->str_label = PyUnicode_InternFromString("_label");
    state->str_not_an_event = PyUnicode_InternFromString("_not_an_event");
    state->str_on = PyUnicode_InternFromString("on");
    state->str_marker = PyUnicode_InternFromString("_marker");
    state->str_running_loop = PyUnicode_InternFromString("__asyncio_running_event_loop__");
    state->probe_kept = PyList_New(0);
    state->labels = PyList_New(0);
    state->label_ids = PyDict_New();
    state->str_thread_records = PyUnicode_InternFromString("_thread_records");
    if (!state->labels || !state->label_ids || !state->str_thread_records) return -1;
    if (!state->str_running_loop || !state->probe_kept) return -1;
    if (!state->room || !state->str_thread_events || !state->str_task_events || !state->str_events || !state->str_lane_events ||
        !state->str_exception ||
        !state->str_name || !state->str_kind_id || !state->str_label || !state->str_not_an_event || !state->str_on ||
        !state->str_marker) {
        return -1;
    }
    state->str_thread = PyUnicode_InternFromString("thread");
    state->str_track = PyUnicode_InternFromString("track");
    state->str_clock = PyUnicode_InternFromString("clock");
    state->str_cpu = PyUnicode_InternFromString("cpu");
    state->str_stack = PyUnicode_InternFromString("stack");
    state->str_recording = PyUnicode_InternFromString("_recording");
    state->str_extend = PyUnicode_InternFromString("extend");
    state->empty_name = PyUnicode_FromStringAndSize("", 0);
    state->str_intern_walk = PyUnicode_InternFromString("intern_walk");
    if (!state->str_thread || !state->str_track || !state->str_clock || !state->str_cpu || !state->str_stack ||
        !state->str_recording || !state->str_extend || !state->empty_name || !state->str_intern_walk) {
        return -1;
    }
    state->str_get_name = PyUnicode_InternFromString("get_name");
    state->str_task = PyUnicode_InternFromString("task");
    state->str_as_dict = PyUnicode_InternFromString("as_dict");
    state->str_c_asyncio = PyUnicode_InternFromString("_asyncio");
    if (!state->str_get_name || !state->str_task || !state->str_as_dict || !state->str_c_asyncio) return -1;
    {
        static const char *const lane_names[LANE_NAMES] = {
            [LANE_LOCK] = "_lock",   [LANE_TRACKS] = "_tracks", [LANE_TAKING] = "taking_lane",
            [LANE_TASK] = "task",    [LANE_BUFFER] = "buffer",  [LANE_LOOP] = "loop",
            [LANE_HAD] = "had",      [LANE_OWNER] = "owner",    [LANE_DONE] = "done",
            [LANE_ACQUIRE] = "acquire", [LANE_RELEASE] = "release",
        };
        for (int i = 0; i < LANE_NAMES; i++) {
            if ((state->lane_names[i] = PyUnicode_InternFromString(lane_names[i])) == NULL) return -1;
        }
    }
    state->str_trace_id = PyUnicode_InternFromString("trace_id");
    state->str_span_id = PyUnicode_InternFromString("span_id");
    state->str_parent_span_id = PyUnicode_InternFromString("parent_span_id");
    state->str_kind = PyUnicode_InternFromString("kind");
    state->int_64 = PyLong_FromLong(64);
    state->int_192 = PyLong_FromLong(192);
    state->int_sampled = PyLong_FromLong(1);
    if (!state->str_trace_id || !state->str_span_id || !state->str_parent_span_id || !state->str_kind ||
        !state->int_64 || !state->int_192 || !state->int_sampled) {
        return -1;
    }
    state->str_path = PyUnicode_InternFromString("path");
    state->str_headers = PyUnicode_InternFromString("headers");
    state->str_method = PyUnicode_InternFromString("method");
    state->str_response = PyUnicode_InternFromString("response");
    state->str_route = PyUnicode_InternFromString("route");
    state->str_traceparent = PyUnicode_InternFromString("traceparent");
    state->str_match_info = PyUnicode_InternFromString("match_info");
    state->str_status = PyUnicode_InternFromString("status");
    state->str_error = PyUnicode_InternFromString("error");
    state->str_get = PyUnicode_InternFromString("get");
    state->str_enter = PyUnicode_InternFromString("__enter__");
    state->str_exit = PyUnicode_InternFromString("__exit__");
    state->str_scope_label = PyUnicode_InternFromString("label");
    state->str_server = PyUnicode_InternFromString("server");
    state->str_traceback = PyUnicode_InternFromString("__traceback__");
    state->int_500 = PyLong_FromLong(500);
    if (!state->str_path || !state->str_headers || !state->str_method || !state->str_response || !state->str_route ||
        !state->str_traceparent || !state->str_match_info || !state->str_status || !state->str_error ||
        !state->str_get || !state->str_enter || !state->str_exit || !state->str_scope_label || !state->str_server ||
        !state->str_traceback || !state->int_500) {
        return -1;
    }
    /* The numbers this module was compiled with, for a test to hold to the Python ones. */
    return add_wire_constants(module);
}

/* Multi-phase initialisation: each interpreter that imports the module runs module_exec() for a module (and types)
   of its own. The recorder relies on the GIL (it does not build where there is none), but not on sharing it. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.client._speedups",
    .m_doc = "The recording hot path, in C (see timelines.py).",
    .m_size = sizeof(ModuleState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
