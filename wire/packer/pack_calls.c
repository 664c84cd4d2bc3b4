/* pack_calls(): a run of traced calls (wire/call_records.py: 24-byte records, not Python objects) as one EVENTS frame,
   with no Python object per call: what the Python path writes for the run's flat records (CallRun.as_flat()), given
   each location index's name string id and stack id, which call_packing.py interns on the Python side, once per
   location and table epoch. The records and the indexes in them are not trusted: every one is checked. */

#include "packer.h"

/* A record's fields (call_records.RECORD "<qqII"): start_ns, end_ns, location index, kind. */
#define CALL_START 0
#define CALL_END 8
#define CALL_LOCATION 16
#define CALL_KIND 20

static inline uint64_t
get_le(const unsigned char *p, int size)
{
    uint64_t v = 0;
    int i;
    for (i = size - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The ids of one location index, -1 for none yet; or -1 with ValueError set past the arrays. */
static inline int
location_of(const unsigned char *record, Py_ssize_t locations, uint32_t *out)
{
    uint32_t index = (uint32_t)get_le(record + CALL_LOCATION, 4);
    uint32_t kind = (uint32_t)get_le(record + CALL_KIND, 4);
    if (kind != CALL_KIND_ID && kind != CALL_RAISED_KIND_ID) {
        PyErr_Format(PyExc_ValueError, "call records: kind %u is not a call kind ([%d, %d])", (unsigned)kind,
                     CALL_KIND_ID, CALL_RAISED_KIND_ID);
        return -1;
    }
    if ((Py_ssize_t)index >= locations) {
        PyErr_Format(PyExc_ValueError, "call records: location index %u is past the %zd locations known",
                     (unsigned)index, locations);
        return -1;
    }
    *out = index;
    return 0;
}

/* The run's calls one by one, for missing_indexes(), each checked (location_of). */
typedef struct {
    const unsigned char *records;
    Py_ssize_t i, count, locations;
} CallCursor;

static int
next_location(void *cursor, uint32_t *index)
{
    CallCursor *at = cursor;
    if (at->i >= at->count) return 0;
    if (location_of(at->records + at->i * CALL_RECORD_SIZE, at->locations, index) < 0) return -1;
    at->i++;
    return 1;
}

/* pack_calls(records, first, count, names, stacks, overflow_id, track_id, max_frame_bytes):
   records: the run's records (a buffer); first, count: the calls to pack (record numbers).
   names, stacks: writable buffers of int64 per location index: the name's string id (< 0: not interned yet), the
   one-frame stack's id (-1: none, the table full: counted; -2: none, not counted).
   Returns a list of the location indexes not interned yet (first met first, each marked MISSING_ID in names) when there
   are any, else (frame or None where it is past max_frame_bytes, calls named with the overflow id, calls with no
   stack id). */
PyObject *
pack_calls(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer records = {0}, names_view = {0}, stacks_view = {0};
    PyObject *result = NULL;
    long long first, count, overflow_id, track_id, max_frame_bytes;
    int64_t *names, *stacks, first_ns = 0, last_ns = 0;
    Py_ssize_t locations, i, n, head_size, args_size, body_size, overflowed = 0, stackless = 0;
    PyObject *frame;
    const unsigned char *run;
    unsigned char *p;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "pack_calls(records, first, count, names, stacks, overflow_id, track_id, "
                                         "max_frame_bytes)");
        return NULL;
    }
    if ((first = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((count = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if ((overflow_id = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) return NULL;
    if ((track_id = PyLong_AsLongLong(args[6])) == -1 && PyErr_Occurred()) return NULL;
    if ((max_frame_bytes = PyLong_AsLongLong(args[7])) == -1 && PyErr_Occurred()) return NULL;
    if (track_id < 0 || track_id > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_calls: track id %lld does not fit 32 bits", track_id);
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &records, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &names_view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto done;
    if (PyObject_GetBuffer(args[4], &stacks_view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto done;
    if (names_view.itemsize != 8 || stacks_view.itemsize != 8 || names_view.len != stacks_view.len ||
        names_view.format == NULL || stacks_view.format == NULL || strcmp(names_view.format, "q") != 0 ||
        strcmp(stacks_view.format, "q") != 0) {
        PyErr_SetString(PyExc_TypeError, "pack_calls: names and stacks must be arrays of int64 ('q') of one length");
        goto done;
    }
    if (records.len % CALL_RECORD_SIZE != 0 || first < 0 || count <= 0 || count > 0xFFFFFFFFLL ||
        first > (long long)(records.len / CALL_RECORD_SIZE) - count) {
        PyErr_Format(PyExc_ValueError, "pack_calls: calls %lld to %lld are not whole records of the %zd bytes given",
                     first, first + count, records.len);
        goto done;
    }
    names = names_view.buf;
    stacks = stacks_view.buf;
    locations = names_view.len / 8;
    n = (Py_ssize_t)count;
    run = (const unsigned char *)records.buf + first * CALL_RECORD_SIZE;
    result = missing_indexes(names, next_location, &(CallCursor){run, 0, n, locations});
    if (result == NULL || PyList_GET_SIZE(result) > 0) goto done;
    Py_CLEAR(result);
    /* Sizes first, then one buffer: every value is read from the records (which nothing changes meanwhile: no Python
       code runs) and the arrays. */
    head_size = 1 + 5 * array_header_size(n);
    args_size = 0;
    for (i = 0; i < n; i++) {
        const unsigned char *record = run + i * CALL_RECORD_SIZE;
        int64_t start = (int64_t)get_le(record + CALL_START, 8), end = (int64_t)get_le(record + CALL_END, 8);
        if (i == 0 || start < first_ns) first_ns = start;
        if (i == 0 || end > last_ns) last_ns = end;
    }
    if (first_ns < 0 || last_ns < 0) { /* the header's timestamps are unsigned */
        PyErr_SetString(PyExc_OverflowError, "pack_calls: a timestamp before 0");
        goto done;
    }
    for (i = 0; i < n; i++) {
        const unsigned char *record = run + i * CALL_RECORD_SIZE;
        int64_t start = (int64_t)get_le(record + CALL_START, 8), end = (int64_t)get_le(record + CALL_END, 8);
        int64_t offset, duration, name, stack;
        uint32_t index = (uint32_t)get_le(record + CALL_LOCATION, 4); /* checked by next_location */
        if (__builtin_sub_overflow(end, start, &duration) || __builtin_sub_overflow(start, first_ns, &offset)) {
            PyErr_SetString(PyExc_OverflowError, "pack_calls: an offset or duration does not fit 64 bits");
            goto done;
        }
        name = names[index];
        stack = stacks[index];
        if (name < 0) { /* every index was interned: the arrays changed under the packer */
            PyErr_Format(PyExc_RuntimeError, "pack_calls: location %u has no name id", (unsigned)index);
            goto done;
        }
        overflowed += name == overflow_id;
        stackless += stack == -1;
        head_size += 1 + int_size(name) + int_size(offset) + int_size(duration); /* a kind is a fixint */
        args_size += stack < 0 ? 1 : int_size(stack);
    }
    body_size = EVENTS_HEADER_SIZE + head_size + args_size;
    if (FRAME_HEADER_SIZE + body_size > max_frame_bytes || body_size > 0xFFFFFFFFLL) {
        result = Py_BuildValue("(Onn)", Py_None, overflowed, stackless);
        goto done;
    }
    frame = PyBytes_FromStringAndSize(NULL, FRAME_HEADER_SIZE + body_size);
    if (frame == NULL) goto done;
    p = (unsigned char *)PyBytes_AS_STRING(frame);
    p = put_events_head(p, body_size, track_id, n, first_ns, last_ns);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) PUT1(p, get_le(run + i * CALL_RECORD_SIZE + CALL_KIND, 4));
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, names[get_le(run + i * CALL_RECORD_SIZE + CALL_LOCATION, 4)]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, (int64_t)get_le(run + i * CALL_RECORD_SIZE + CALL_START, 8) - first_ns);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) {
        const unsigned char *record = run + i * CALL_RECORD_SIZE;
        p = put_int(p, (int64_t)get_le(record + CALL_END, 8) - (int64_t)get_le(record + CALL_START, 8));
    }
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) {
        int64_t stack = stacks[get_le(run + i * CALL_RECORD_SIZE + CALL_LOCATION, 4)];
        if (stack < 0) PUT1(p, 0xc0);
        else p = put_int(p, stack);
    }
    assert(p == (unsigned char *)PyBytes_AS_STRING(frame) + PyBytes_GET_SIZE(frame));
    result = Py_BuildValue("(Nnn)", frame, overflowed, stackless);
done:
    if (stacks_view.obj != NULL) PyBuffer_Release(&stacks_view);
    if (names_view.obj != NULL) PyBuffer_Release(&names_view);
    PyBuffer_Release(&records);
    return result;
}
