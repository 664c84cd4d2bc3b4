/* The lanes of a process's traces, in C: trace_lanes.py's TraceLanes (the pure-Python twin, which defines the
behaviour: the tests hold both to the same lanes and the same traces forgotten), with what it remembers of each span
kept in C arrays and tables rather than as Python tuples and dicts, which cost both the placing and the garbage
collector's passes over up to MAX_KEPT_SPANS of them.

A span's ids and times are unsigned 64-bit integers, as OTLP's are (a span id, a parent id of 0 for a root, times in
ns); its trace id is any bytes (a key, and the first 4 bytes named in hex). The lanes' keys are objects of the class
given at construction, called with a lane's name (TraceLane): the tracks of the process's stream are kept by them.

Optional: when this module is not built, or RINGTRACE_PURE_PYTHON=1 is set, the collector places spans in Python. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "structmember.h"

/* As trace_lanes.py's: parents followed up from a span, at most. */
#define MAX_DEPTH 256

/* A span on a lane, kept sorted by (end, start, span id, parent id) as the twin's tuples are. */
typedef struct {
    uint64_t end, start, span_id, parent_id;
} Placed;

typedef struct {
    Placed *spans;
    Py_ssize_t count, capacity;
} Lane;

/* An open-addressed table of 64-bit keys: a span's (lane, parent), or the lane of a parent's first child. */
typedef struct {
    uint64_t key, parent;
    Py_ssize_t lane;
    int used;
} Entry;

typedef struct {
    Entry *entries;
    size_t capacity, count; /* capacity: a power of two, or 0 */
} Table;

typedef struct Trace {
    PyObject *trace_id; /* bytes: its key in the traces dict */
    char short_id[9];   /* the trace id's first 8 hex digits (fewer if it is shorter) */
    Py_ssize_t size;    /* spans on its lanes */
    Lane *lanes;
    PyObject **keys; /* a lane's key (its TraceLane) */
    Py_ssize_t lane_count, lane_capacity;
    Table placed;     /* span id -> its lane, its parent */
    Table child_lane; /* parent id -> the lane its first child placed went on */
    struct Trace *newer, *older;
} Trace;

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_lanes;
    Py_ssize_t max_kept_spans;
    Py_ssize_t live;
    Py_ssize_t spans;
    PyObject *traces;  /* dict: trace id -> the Trace's address (an int) */
    Trace *oldest, *newest;
    PyObject *retired; /* list of the lanes' keys of the traces forgotten, until taken */
    PyObject *lane_type;
} Lanes;

static uint64_t
mixed(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
}

static Entry *
table_find(const Table *table, uint64_t key)
{
    if (table->capacity == 0) return NULL;
    size_t mask = table->capacity - 1;
    for (size_t at = (size_t)mixed(key) & mask;; at = (at + 1) & mask) {
        Entry *entry = &table->entries[at];
        if (!entry->used) return NULL;
        if (entry->key == key) return entry;
    }
}

/* The entry of `key`, made (unused fields zero, `*made` set) if new; NULL with MemoryError set. */
static Entry *
table_entry(Table *table, uint64_t key, int *made)
{
    *made = 0;
    if ((table->count + 1) * 2 > table->capacity) {
        size_t capacity = table->capacity ? table->capacity * 2 : 16;
        Entry *entries = PyMem_Calloc(capacity, sizeof(Entry));
        if (entries == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (size_t i = 0; i < table->capacity; i++) {
            Entry *old = &table->entries[i];
            if (!old->used) continue;
            size_t at = (size_t)mixed(old->key) & (capacity - 1);
            while (entries[at].used) at = (at + 1) & (capacity - 1);
            entries[at] = *old;
        }
        PyMem_Free(table->entries);
        table->entries = entries;
        table->capacity = capacity;
    }
    size_t mask = table->capacity - 1;
    size_t at = (size_t)mixed(key) & mask;
    while (table->entries[at].used && table->entries[at].key != key) at = (at + 1) & mask;
    Entry *entry = &table->entries[at];
    if (!entry->used) {
        entry->used = 1;
        entry->key = key;
        table->count++;
        *made = 1;
    }
    return entry;
}

static void
trace_free(Trace *trace)
{
    for (Py_ssize_t i = 0; i < trace->lane_count; i++) {
        PyMem_Free(trace->lanes[i].spans);
        Py_XDECREF(trace->keys[i]);
    }
    PyMem_Free(trace->lanes);
    PyMem_Free(trace->keys);
    PyMem_Free(trace->placed.entries);
    PyMem_Free(trace->child_lane.entries);
    Py_XDECREF(trace->trace_id);
    PyMem_Free(trace);
}

/* Whether a span whose parent is `parent_id` descends from `ancestor_id`, by the parents placed. */
static int
descends(const Trace *trace, uint64_t parent_id, uint64_t ancestor_id)
{
    for (int depth = 0; depth < MAX_DEPTH; depth++) {
        if (parent_id == ancestor_id) return 1;
        const Entry *placed = table_find(&trace->placed, parent_id);
        if (placed == NULL) return 0;
        parent_id = placed->parent;
    }
    return 0;
}

/* Whether the span nests truthfully among the spans of `lane` (trace_lanes.py's _nests). */
static int
nests(const Trace *trace, const Lane *lane, const Placed *span)
{
    Py_ssize_t low = 0, high = lane->count;
    while (low < high) { /* the first that ends at or after the span's start (those before cannot meet it) */
        Py_ssize_t middle = low + (high - low) / 2;
        if (lane->spans[middle].end < span->start)
            low = middle + 1;
        else
            high = middle;
    }
    int held = 0;
    uint64_t holder = 0, holder_start = 0;
    for (Py_ssize_t i = low; i < lane->count; i++) {
        const Placed *placed = &lane->spans[i];
        if (placed->start > span->end) continue;
        if (span->start < placed->start && placed->end < span->end) {
            if (!descends(trace, placed->parent_id, span->span_id)) return 0;
        } else if (placed->start < span->start && span->end < placed->end) {
            if (!held || placed->start > holder_start) { /* the innermost holding it starts last */
                held = 1;
                holder = placed->span_id;
                holder_start = placed->start;
            }
        } else { /* the two cross, or share an end */
            return 0;
        }
    }
    return !held || descends(trace, span->parent_id, holder);
}

/* The first lane of its parent's, a sibling's, a child's and the trace's where the span nests; lane_count if none. */
static Py_ssize_t
lane_for(const Trace *trace, const Placed *span)
{
    Py_ssize_t tried[3], count = 0;
    const Entry *entries[3] = {
        table_find(&trace->placed, span->parent_id),
        table_find(&trace->child_lane, span->parent_id),
        table_find(&trace->child_lane, span->span_id),
    };
    for (int i = 0; i < 3; i++) {
        if (entries[i] == NULL) continue;
        Py_ssize_t index = entries[i]->lane;
        if (count && tried[count - 1] == index) continue;
        if (nests(trace, &trace->lanes[index], span)) return index;
        tried[count++] = index;
    }
    for (Py_ssize_t index = 0; index < trace->lane_count; index++) {
        int seen = 0; /* (one that did not nest does not now: the same answer, without checking it again) */
        for (Py_ssize_t i = 0; i < count; i++) seen |= tried[i] == index;
        if (!seen && nests(trace, &trace->lanes[index], span)) return index;
    }
    return trace->lane_count;
}

static int
placed_before(const Placed *a, const Placed *b)
{
    if (a->end != b->end) return a->end < b->end;
    if (a->start != b->start) return a->start < b->start;
    if (a->span_id != b->span_id) return a->span_id < b->span_id;
    return a->parent_id < b->parent_id;
}

/* The span into its place in the lane's order (after any equal to it); -1 with MemoryError set. */
static int
lane_insert(Lane *lane, const Placed *span)
{
    if (lane->count == lane->capacity) {
        Py_ssize_t capacity = lane->capacity ? lane->capacity * 2 : 8;
        Placed *spans = PyMem_Realloc(lane->spans, (size_t)capacity * sizeof(Placed));
        if (spans == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        lane->spans = spans;
        lane->capacity = capacity;
    }
    Py_ssize_t low = 0, high = lane->count;
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (placed_before(span, &lane->spans[middle]))
            high = middle;
        else
            low = middle + 1;
    }
    memmove(&lane->spans[low + 1], &lane->spans[low], (size_t)(lane->count - low) * sizeof(Placed));
    lane->spans[low] = *span;
    lane->count++;
    return 0;
}

/* A new lane for the trace, its key made of its name; -1 with an error set. */
static int
add_lane(Lanes *self, Trace *trace)
{
    if (trace->lane_count == trace->lane_capacity) {
        Py_ssize_t capacity = trace->lane_capacity ? trace->lane_capacity * 2 : 2;
        Lane *lanes = PyMem_Realloc(trace->lanes, (size_t)capacity * sizeof(Lane));
        if (lanes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        trace->lanes = lanes;
        PyObject **keys = PyMem_Realloc(trace->keys, (size_t)capacity * sizeof(PyObject *));
        if (keys == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        trace->keys = keys;
        trace->lane_capacity = capacity;
    }
    Py_ssize_t index = trace->lane_count;
    PyObject *name = index ? PyUnicode_FromFormat("trace %s #%zd", trace->short_id, index + 1)
                           : PyUnicode_FromFormat("trace %s", trace->short_id);
    if (name == NULL) return -1;
    PyObject *key = PyObject_CallOneArg(self->lane_type, name);
    Py_DECREF(name);
    if (key == NULL) return -1;
    trace->lanes[index] = (Lane){NULL, 0, 0};
    trace->keys[index] = key;
    trace->lane_count++;
    self->live++;
    return 0;
}

/* The trace of `trace_id`, the most recently placed now (made if new); NULL with an error set. */
static Trace *
trace_of(Lanes *self, PyObject *trace_id)
{
    PyObject *address = PyDict_GetItemWithError(self->traces, trace_id);
    Trace *trace;
    if (address != NULL) {
        trace = PyLong_AsVoidPtr(address);
        if (trace == NULL) return NULL;
        if (trace != self->newest) { /* to the end of the order */
            if (trace->older != NULL) trace->older->newer = trace->newer;
            else self->oldest = trace->newer;
            trace->newer->older = trace->older;
            trace->older = self->newest;
            trace->newer = NULL;
            self->newest->newer = trace;
            self->newest = trace;
        }
        return trace;
    }
    if (PyErr_Occurred()) return NULL;
    if ((trace = PyMem_Calloc(1, sizeof(Trace))) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    static const char digits[] = "0123456789abcdef";
    const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(trace_id);
    Py_ssize_t shown = PyBytes_GET_SIZE(trace_id) < 4 ? PyBytes_GET_SIZE(trace_id) : 4;
    for (Py_ssize_t i = 0; i < shown; i++) {
        trace->short_id[2 * i] = digits[bytes[i] >> 4];
        trace->short_id[2 * i + 1] = digits[bytes[i] & 15];
    }
    trace->trace_id = Py_NewRef(trace_id);
    address = PyLong_FromVoidPtr(trace);
    if (address == NULL || PyDict_SetItem(self->traces, trace_id, address) < 0) {
        Py_XDECREF(address);
        trace_free(trace);
        return NULL;
    }
    Py_DECREF(address);
    trace->older = self->newest;
    if (self->newest != NULL) self->newest->newer = trace;
    else self->oldest = trace;
    self->newest = trace;
    return trace;
}

/* The least recently placed trace forgotten, its lanes' keys retired; -1 with an error set. */
static int
forget_oldest(Lanes *self)
{
    Trace *trace = self->oldest;
    for (Py_ssize_t i = 0; i < trace->lane_count; i++)
        if (PyList_Append(self->retired, trace->keys[i]) < 0) return -1;
    if (PyDict_DelItem(self->traces, trace->trace_id) < 0) return -1;
    self->oldest = trace->newer;
    if (self->oldest != NULL) self->oldest->older = NULL;
    else self->newest = NULL;
    self->spans -= trace->size;
    self->live -= trace->lane_count;
    trace_free(trace);
    return 0;
}

static int
unsigned_item(PyObject *span, Py_ssize_t index, uint64_t *out)
{
    *out = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(span, index));
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
Lanes_place(Lanes *self, PyObject *span)
{
    if (self->traces == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Lanes was not initialised");
        return NULL;
    }
    if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) < 5 || !PyBytes_Check(PyTuple_GET_ITEM(span, 0))) {
        PyErr_SetString(PyExc_TypeError, "place() takes a TraceSpan: (trace id bytes, span id, parent id, start, end)");
        return NULL;
    }
    Placed placed;
    if (unsigned_item(span, 1, &placed.span_id) < 0 || unsigned_item(span, 2, &placed.parent_id) < 0 ||
        unsigned_item(span, 3, &placed.start) < 0 || unsigned_item(span, 4, &placed.end) < 0)
        return NULL;
    Trace *trace = trace_of(self, PyTuple_GET_ITEM(span, 0));
    if (trace == NULL) return NULL;
    Py_ssize_t index = trace->lane_count ? lane_for(trace, &placed) : 0;
    if (index == trace->lane_count && add_lane(self, trace) < 0) return NULL;
    int made;
    Entry *entry;
    if (lane_insert(&trace->lanes[index], &placed) < 0) return NULL;
    if ((entry = table_entry(&trace->placed, placed.span_id, &made)) == NULL) return NULL;
    entry->lane = index;
    entry->parent = placed.parent_id;
    trace->size++;
    self->spans++;
    if ((entry = table_entry(&trace->child_lane, placed.parent_id, &made)) == NULL) return NULL;
    if (made) entry->lane = index;
    PyObject *key = Py_NewRef(trace->keys[index]); /* (its trace may be forgotten below: the key is kept) */
    while (self->oldest != NULL && (self->spans > self->max_kept_spans || self->live > self->max_lanes)) {
        if (forget_oldest(self) < 0) {
            Py_DECREF(key);
            return NULL;
        }
    }
    return key;
}

static PyObject *
Lanes_take_retired(Lanes *self, PyObject *Py_UNUSED(ignored))
{
    if (self->retired == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Lanes was not initialised");
        return NULL;
    }
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) return NULL;
    PyObject *retired = self->retired;
    self->retired = fresh;
    return retired;
}

static int
Lanes_init(Lanes *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"lane_type", "max_lanes", "max_kept_spans", NULL};
    PyObject *lane_type;
    Py_ssize_t max_lanes, max_kept_spans;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Onn", keywords, &lane_type, &max_lanes, &max_kept_spans))
        return -1;
    if (self->traces != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Lanes is initialised once");
        return -1;
    }
    if ((self->traces = PyDict_New()) == NULL || (self->retired = PyList_New(0)) == NULL) return -1;
    self->lane_type = Py_NewRef(lane_type);
    self->max_lanes = max_lanes;
    self->max_kept_spans = max_kept_spans;
    return 0;
}

static void
Lanes_dealloc(Lanes *self)
{
    while (self->oldest != NULL) {
        Trace *trace = self->oldest;
        self->oldest = trace->newer;
        trace_free(trace);
    }
    Py_XDECREF(self->traces);
    Py_XDECREF(self->retired);
    Py_XDECREF(self->lane_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Lanes_methods[] = {
    {"place", (PyCFunction)Lanes_place, METH_O, "place(span, /)\n--\n\nThe lane's key the span goes on (remembered)."},
    {"take_retired", (PyCFunction)Lanes_take_retired, METH_NOARGS,
     "take_retired()\n--\n\nThe keys of the lanes of the traces forgotten since the last call."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Lanes_members[] = {
    {"max_lanes", T_PYSSIZET, offsetof(Lanes, max_lanes), 0, "Lanes live at once, at most."},
    {"live", T_PYSSIZET, offsetof(Lanes, live), READONLY, "Lanes live (placed on, and not retired yet)."},
    {NULL, 0, 0, 0, NULL},
};

/* Not garbage-collected: it holds only its lanes' keys, its dict of ints and the lane class, none of which can hold
   it (no cycle through it). */
static PyTypeObject LanesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringtrace.collector.ingest.otlp._lanes.Lanes",
    .tp_basicsize = sizeof(Lanes),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lanes(lane_type, max_lanes, max_kept_spans)\n--\n\nThe lanes of one process's traces (trace_lanes.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lanes_init,
    .tp_dealloc = (destructor)Lanes_dealloc,
    .tp_methods = Lanes_methods,
    .tp_members = Lanes_members,
};

static int
module_exec(PyObject *module)
{
    if (PyType_Ready(&LanesType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Lanes", (PyObject *)&LanesType);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef lanes_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.ingest.otlp._lanes",
    .m_doc = "The lanes of a process's OTLP traces, in C (see trace_lanes.py).",
    .m_size = 0,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__lanes(void)
{
    return PyModuleDef_Init(&lanes_module);
}
