/* The collector's scan of EVENTS frames, in C: it checks and indexes a run of EVENTS frames where they were read (in
a segment lent to the connection's reader), as LendingFrameReader.events_run's pure-Python loop does (scan.py,
_scan_events_py, which defines the behaviour; the tests hold both to the same results), without an object per frame.

Optional: when this module is not built, or RINGTRACE_PURE_PYTHON=1 is set, the collector runs the Python twin. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* LendingFrameReader.events_run's loop (scan.py, _scan_events_py, is its twin and defines it): the complete EVENTS frames
   from `position`, each checked as next_frame checks it, indexed as EVENTS_ENTRY, the last frame's entry first (the
   order of an index that grows down from the end of a buffer), as long as the frames and their entries fit below
   `top`. Wire integers are little-endian. */

#define FRAME_HEADER_SIZE 5        /* FRAME_HEADER: body length, type */
#define EVENTS_HEADER_SIZE 28      /* EVENTS_HEADER: header size, flags, track, count, first_ts, last_ts */
#define EVENTS_HEAD_SIZE (FRAME_HEADER_SIZE + EVENTS_HEADER_SIZE)
#define EVENTS_ENTRY_SIZE 32       /* EVENTS_ENTRY: offset, size, track, count, first_ts, last_ts */
#define FRAME_TYPE_EVENTS 6        /* FrameType.EVENTS */

static inline uint32_t
get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
get_le64(const unsigned char *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static inline unsigned char *
put_le32(unsigned char *p, uint32_t value)
{
    p[0] = (unsigned char)value;
    p[1] = (unsigned char)(value >> 8);
    p[2] = (unsigned char)(value >> 16);
    p[3] = (unsigned char)(value >> 24);
    return p + 4;
}

/* sums[track] += [events, nbytes], a new [events, nbytes] list when the track is not there yet. */
static int
add_track_sums(PyObject *sums, uint32_t track, unsigned long long events, unsigned long long nbytes)
{
    PyObject *key, *pair, *total;
    int i, status = -1;
    unsigned long long add[2] = {events, nbytes};
    if ((key = PyLong_FromUnsignedLong(track)) == NULL) return -1;
    pair = PyDict_GetItemWithError(sums, key);
    if (pair == NULL) {
        if (!PyErr_Occurred() && (pair = Py_BuildValue("[KK]", events, nbytes)) != NULL) {
            status = PyDict_SetItem(sums, key, pair);
            Py_DECREF(pair);
        }
        Py_DECREF(key);
        return status;
    }
    Py_DECREF(key);
    for (i = 0; i < 2; i++) {
        unsigned long long held = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(pair, i));
        if (held == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        if ((total = PyLong_FromUnsignedLongLong(held + add[i])) == NULL) return -1;
        PyList_SetItem(pair, i, total);
    }
    return 0;
}

static inline unsigned char *
put_le64(unsigned char *p, uint64_t value)
{
    return put_le32(put_le32(p, (uint32_t)value), (uint32_t)(value >> 32));
}

/* The entries of the frames accepted so far, in the order read (the reverse of the index's). Each is made from the
   bytes that were checked, read once: `tracks.__contains__`, or a collection that runs a finalizer, may rewrite the
   buffer between two frames. */
typedef struct {
    unsigned char *data;
    Py_ssize_t frames, capacity;
} Scanned;

static int
add_entry(Scanned *scanned, Py_ssize_t position, uint32_t size, uint32_t track, uint32_t count, uint64_t first_ts,
          uint64_t last_ts)
{
    unsigned char *entry;
    if (scanned->frames == scanned->capacity) {
        Py_ssize_t capacity = scanned->capacity ? 2 * scanned->capacity : 64;
        unsigned char *data = PyMem_Realloc(scanned->data, (size_t)capacity * EVENTS_ENTRY_SIZE);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        scanned->data = data;
        scanned->capacity = capacity;
    }
    entry = scanned->data + scanned->frames++ * EVENTS_ENTRY_SIZE;
    entry = put_le32(put_le32(entry, (uint32_t)position), size);
    entry = put_le32(put_le32(entry, track), count);
    put_le64(put_le64(entry, first_ts), last_ts);
    return 0;
}

/* An int argument of scan_events as a Py_ssize_t; -1 with an exception set if it is not one. */
static int
ssize_argument(PyObject *value, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
scan_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t position, end, top, i;
    unsigned long long limit, events = 0, track_events = 0, track_bytes = 0;
    uint32_t track = 0;
    int have_track = 0;
    const unsigned char *buf;
    unsigned char *entry;
    Scanned scanned = {NULL, 0, 0};
    PyObject *tracks, *sums = NULL, *entries = NULL, *result = NULL;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan_events(buffer, position, end, max_frame_bytes, tracks, top)");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    tracks = args[4];
    if (ssize_argument(args[1], &position) < 0 || ssize_argument(args[2], &end) < 0) goto done;
    if ((limit = PyLong_AsUnsignedLongLong(args[3])) == (unsigned long long)-1 && PyErr_Occurred()) goto done;
    if (ssize_argument(args[5], &top) < 0) goto done;
    if (position < 0 || position > end || end > view.len || view.len > (Py_ssize_t)UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "scan_events: bytes %zd to %zd are not in a buffer of %zd (at most 4 GiB)",
                     position, end, view.len);
        goto done;
    }
    if ((sums = PyDict_New()) == NULL) goto done;
    buf = view.buf;
    while (end - position >= EVENTS_HEAD_SIZE) {
        const unsigned char *p = buf + position;
        uint64_t body = get_le32(p), size = FRAME_HEADER_SIZE + body, header = p[5] | p[6] << 8;
        uint32_t frame_track = get_le32(p + 9), count = get_le32(p + 13);
        uint64_t first_ts = get_le64(p + 17), last_ts = get_le64(p + 25);
        /* All terms are below 2**34 once size fits in the buffer (a buffer is at most 4 GiB): no overflow, unlike
           top - EVENTS_ENTRY_SIZE * (frames + 1) for any `top`. */
        if (p[4] != FRAME_TYPE_EVENTS || size > limit || size > (uint64_t)(end - position) ||
            header < EVENTS_HEADER_SIZE || header > body || count == 0 || count > body - header ||
            first_ts > last_ts ||
            (int64_t)position + (int64_t)size + EVENTS_ENTRY_SIZE * ((int64_t)scanned.frames + 1) > (int64_t)top) {
            break;
        }
        if (!have_track || frame_track != track) {
            PyObject *key;
            int known;
            if (have_track && add_track_sums(sums, track, track_events, track_bytes) < 0) goto done;
            have_track = 0;
            if ((key = PyLong_FromUnsignedLong(frame_track)) == NULL) goto done;
            known = PyDict_Contains(sums, key);
            if (known == 0) known = PySequence_Contains(tracks, key); /* Python code: the buffer may change */
            Py_DECREF(key);
            if (known < 0) goto done;
            if (!known) break;
            have_track = 1;
            track = frame_track;
            track_events = track_bytes = 0;
        }
        if (add_entry(&scanned, position, (uint32_t)size, frame_track, count, first_ts, last_ts) < 0) goto done;
        track_events += count;
        track_bytes += size;
        events += count;
        position += (Py_ssize_t)size;
    }
    if (scanned.frames == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (have_track && add_track_sums(sums, track, track_events, track_bytes) < 0) goto done;
    if ((entries = PyBytes_FromStringAndSize(NULL, scanned.frames * EVENTS_ENTRY_SIZE)) == NULL) goto done;
    entry = (unsigned char *)PyBytes_AS_STRING(entries) + scanned.frames * EVENTS_ENTRY_SIZE;
    for (i = 0; i < scanned.frames; i++) {
        entry -= EVENTS_ENTRY_SIZE;
        memcpy(entry, scanned.data + i * EVENTS_ENTRY_SIZE, EVENTS_ENTRY_SIZE);
    }
    result = Py_BuildValue("(OKOn)", entries, events, sums, position);
done:
    PyMem_Free(scanned.data);
    Py_XDECREF(entries);
    Py_XDECREF(sums);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef module_methods[] = {
    {"scan_events", (PyCFunction)(void (*)(void))scan_events, METH_FASTCALL,
     "scan_events(buffer, position, end, max_frame_bytes, tracks, top) -> (entries, events, sums, end) or None: "
     "LendingFrameReader.events_run's loop."},
    {NULL, NULL, 0, NULL},
};

/* No state: each interpreter can import it, with a GIL of its own. It calls back into Python (``tracks``) and builds
   Python objects, so it keeps the GIL. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.ingest._scan",
    .m_doc = "The collector's scan of a run of EVENTS frames where they were read, in C (see scan.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModuleDef_Init(&scan_module);
}
