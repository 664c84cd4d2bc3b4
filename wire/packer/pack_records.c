/* pack_records(): a run of compact records (wire/record_runs.py: a fixed header and the event's arguments already
   packed, not Python objects) as one EVENTS frame: what the Python path writes for the run's flat records
   (RecordRun.as_flat()), given each label index's string id, which record_packing.py interns on the Python side, once
   per label and table epoch. The records are not trusted: every size and index is checked.

   The packing holds the interpreter lock. Releasing it (the packing reads only bytes) was tried: taking it back waits
   for a thread that records flat out to give it up, a switch interval (5 ms) a run, which held the flusher to about
   8192 events per 5 ms, far below such a thread's pace, and its buffer filled (a thread recording 3M instants lost
   540,000-740,000 of them where it lost none to 32,000 with the lock held, load 11-19). What the lock costs the
   recording thread here is a few ns an event: varints and a copy. */

#include "packer.h"

/* A record's header (record_runs.HEADER "<IIIqq"): size, kind, label index, start_ns, end_ns; its args follow. */
#define REC_SIZE 0
#define REC_KIND 4
#define REC_LABEL 8
#define REC_START 12
#define REC_END 20
#define REC_HEADER 28

static inline uint64_t
get_le(const unsigned char *p, int size)
{
    uint64_t v = 0;
    int i;
    for (i = size - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The records from `offset` up to `max_count` of them, checked: returns how many there are (>= 0), their end in *end;
   -1 with ValueError set for a record that is not whole or names a label past `labels`. */
static Py_ssize_t
scan_records(const unsigned char *run, Py_ssize_t size, Py_ssize_t offset, Py_ssize_t max_count, Py_ssize_t labels,
             Py_ssize_t *end)
{
    Py_ssize_t count = 0;
    while (offset < size && count < max_count) {
        uint64_t length, label;
        if (size - offset < REC_HEADER + 1) {
            PyErr_Format(PyExc_ValueError, "records: %zd bytes at %zd are not a whole record", size - offset, offset);
            return -1;
        }
        length = get_le(run + offset + REC_SIZE, 4);
        label = get_le(run + offset + REC_LABEL, 4);
        if (length < REC_HEADER + 1 || length > (uint64_t)(size - offset)) {
            PyErr_Format(PyExc_ValueError, "records: a record of %llu bytes at %zd of %zd", (unsigned long long)length,
                         offset, size);
            return -1;
        }
        if (label >= (uint64_t)labels) {
            PyErr_Format(PyExc_ValueError, "records: label index %llu is past the %zd labels known",
                         (unsigned long long)label, labels);
            return -1;
        }
        offset += (Py_ssize_t)length;
        count++;
    }
    *end = offset;
    return count;
}

/* The records [offset, end) one by one, for missing_indexes(): scan_records() has checked every size and label. */
typedef struct {
    const unsigned char *run;
    Py_ssize_t offset, end;
} RecordCursor;

static int
next_label(void *cursor, uint32_t *index)
{
    RecordCursor *at = cursor;
    if (at->offset >= at->end) return 0;
    *index = (uint32_t)get_le(at->run + at->offset + REC_LABEL, 4);
    at->offset += (Py_ssize_t)get_le(at->run + at->offset + REC_SIZE, 4);
    return 1;
}

/* The frame of records [offset, end): 0 packed (or past max_frame_bytes: *frame_size 0), -1 an offset or
   duration past 64 bits, -2 a timestamp before 0, -3 a label with no id, -4 no memory. */
static int
pack_frame(const unsigned char *run, Py_ssize_t offset, Py_ssize_t end, Py_ssize_t n, const int64_t *names,
              int64_t overflow_id, long long track_id, long long max_frame_bytes, unsigned char **frame,
              Py_ssize_t *frame_size, Py_ssize_t *overflowed)
{
    int64_t first_ns = 0, last_ns = 0;
    Py_ssize_t at, i, head_size = 1 + 5 * array_header_size(n), args_size = 0, body_size;
    unsigned char *p;
    for (at = offset, i = 0; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4), i++) {
        int64_t start = (int64_t)get_le(run + at + REC_START, 8), stop = (int64_t)get_le(run + at + REC_END, 8);
        if (i == 0 || start < first_ns) first_ns = start;
        if (i == 0 || stop > last_ns) last_ns = stop;
    }
    if (first_ns < 0 || last_ns < 0) return -2; /* the header's timestamps are unsigned */
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        const unsigned char *record = run + at;
        int64_t start = (int64_t)get_le(record + REC_START, 8), stop = (int64_t)get_le(record + REC_END, 8);
        int64_t offset_ns, duration, name = names[get_le(record + REC_LABEL, 4)];
        if (__builtin_sub_overflow(stop, start, &duration) || __builtin_sub_overflow(start, first_ns, &offset_ns)) {
            return -1;
        }
        if (name < 0) return -3;
        *overflowed += name == overflow_id;
        head_size += int_size((int64_t)get_le(record + REC_KIND, 4)) + int_size(name) + int_size(offset_ns) +
                     int_size(duration);
        args_size += (Py_ssize_t)get_le(record + REC_SIZE, 4) - REC_HEADER;
    }
    body_size = EVENTS_HEADER_SIZE + head_size + args_size;
    if (FRAME_HEADER_SIZE + body_size > max_frame_bytes || body_size > 0xFFFFFFFFLL) {
        *frame_size = 0;
        return 0;
    }
    *frame = PyMem_RawMalloc((size_t)(FRAME_HEADER_SIZE + body_size));
    if (*frame == NULL) return -4;
    *frame_size = FRAME_HEADER_SIZE + body_size;
    p = put_events_head(*frame, body_size, track_id, n, first_ns, last_ns);
    p = put_array_header(p, n);
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        p = put_int(p, (int64_t)get_le(run + at + REC_KIND, 4));
    }
    p = put_array_header(p, n);
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        p = put_int(p, names[get_le(run + at + REC_LABEL, 4)]);
    }
    p = put_array_header(p, n);
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        p = put_int(p, (int64_t)get_le(run + at + REC_START, 8) - first_ns);
    }
    p = put_array_header(p, n);
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        p = put_int(p, (int64_t)get_le(run + at + REC_END, 8) - (int64_t)get_le(run + at + REC_START, 8));
    }
    p = put_array_header(p, n);
    for (at = offset; at < end; at += (Py_ssize_t)get_le(run + at + REC_SIZE, 4)) {
        Py_ssize_t length = (Py_ssize_t)get_le(run + at + REC_SIZE, 4) - REC_HEADER;
        memcpy(p, run + at + REC_HEADER, (size_t)length);
        p += length;
    }
    assert(p == *frame + *frame_size);
    return 0;
}

/* pack_records(records, offset, max_count, names, overflow_id, track_id, max_frame_bytes):
   records: the run's records (bytes); offset: where the
   records to pack begin; max_count: at most this many of them.
   names: a writable buffer of int64 per label index: its string id (< 0: not interned yet).
   Returns a list of the label indexes not interned yet (first met first, each marked MISSING_ID in names) when there
   are any, else (frame or None where it is past max_frame_bytes, records packed, the offset past them, records named
   with the overflow id). */
PyObject *
pack_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer names_view = {0};
    PyObject *records, *result = NULL, *frame_object;
    long long offset, max_count, overflow_id, track_id, max_frame_bytes;
    Py_ssize_t labels, n, end = 0, size, frame_size = 0, overflowed = 0;
    const unsigned char *run;
    unsigned char *frame = NULL;
    int64_t *names;
    int status;
    if (nargs != 7 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pack_records(records: bytes, offset, max_count, names, overflow_id, "
                                         "track_id, max_frame_bytes)");
        return NULL;
    }
    records = args[0];
    if ((offset = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((max_count = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if ((overflow_id = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) return NULL;
    if ((track_id = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) return NULL;
    if ((max_frame_bytes = PyLong_AsLongLong(args[6])) == -1 && PyErr_Occurred()) return NULL;
    if (track_id < 0 || track_id > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_records: track id %lld does not fit 32 bits", track_id);
        return NULL;
    }
    size = PyBytes_GET_SIZE(records);
    if (offset < 0 || offset >= size || max_count <= 0 || max_count > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_records: offset %lld, at most %lld records, of %zd bytes", offset,
                     max_count, size);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &names_view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return NULL;
    if (names_view.itemsize != 8 || names_view.format == NULL || strcmp(names_view.format, "q") != 0) {
        PyErr_SetString(PyExc_TypeError, "pack_records: names must be an array of int64 ('q')");
        goto done;
    }
    names = names_view.buf;
    labels = names_view.len / 8;
    run = (const unsigned char *)PyBytes_AS_STRING(records);
    n = scan_records(run, size, (Py_ssize_t)offset, (Py_ssize_t)max_count, labels, &end);
    if (n < 0) goto done;
    result = missing_indexes(names, next_label, &(RecordCursor){run, (Py_ssize_t)offset, end});
    if (result == NULL || PyList_GET_SIZE(result) > 0) goto done;
    Py_CLEAR(result);
    status = pack_frame(run, (Py_ssize_t)offset, end, n, names, overflow_id, track_id, max_frame_bytes, &frame,
                        &frame_size, &overflowed);
    if (status == -1) PyErr_SetString(PyExc_OverflowError, "pack_records: an offset or duration does not fit 64 bits");
    else if (status == -2) PyErr_SetString(PyExc_OverflowError, "pack_records: a timestamp before 0");
    else if (status == -3) PyErr_SetString(PyExc_RuntimeError, "pack_records: a label has no name id");
    else if (status == -4) PyErr_NoMemory();
    if (status < 0) goto done;
    if (frame_size == 0) {
        result = Py_BuildValue("(Onnn)", Py_None, n, end, overflowed);
        goto done;
    }
    frame_object = PyBytes_FromStringAndSize((const char *)frame, frame_size);
    if (frame_object == NULL) goto done;
    result = Py_BuildValue("(Nnnn)", frame_object, n, end, overflowed);
done:
    PyMem_RawFree(frame);
    if (names_view.obj != NULL) PyBuffer_Release(&names_view);
    return result;
}
