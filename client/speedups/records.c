/* Compact records (wire/record_runs.py): an instant whose name is text and whose arguments are text keys with flat
   values, and a message whose category is text and whose values are flat (message.c, past its priority gate), are
   written as a fixed header and their arguments already packed, as the stream encoder packs them (a map; a message's
   array of values), into a Segment, a byte buffer, rather than as five Python objects in the thread's buffer list.

Order. A segment sits in the thread's buffer list as one event's five values (the segment, then four None), so that
the list stays the one order of the thread's events: a record is appended to the segment that is the list's last
event, if that is one of this thread's and has room, or to a new one appended to the list if the list is empty or
ends with a full segment. Any other event (a scope, an instant or message of another shape, anything the Python side
records) is appended to the list as before, and the instants and messages after it are recorded as objects too until
the flusher has taken the list: so a thread that mixes shapes gets no run of a few records between two of objects
(each run is a frame of its own on the wire), and one that records only such instants and messages records them all
compactly. A segment out of the list (take_runs took
it) is never written again.

Bounds. A thread's RecordBuffer (one per track buffer, tracks.py) counts the bytes its segments have allocated
(their capacity) that the flusher has not taken yet: a record that would make it exceed the timeline's
_max_buffered_record_bytes is recorded as objects instead, within the list's bound (so are those after it, until the
drain). The list's bound (max_buffered_events) counts every record as an event: a segment takes one event's place in
the list, and the account's extra_events counts the events its segments hold past that place, kept as they change (a
record appended into a segment adds one; a segment taken or dropped takes its records less one away), never summed
over the list (buffered_values, speedups.h, reads it for every list). A segment holds at most
RUN_RECORDS records (a run's worth, as a list run's 8192 events). So a track's memory is bounded by its list's bound
plus _max_buffered_record_bytes. The labels' table keeps names (an instant's; a message's category) of up to
MAX_LABEL_CHARS only (others go as objects), and only of records kept compactly (not of those that go as objects
after other events): it is kept for the process's life.

Allocation. Nothing between the buffer's lookup and the append runs Python code: the arguments are packed into a
buffer on the C stack, the label's index and a spare segment are had before the lookup (either may allocate, hence
run the garbage collector, hence Python code), and the segment grows with PyMem_Realloc, a memory request only. */

#include "speedups.h"
#include "msgpack_put.h"

/* record_runs.HEADER "<IIIqq": size, kind, label index, start_ns, end_ns; the args follow. */
#define REC_HEADER 28
/* Records a segment takes at most: a drained run's worth. */
#define RUN_RECORDS 8192
/* Labels the table takes at most (an instant named otherwise is recorded as objects): the table is process-wide and
   append only, so that a program that names instants after ever new text does not grow it without bound. */
#define MAX_LABELS 65536
/* Characters a name in the table has at most: the table is bounded in bytes too (65,536 names of 64 characters grew
   a process 14 MB when ASCII, 29 MB of 4-byte characters), and a name made of ever new text (an id, a query) is
   likelier long. */
#define MAX_LABEL_CHARS 64
/* Bytes a record's packed arguments may take on the C stack; larger ones are recorded as objects. */
#define ARGS_ROOM 512

/* -- RecordBuffer ------------------------------------------------------------------------------------------------- */

static PyObject *
record_buffer_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    RecordBuffer *self = (RecordBuffer *)type->tp_alloc(type, 0);
    if (self != NULL) self->held_bytes = self->extra_events = 0;
    return (PyObject *)self;
}

static void
record_buffer_dealloc(RecordBuffer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMemberDef record_buffer_members[] = {
    {"held_bytes", T_PYSSIZET, offsetof(RecordBuffer, held_bytes), READONLY,
     "Bytes of this thread's compact records that the flusher has not taken yet."},
    {"extra_events", T_PYSSIZET, offsetof(RecordBuffer, extra_events), READONLY,
     "Events this thread's segments in its list hold past the one event's place each takes there (records less "
     "segments): its list holds len(list) // RECORD_FIELDS + extra_events events."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot record_buffer_slots[] = {
    {Py_tp_doc, "A thread's account of its compact records (see records.c)."},
    {Py_tp_new, record_buffer_new},
    {Py_tp_dealloc, record_buffer_dealloc},
    {Py_tp_members, record_buffer_members},
    {0, NULL},
};

PyType_Spec record_buffer_spec = {
    .name = "ringtrace.client._speedups.RecordBuffer",
    .basicsize = sizeof(RecordBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = record_buffer_slots,
};

/* -- Segment ------------------------------------------------------------------------------------------------------ */

/* Out of the list: no longer held by the thread, never written again. */
void
segment_taken(PyObject *segment)
{
    Segment *self = (Segment *)segment;
    if (self->taken) return;
    self->taken = 1;
    if (self->owner != NULL) {
        self->owner->held_bytes -= self->capacity;
        self->owner->extra_events -= self->count - 1; /* (a placed segment holds a record at least) */
    }
}

static void
segment_dealloc(Segment *self)
{
    PyTypeObject *type = Py_TYPE(self);
    segment_taken((PyObject *)self); /* (dropped with its list: a fork's reset, a forgotten buffer) */
    Py_CLEAR(self->owner);
    PyMem_Free(self->data);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* segment.take(): its records as bytes (it is out of the list by then: take_runs), and how many. */
static PyObject *
segment_take(Segment *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->taken) {
        PyErr_SetString(PyExc_RuntimeError, "a segment still in its buffer is not taken");
        return NULL;
    }
    return Py_BuildValue("(y#n)", self->data != NULL ? (const char *)self->data : "", self->size, self->count);
}

static PyMethodDef segment_methods[] = {
    {"take", (PyCFunction)segment_take, METH_NOARGS,
     "take() -> (records, count): the compact records of a segment the drain took (record_runs.RecordRun's)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef segment_members[] = {
    {"count", T_PYSSIZET, offsetof(Segment, count), READONLY, "The records it holds (events: it is one in its list)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot segment_slots[] = {
    {Py_tp_doc, "Compact records in one piece of a thread's buffer (see records.c)."},
    {Py_tp_dealloc, segment_dealloc},
    {Py_tp_methods, segment_methods},
    {Py_tp_members, segment_members},
    {0, NULL},
};

PyType_Spec segment_spec = {
    .name = "ringtrace.client._speedups.Segment",
    .basicsize = sizeof(Segment),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = segment_slots,
};

static Segment *
segment_new(ModuleState *state)
{
    Segment *self = PyObject_New(Segment, state->segment_type);
    if (self == NULL) return NULL;
    self->owner = NULL;
    self->data = NULL;
    self->size = self->capacity = self->count = 0;
    self->taken = 0;
    return self;
}

/* -- Packing an instant ------------------------------------------------------------------------------------------- */

/* Text as msgpack-python packs it into [p, end): the new end, or NULL when it does not fit or is not for this path
   (past MAX_ARG_TEXT, or not UTF-8 encodable: a lone surrogate, which the encoder escapes). No Python code runs. */
static unsigned char *
put_text(unsigned char *p, unsigned char *end, PyObject *text)
{
    Py_ssize_t size;
    const char *utf8;
    if (PyUnicode_GET_LENGTH(text) > MAX_ARG_TEXT) return NULL;
    if (PyUnicode_IS_COMPACT_ASCII(text)) {
        size = PyUnicode_GET_LENGTH(text);
        utf8 = (const char *)PyUnicode_DATA(text);
    }
    else {
        utf8 = PyUnicode_AsUTF8AndSize(text, &size); /* may allocate (not an object); runs no Python code */
        if (utf8 == NULL) {
            PyErr_Clear();
            return NULL;
        }
    }
    if (end - p < 5 + size) return NULL;
    p = put_raw_header(p, size, 1);
    memcpy(p, utf8, (size_t)size);
    return p + size;
}

/* A flat value (see wire/packer/pack_values.c pack_flat: the same bytes) into [p, end), or NULL. */
static unsigned char *
put_flat(unsigned char *p, unsigned char *end, PyObject *value)
{
    if (PyUnicode_CheckExact(value)) return put_text(p, end, value);
    if (end - p < 9) return NULL;
    if (value == Py_None) PUT1(p, 0xc0);
    else if (value == Py_True) PUT1(p, 0xc3);
    else if (value == Py_False) PUT1(p, 0xc2);
    else if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow == 0) {
            if (v == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return NULL;
            }
            p = put_int(p, v);
        }
        else if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(value);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return NULL;
            }
            p = put_uint64(p, u);
        }
        else return NULL;
    }
    else if (PyFloat_CheckExact(value)) {
        PUT1(p, 0xcb);
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), (char *)p, 0) < 0) {
            PyErr_Clear();
            return NULL;
        }
        p += 8;
    }
    else if (PyBytes_CheckExact(value)) {
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        if (size > MAX_ARG_TEXT || end - p < 5 + size) return NULL;
        p = put_raw_header(p, size, 0);
        memcpy(p, PyBytes_AS_STRING(value), (size_t)size);
        p += size;
    }
    else return NULL;
    return p;
}

/* An instant's keyword arguments as the stream encoder packs their map (nil for none) into [p, end): the new end, or
   NULL when they are not all text keys with flat values or do not fit. */
static unsigned char *
put_keywords(unsigned char *p, unsigned char *end, PyObject *const *values, PyObject *names)
{
    Py_ssize_t i, n = names == NULL ? 0 : PyTuple_GET_SIZE(names);
    if (n == 0) {
        PUT1(p, 0xc0);
        return p;
    }
    if (n > MAX_ARG_ITEMS) return NULL;
    p = put_map_header(p, n);
    for (i = 0; i < n && p != NULL; i++) {
        PyObject *key = PyTuple_GET_ITEM(names, i);
        p = PyUnicode_CheckExact(key) ? put_text(p, end, key) : NULL;
        if (p != NULL) p = put_flat(p, end, values[i]);
    }
    return p;
}

/* The index of `label` (exact text) in the table of labels, added if new: >= 0, or -1 (not for this path: the table
   is full), -2 on error. May run Python code (an allocation). */
static Py_ssize_t
label_index(RecorderCore *self, PyObject *label)
{
    ModuleState *state = self->state;
    PyObject *found, *index;
    Py_ssize_t n;
    if (label == self->last_label) return self->last_label_index;
    found = PyDict_GetItemWithError(state->label_ids, label); /* exact text: no Python code */
    if (found == NULL) {
        if (PyErr_Occurred()) return -2;
        n = PyList_GET_SIZE(state->labels);
        if (n >= MAX_LABELS || PyUnicode_GET_LENGTH(label) > MAX_LABEL_CHARS) return -1;
        index = PyLong_FromSsize_t(n);
        if (index == NULL) return -2;
        if (PyList_Append(state->labels, label) < 0) { /* (the list first: an index never names two labels) */
            Py_DECREF(index);
            return -2;
        }
        if (PyDict_SetItem(state->label_ids, label, index) < 0) {
            Py_DECREF(index);
            (void)PyList_SetSlice(state->labels, n, n + 1, NULL); /* (the name at n is this one: taken back) */
            return -2;
        }
        Py_DECREF(index);
        found = PyDict_GetItemWithError(state->label_ids, label);
        if (found == NULL) return PyErr_Occurred() ? -2 : -1;
    }
    n = PyLong_AsSsize_t(found);
    if (n < 0) return PyErr_Occurred() ? -2 : -1;
    Py_XSETREF(self->last_label, Py_NewRef(label));
    self->last_label_index = n;
    return n;
}

/* This thread's buffer list and record account when both are cached (the thread runs no asyncio loop): borrowed
   references; 0 when they are not (the caller takes the usual path), -1 on error. May run Python code (the lookup of
   a thread new to the cache). */
static int
cached_buffers(RecorderCore *self, PyObject **events, RecordBuffer **records)
{
    uint64_t me;
    PyObject *loop = running_loop(self->state), *found;
    if (loop == NULL) return -1;
    if (loop != Py_None) {
        Py_DECREF(loop);
        return 0;
    }
    Py_DECREF(loop);
    me = PyThreadState_GetID(PyThreadState_Get());
    if (me != self->cached_thread || self->cached_events == NULL) {
        found = current_events(self); /* fills the cache where it caches */
        if (found == NULL) return -1;
        Py_DECREF(found);
        if (me != self->cached_thread || self->cached_events == NULL) return 0;
    }
    if (!PyList_CheckExact(self->cached_events) || self->cached_records == NULL) return 0;
    *events = self->cached_events;
    *records = self->cached_records;
    return 1;
}

/* Whether this thread's buffer, as its cache holds it (read only: no Python code runs), ends with an event that is not
   one of its segments: the record is then for the usual path (see the top), known before its values are packed and
   the clock is read, so that a thread that mixes shapes (a scope around its messages) pays little for the attempt.
   place_record checks it again after the lookup. */
static int
after_other_events(RecorderCore *self)
{
    PyObject *events = self->cached_events, *last;
    Py_ssize_t n;
    if (events == NULL || self->cached_records == NULL || !PyList_CheckExact(events) ||
        PyThreadState_GetID(PyThreadState_Get()) != self->cached_thread) {
        return 0;
    }
    n = Py_SIZE(events);
    if (n < RECORD_FIELDS) return 0;
    last = PyList_GET_ITEM(events, n - RECORD_FIELDS);
    return !Py_IS_TYPE(last, self->state->segment_type) || ((Segment *)last)->owner != self->cached_records;
}

/* An instant's or a message's record (header_and_args: REC_HEADER bytes of room, then its packed arguments, `size`
   bytes in all) placed in this thread's buffer (see the top): 1 when recorded or counted as unrecorded, 0 when it is
   for the usual path, -1 for an exception the program must see. */
static int
place_record(RecorderCore *self, long kind, PyObject *label, unsigned char *header_and_args, Py_ssize_t size)
{
    ModuleState *state = self->state;
    unsigned char *p;
    Py_ssize_t index, held, n, capacity, grown;
    PyObject *events;
    RecordBuffer *records;
    Segment *segment = NULL, *target;
    int64_t now;
    int found;
    index = label_index(self, label);
    if (index == -1) return 0;
    if (index < 0) return count_unrecorded(&self->unrecorded) < 0 ? -1 : 1;
    if (self->spare == NULL && (self->spare = (PyObject *)segment_new(state)) == NULL) {
        return count_unrecorded(&self->unrecorded) < 0 ? -1 : 1;
    }
    if (now_ns(state, &now) < 0) return count_unrecorded(&self->unrecorded) < 0 ? -1 : 1;
    found = cached_buffers(self, &events, &records);
    if (found <= 0) return found < 0 ? (count_unrecorded(&self->unrecorded) < 0 ? -1 : 1) : 0;
    if (self->spare == NULL) return 0; /* used by a finalizer that recorded during the lookup: the usual path */
    /* From here on no Python code runs until the record is in. */
    p = header_and_args;
    p = put_le(p, (uint64_t)size, 4);
    p = put_le(p, (uint64_t)kind, 4);
    p = put_le(p, (uint64_t)index, 4);
    p = put_le(p, (uint64_t)now, 8);
    p = put_le(p, (uint64_t)now, 8);
    held = records->held_bytes;
    n = Py_SIZE(events);
    if (buffered_values(state, events) >= self->max_values) { /* full, counting its records: refused, counted */
        self->unrecorded++;
        return 1;
    }
    if (n >= RECORD_FIELDS) {
        PyObject *last = PyList_GET_ITEM(events, n - RECORD_FIELDS);
        if (!Py_IS_TYPE(last, state->segment_type) || ((Segment *)last)->owner != records) {
            return 0; /* events of other shapes came since the last drain: this one goes among them as objects */
        }
        if (((Segment *)last)->count < RUN_RECORDS) segment = (Segment *)last;
    }
    target = segment != NULL ? segment : (Segment *)self->spare;
    capacity = target->capacity;
    if (capacity - target->size < size) {
        capacity = capacity < 64 ? 64 : 2 * capacity;
        while (capacity - target->size < size) capacity *= 2;
    }
    grown = capacity - target->capacity;
    if (held + grown > self->max_record_bytes) {
        return 0; /* past the thread's bytes: as objects, within its list's bound (and the next ones, until the drain) */
    }
    if (grown > 0) { /* (before the segment is placed: a placed one is never empty) */
        unsigned char *data = PyMem_Realloc(target->data, (size_t)capacity);
        if (data == NULL) {
            self->unrecorded++;
            return 1;
        }
        target->data = data;
        target->capacity = capacity;
    }
    if (segment == NULL) { /* a new one, in the list as one event */
        PyObject *placed[RECORD_FIELDS] = {self->spare, Py_None, Py_None, Py_None, Py_None};
        segment = (Segment *)self->spare;
        self->spare = NULL;
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        if (append_event(state, events, placed, self->max_values) < 0) { /* (steals the references either way) */
            return count_unrecorded(&self->unrecorded) < 0 ? -1 : 1;
        }
        segment->owner = (RecordBuffer *)Py_NewRef(records);
    }
    else {
        records->extra_events++; /* (a new segment's first record is the event placed in the list) */
    }
    memcpy(segment->data + segment->size, header_and_args, (size_t)size);
    segment->size += size;
    segment->count++;
    records->held_bytes = held + grown;
    if ((held < self->max_record_bytes / 2 && held + grown >= self->max_record_bytes / 2) ||
        buffered_values(state, events) == self->wake_values + RECORD_FIELDS) { /* (half its bytes, or its events) */
        return wake_flusher(self) < 0 ? -1 : 1;
    }
    return 1;
}

/* Record an instant compactly if it has the shape (see the top): as place_record. */
int
record_compact_instant(RecorderCore *self, PyObject *label, PyObject *const *values, PyObject *names)
{
    unsigned char header_and_args[REC_HEADER + ARGS_ROOM], *p;
    long kind;
    if (!PyUnicode_CheckExact(label) || self->state->segment_type == NULL || after_other_events(self)) return 0;
    p = put_keywords(header_and_args + REC_HEADER, header_and_args + sizeof(header_and_args), values, names);
    if (p == NULL) return 0;
    kind = PyLong_AsLong(self->state->instant_kind);
    if (kind == -1 && PyErr_Occurred()) return -1;
    return place_record(self, kind, label, header_and_args, p - header_and_args);
}

/* Record a message compactly if it has the shape (its category text, its `n` values flat, its kind's id `kind` within
   32 bits): its values packed as the stream encoder packs a message's flat values, an array (so a value named
   "priority" or "category" is a value like any other). As place_record. */
int
record_compact_message(RecorderCore *self, long kind, PyObject *label, PyObject *const *values, Py_ssize_t n)
{
    unsigned char header_and_args[REC_HEADER + ARGS_ROOM], *p = header_and_args + REC_HEADER;
    unsigned char *end = header_and_args + sizeof(header_and_args);
    Py_ssize_t i;
    if (kind < 0 || kind > 0xFFFFFFFFL || n > MAX_ARG_ITEMS || !PyUnicode_CheckExact(label) ||
        self->state->segment_type == NULL || after_other_events(self)) {
        return 0;
    }
    p = put_array_header(p, n);
    for (i = 0; i < n && p != NULL; i++) p = put_flat(p, end, values[i]);
    if (p == NULL) return 0;
    return place_record(self, kind, label, header_and_args, p - header_and_args);
}
