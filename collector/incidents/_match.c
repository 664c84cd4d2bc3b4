/* The rules' first pass over a stored EVENTS frame, in C: the events that may meet a rule (its candidates), found
straight from the frame's msgpack payload without a Python object per event, as frame_match.py's Python twin
(_candidates_py, which defines the behaviour; the tests hold both to the same results) finds them.

The payload comes from the network: it is checked whole as msgpack-python would read it (_msgpack_read.h) before any
event is judged, and every length is checked against the bytes left. A payload it refuses, or one nested deeper than
the C reader goes, gives None: the Python twin decides then.

Optional: when this module is not built, or RINGTRACE_PURE_PYTHON=1 is set, the watch runs the Python twin. */

#include "../export/_msgpack_read.h"

/* A criterion is two int64s: the least duration that makes an event a candidate (INT64_MAX: none does), and flags.
   Counters' thresholds and state are indexed by name id, for the names whose criterion has FLAG_CROSSING. */
#define NEVER INT64_MAX
#define FLAG_STATUS_ERROR 1 /* a candidate too if its args map has "status": "error" (an OTLP span's error status) */
#define KIND_SLOTS 3        /* per kind id: min duration, flags, name group (-1: none) */
#define FLAG_CROSSING 2     /* (a name's only) a candidate too if its "value" passes other thresholds than before */
#define NAME_SLOTS 2        /* per name id in a group: min duration, flags */
#define COUNTER_SLOTS 3     /* per name id: where its thresholds start, how many are "above", how many "below" */
#define STATE_SLOTS 2       /* per name id: the track of its last value (+1; 0: none yet), that value's signature */
#define MAX_GROUPS 16
#define OUT_SLOTS 7         /* per candidate: index, kind, name, ts, dur, where its args start and end */

static inline int64_t
get_i64(const char *table, Py_ssize_t slot)
{
    int64_t v;
    memcpy(&v, table + slot * (Py_ssize_t)sizeof(int64_t), sizeof(v)); /* (bytes need not be 8-byte aligned) */
    return v;
}

/* Whether the args value under the cursor (checked by skip() already; the cursor is a copy) is a map whose "status"
   is the string "error". A key given twice counts with its last value, as msgpack-python keeps it. */
static int
status_is_error(Cursor args)
{
    uint32_t items;
    int error = 0;
    if (read_container(&args, 1, &items) != OK) {
        return 0;
    }
    for (uint32_t i = 0; i < items; i++) {
        Cursor key = args;
        int64_t n = str_length(&key);
        if (n < 0 || !key_is(key.p, n, "status")) {
            if (skip(&args, 1) != OK || skip(&args, 1) != OK) {
                return 0;
            }
            continue;
        }
        args.p = key.p + n;
        Cursor value = args;
        int64_t m = str_length(&value);
        error = m >= 0 && key_is(value.p, m, "error");
        if (skip(&args, 1) != OK) {
            return 0;
        }
    }
    return error;
}

static inline int
read_i64(Cursor *c, int64_t *out)
{
    i128 v;
    if (read_int(c, &v) != OK || v < (i128)INT64_MIN || v > (i128)INT64_MAX) {
        return BAD;
    }
    *out = (int64_t)v;
    return OK;
}

/* skip() with the scalars that fill most columns (integers, nil, booleans, floats) taken inline: the same checks. */
static inline int
check_value(Cursor *c)
{
    if (c->p < c->end) {
        uint8_t b = *c->p;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            c->p += 1;
            return OK;
        }
        size_t size = b == 0xcc || b == 0xd0 ? 2 : b == 0xcd || b == 0xd1 ? 3 : b == 0xca || b == 0xce || b == 0xd2 ? 5
                      : b == 0xcb || b == 0xcf || b == 0xd3 ? 9 : 0;
        if (size && need(c, size)) {
            c->p += size;
            return OK;
        }
    }
    return skip(c, 0);
}

/* read_columns (_msgpack_read.h), every value checked by check_value: the same result; and BAD too if a kind, name,
   ts or dur is not an integer of 64 bits (so that a frame refused changes no counter's state). */
static int
check_columns(const uint8_t *payload, size_t payload_len, Py_ssize_t count, const int column_of[COLUMNS],
              Cursor column[COLUMNS])
{
    Cursor c = {payload, payload + payload_len};
    uint32_t columns;
    if (read_container(&c, 0, &columns) != OK || columns != COLUMNS) {
        return BAD;
    }
    for (int i = 0; i < COLUMNS; i++) {
        uint32_t n;
        if (read_container(&c, 0, &n) != OK || n != (uint64_t)count) {
            return BAD;
        }
        int is_args = 0;
        for (int which = 0; which < COLUMNS; which++) {
            if (column_of[which] == i) {
                column[which] = c;
                is_args = which == ARGS;
            }
        }
        for (uint32_t k = 0; k < n; k++) {
            int64_t value;
            if ((is_args ? check_value(&c) : read_i64(&c, &value)) != OK) {
                return BAD;
            }
        }
    }
    return c.p == c.end ? OK : BAD; /* trailing bytes: msgpack-python refuses them */
}

/* Past one value that skip() has checked already (read_columns did): lengths only, no check of what they hold. */
static int
pass(Cursor *c, int depth)
{
    if (!need(c, 1) || depth > MAX_DEPTH) {
        return BAD;
    }
    uint8_t b = *c->p;
    uint64_t n;
    size_t head;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        c->p += 1;
        return OK;
    }
    if ((b & 0xe0) == 0xa0) {
        head = 1;
        n = b & 0x1f;
    }
    else if ((b & 0xf0) == 0x80 || (b & 0xf0) == 0x90 || (b >= 0xdc && b <= 0xdf)) {
        int map = (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
        uint32_t items;
        if (read_container(c, map, &items) != OK) {
            return BAD;
        }
        for (uint64_t i = 0; i < (uint64_t)items * (map ? 2 : 1); i++) {
            if (pass(c, depth + 1) != OK) {
                return BAD;
            }
        }
        return OK;
    }
    else {
        switch (b) {
        case 0xcc: case 0xd0: case 0xd4: head = 2; n = b == 0xd4; break;
        case 0xcd: case 0xd1: case 0xd5: head = b == 0xd5 ? 2 : 3; n = b == 0xd5 ? 2 : 0; break;
        case 0xca: case 0xce: case 0xd2: head = 5; n = 0; break;
        case 0xcb: case 0xcf: case 0xd3: head = 9; n = 0; break;
        case 0xd6: head = 2; n = 4; break;
        case 0xd7: head = 2; n = 8; break;
        case 0xd8: head = 2; n = 16; break;
        case 0xc4: case 0xd9: head = 2; if (!need(c, 2)) return BAD; n = c->p[1]; break;
        case 0xc5: case 0xda: head = 3; if (!need(c, 3)) return BAD; n = be(c->p + 1, 2); break;
        case 0xc6: case 0xdb: head = 5; if (!need(c, 5)) return BAD; n = be(c->p + 1, 4); break;
        case 0xc7: head = 3; if (!need(c, 3)) return BAD; n = c->p[1]; break;
        case 0xc8: head = 4; if (!need(c, 4)) return BAD; n = be(c->p + 1, 2); break;
        case 0xc9: head = 6; if (!need(c, 6)) return BAD; n = be(c->p + 1, 4); break;
        default: return BAD;
        }
    }
    if (!need(c, head + n)) {
        return BAD;
    }
    c->p += head + n;
    return OK;
}

typedef struct {
    const char *kinds;
    Py_ssize_t kind_count;
    const char *names[MAX_GROUPS];
    Py_ssize_t name_count[MAX_GROUPS];
    Py_ssize_t groups;
    const char *counters; /* COUNTER_SLOTS int64s per name id */
    Py_ssize_t counter_count;
    const char *thresholds; /* doubles */
    Py_ssize_t threshold_count;
    char *state; /* STATE_SLOTS int64s per name id, written */
    Py_ssize_t state_count;
} Criteria;

static inline void
set_i64(char *table, Py_ssize_t slot, int64_t v)
{
    memcpy(table + slot * (Py_ssize_t)sizeof(int64_t), &v, sizeof(v));
}

static inline double
get_double(const char *table, Py_ssize_t slot)
{
    double v;
    memcpy(&v, table + slot * (Py_ssize_t)sizeof(double), sizeof(v));
    return v;
}

/* A counter's "value" in its args map (an integer or a float; a key given twice counts with its last value): 1, or
   0 if there is none. */
static int
counter_value(Cursor args, double *value)
{
    uint32_t items;
    int found = 0;
    if (read_container(&args, 1, &items) != OK) {
        return 0;
    }
    for (uint32_t i = 0; i < items; i++) {
        Cursor key = args;
        int64_t n = str_length(&key);
        if (n < 0 || !key_is(key.p, n, "value")) {
            if (skip(&args, 1) != OK || skip(&args, 1) != OK) {
                return 0;
            }
            continue;
        }
        args.p = key.p + n;
        Cursor at = args;
        i128 integer;
        found = 0;
        if (need(&at, 1) && (*at.p == 0xca || *at.p == 0xcb)) {
            if (*at.p == 0xca && need(&at, 5)) {
                uint32_t bits = (uint32_t)be(at.p + 1, 4);
                float f;
                memcpy(&f, &bits, sizeof(f));
                *value = (double)f;
                found = 1;
            }
            else if (*at.p == 0xcb && need(&at, 9)) {
                uint64_t bits = be(at.p + 1, 8);
                memcpy(value, &bits, sizeof(*value));
                found = 1;
            }
        }
        else if (read_int(&at, &integer) == OK) {
            *value = (double)integer;
            found = 1;
        }
        if (skip(&args, 1) != OK) {
            return 0;
        }
    }
    return found;
}

/* Whether a counter's value passes other thresholds of its name than the last value of that name did (or that value
   was on another track, or there was none): its signature, how many "above" thresholds it is above and how many
   "below" thresholds it is below, is kept as the name's state. A value that passes the same ones is no candidate:
   no rule's crossing can be in it. */
static int
counter_changed(Cursor args, const Criteria *criteria, int64_t name, uint32_t track)
{
    double value;
    if (name >= criteria->counter_count || !counter_value(args, &value)) {
        return 0;
    }
    Py_ssize_t at = (Py_ssize_t)name * COUNTER_SLOTS;
    int64_t start = get_i64(criteria->counters, at), above = get_i64(criteria->counters, at + 1),
            below = get_i64(criteria->counters, at + 2);
    if (start < 0 || above < 0 || below < 0 || start > criteria->threshold_count ||
        above > criteria->threshold_count - start || below > criteria->threshold_count - start - above) {
        return 0;
    }
    int64_t passed_above = 0, passed_below = 0;
    for (int64_t i = 0; i < above; i++) {
        passed_above += value > get_double(criteria->thresholds, (Py_ssize_t)(start + i));
    }
    for (int64_t i = 0; i < below; i++) {
        passed_below += value < get_double(criteria->thresholds, (Py_ssize_t)(start + above + i));
    }
    int64_t signature = passed_above * (below + 1) + passed_below;
    if (name >= criteria->state_count) {
        return 1;
    }
    Py_ssize_t slot = (Py_ssize_t)name * STATE_SLOTS;
    if (get_i64(criteria->state, slot) == (int64_t)track + 1 && get_i64(criteria->state, slot + 1) == signature) {
        return 0;
    }
    set_i64(criteria->state, slot, (int64_t)track + 1);
    set_i64(criteria->state, slot + 1, signature);
    return 1;
}

/* Whether an event meets a criterion; a counter's state is brought up to date first, whatever else holds. */
static inline int
meets(int64_t min_dur, int64_t flags, int64_t dur, Cursor args, const Criteria *criteria, int64_t name,
      uint32_t track)
{
    int changed = (flags & FLAG_CROSSING) && criteria != NULL && counter_changed(args, criteria, name, track);
    return changed || (min_dur != NEVER && dur >= min_dur) || ((flags & FLAG_STATUS_ERROR) && status_is_error(args));
}

/* The candidates of a payload check_columns took into `out`, OUT_SLOTS int64s each (BAD: not reached). */
static int
candidates(const uint8_t *payload, Cursor column[COLUMNS], Py_ssize_t count, uint32_t track,
           const Criteria *criteria, Out *out)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t kind, name, ts, dur;
        read_i64(&column[KIND], &kind);
        read_i64(&column[NAME], &name);
        read_i64(&column[TS], &ts);
        read_i64(&column[DUR], &dur);
        Cursor args = column[ARGS];
        if (pass(&column[ARGS], 0) != OK) {
            return BAD;
        }
        if (kind < 0 || kind >= criteria->kind_count) {
            continue;
        }
        Py_ssize_t at = (Py_ssize_t)kind * KIND_SLOTS;
        int64_t kind_flags = get_i64(criteria->kinds, at + 1) & ~(int64_t)FLAG_CROSSING; /* (a name's only) */
        int hit = meets(get_i64(criteria->kinds, at), kind_flags, dur, args, NULL, name, track);
        int64_t group = get_i64(criteria->kinds, at + 2);
        if (group >= 0 && group < criteria->groups && name >= 0 && name < criteria->name_count[group]) {
            const char *names = criteria->names[group];
            Py_ssize_t slot = (Py_ssize_t)name * NAME_SLOTS;
            int64_t flags = get_i64(names, slot + 1);
            if (!hit || (flags & FLAG_CROSSING)) { /* (a counter's state is kept up to date) */
                hit = meets(get_i64(names, slot), flags, dur, args, criteria, name, track) || hit;
            }
        }
        if (hit) {
            int64_t row[OUT_SLOTS] = {(int64_t)i, kind, name, ts, dur, (int64_t)(args.p - payload),
                                      (int64_t)(column[ARGS].p - payload)};
            put(out, (const char *)row, sizeof(row));
        }
    }
    return OK;
}

/* The buffers match_frame and match_run hold while they run without the GIL. */
enum { PAYLOAD, KINDS, COUNTERS, THRESHOLDS, STATE, HELD };

typedef struct {
    Py_buffer held[HELD], names[MAX_GROUPS];
    Py_ssize_t taken, groups; /* how many of each are held (released by release_criteria) */
} Held;

/* Hold the payload and the criteria's buffers (args[arg_of[i]] for each of HELD, the tuple `names`), and point
   `criteria` at them. -1 with an exception set on failure: what was held is released by release_criteria all the
   same. */
static int
hold_criteria(Held *h, PyObject *const *args, const int arg_of[HELD], PyObject *names, Criteria *criteria)
{
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) > MAX_GROUPS) {
        PyErr_Format(PyExc_ValueError, "names must be a tuple of at most %d buffers", MAX_GROUPS);
        return -1;
    }
    for (; h->taken < HELD; h->taken++) {
        int flags = h->taken == STATE ? PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(args[arg_of[h->taken]], &h->held[h->taken], flags) < 0) {
            return -1;
        }
    }
    for (; h->groups < PyTuple_GET_SIZE(names); h->groups++) {
        Py_buffer *group = &h->names[h->groups];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(names, h->groups), group, PyBUF_SIMPLE) < 0) {
            return -1;
        }
        criteria->names[h->groups] = group->buf;
        criteria->name_count[h->groups] = group->len / (Py_ssize_t)(NAME_SLOTS * sizeof(int64_t));
    }
    criteria->kinds = h->held[KINDS].buf;
    criteria->kind_count = h->held[KINDS].len / (Py_ssize_t)(KIND_SLOTS * sizeof(int64_t));
    criteria->groups = h->groups;
    criteria->counters = h->held[COUNTERS].buf;
    criteria->counter_count = h->held[COUNTERS].len / (Py_ssize_t)(COUNTER_SLOTS * sizeof(int64_t));
    criteria->thresholds = h->held[THRESHOLDS].buf;
    criteria->threshold_count = h->held[THRESHOLDS].len / (Py_ssize_t)sizeof(double);
    criteria->state = h->held[STATE].buf;
    criteria->state_count = h->held[STATE].len / (Py_ssize_t)(STATE_SLOTS * sizeof(int64_t));
    return 0;
}

static void
release_criteria(Held *h)
{
    for (Py_ssize_t i = 0; i < h->groups; i++) {
        PyBuffer_Release(&h->names[i]);
    }
    for (Py_ssize_t i = 0; i < h->taken; i++) {
        PyBuffer_Release(&h->held[i]);
    }
}

static PyObject *
match_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const int arg_of[HELD] = {0, 4, 6, 7, 8};
    Held h = {0};
    Py_ssize_t count;
    int column_of[COLUMNS];
    Criteria criteria = {0};
    Out out = {0};
    PyObject *result = NULL;
    int status;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "match_frame(payload, count, columns, track, kinds, names, counters, thresholds, state)");
        return NULL;
    }
    if (frame_shape(args[1], args[2], &count, column_of) < 0) {
        return NULL;
    }
    unsigned long track = PyLong_AsUnsignedLong(args[3]);
    if (track == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (track > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "track %lu does not fit in 32 bits", track);
        return NULL;
    }
    if (hold_criteria(&h, args, arg_of, args[5], &criteria) < 0) {
        goto done;
    }
    /* Nothing here touches a Python object: the buffers are held, so other threads (ingest) run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    Cursor column[COLUMNS];
    const uint8_t *payload = h.held[PAYLOAD].buf;
    status = check_columns(payload, (size_t)h.held[PAYLOAD].len, count, column_of, column);
    if (status == OK) {
        status = candidates(payload, column, count, (uint32_t)track, &criteria, &out);
    }
    Py_END_ALLOW_THREADS
    if (out.failed) {
        PyErr_NoMemory();
    }
    else if (status != OK) {
        result = Py_NewRef(Py_None);
    }
    else {
        result = PyBytes_FromStringAndSize(out.data ? out.data : "", (Py_ssize_t)out.len);
    }
done:
    free(out.data);
    release_criteria(&h);
    return result;
}

/* ---- a run of a segment's EVENTS frames ---- */

#define INDEX_ENTRY_SIZE 32 /* the segment's index entry (segments.py, "<IIIIQQ"), from the end of the buffer back */
#define FRAME_HEADER_SIZE 5 /* length (u32, the header included) and type */
#define EVENTS_HEADER_SIZE 24 /* header_size, flags (u16), track, count (u32), first_ts, last_ts (u64) */
#define RUN_SLOTS 8         /* per candidate: kind, name, ts, dur, args start and end in the buffer, track, first ts */

static inline uint64_t
le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

typedef struct {
    Py_ssize_t entries, events, position;
} RunRead;

/* The candidates of the EVENTS frames from index entry `entry` on, into `out` (RUN_SLOTS int64s each), while each
   begins where the one before ended (from `run->position`) and before `end`, and is one Events.decode_body takes and
   check_columns too. A frame that is not stops the run before it (the Python side reads it alone), as does a gap
   (session frames, for the decoder). */
static void
match_run_frames(const uint8_t *buffer, Py_ssize_t length, Py_ssize_t size, Py_ssize_t entries, Py_ssize_t entry,
                 Py_ssize_t end, const int column_of[COLUMNS], const Criteria *criteria, Out *out, RunRead *run)
{
    for (; entry < entries; entry++) {
        Py_ssize_t at = size - INDEX_ENTRY_SIZE * (entry + 1);
        if (size > length || at < 0) {
            return;
        }
        const uint8_t *e = buffer + at;
        Py_ssize_t offset = (Py_ssize_t)le(e, 4), frame_length = (Py_ssize_t)le(e + 4, 4);
        Py_ssize_t indexed = (Py_ssize_t)le(e + 12, 4);
        if (offset >= end || offset != run->position || frame_length < FRAME_HEADER_SIZE + EVENTS_HEADER_SIZE ||
            offset + frame_length > length) {
            return;
        }
        const uint8_t *body = buffer + offset + FRAME_HEADER_SIZE;
        Py_ssize_t body_length = frame_length - FRAME_HEADER_SIZE;
        Py_ssize_t header_size = (Py_ssize_t)le(body, 2);
        uint32_t track = (uint32_t)le(body + 4, 4);
        Py_ssize_t count = (Py_ssize_t)le(body + 8, 4);
        uint64_t first_ts = le(body + 12, 8), last_ts = le(body + 20, 8);
        if (header_size < EVENTS_HEADER_SIZE || header_size > body_length || count == 0 ||
            count > body_length - header_size || first_ts > last_ts || first_ts > (uint64_t)INT64_MAX) {
            return;
        }
        const uint8_t *payload = body + header_size;
        Cursor column[COLUMNS];
        if (check_columns(payload, (size_t)(body_length - header_size), count, column_of, column) != OK) {
            return;
        }
        size_t before = out->len;
        Out found = {0};
        int status = candidates(payload, column, count, track, criteria, &found);
        if (status != OK || found.failed) {
            free(found.data);
            out->len = before;
            out->failed |= found.failed;
            return;
        }
        for (size_t k = 0; k < found.len; k += OUT_SLOTS * sizeof(int64_t)) {
            int64_t row[OUT_SLOTS];
            memcpy(row, found.data + k, sizeof(row));
            int64_t shift = (int64_t)(payload - buffer);
            int64_t moved[RUN_SLOTS] = {row[1], row[2], row[3], row[4], row[5] + shift, row[6] + shift,
                                        (int64_t)track, (int64_t)first_ts};
            put(out, (const char *)moved, sizeof(moved));
        }
        free(found.data);
        if (out->failed) {
            return;
        }
        run->entries += 1;
        run->events += indexed;
        run->position = offset + frame_length;
    }
}

/* match_run(buffer, size, entries, entry, position, end, columns, kinds, names, counters, thresholds, state) */
static PyObject *
match_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    enum { A_BUFFER, A_SIZE, A_ENTRIES, A_ENTRY, A_POSITION, A_END, A_COLUMNS, A_KINDS, A_NAMES, A_COUNTERS,
           A_THRESHOLDS, A_STATE, A_COUNT };
    static const int arg_of[HELD] = {A_BUFFER, A_KINDS, A_COUNTERS, A_THRESHOLDS, A_STATE};
    Held h = {0};
    Py_ssize_t numbers[4];
    int column_of[COLUMNS];
    Criteria criteria = {0};
    Out out = {0};
    RunRead run = {0};
    PyObject *result = NULL, *one = NULL;
    if (nargs != A_COUNT) {
        PyErr_SetString(PyExc_TypeError, "match_run(buffer, size, entries, entry, position, end, columns, kinds, "
                                         "names, counters, thresholds, state)");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        numbers[i] = PyLong_AsSsize_t(args[A_SIZE + i]);
        if (numbers[i] < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "size, entries, entry and position must be at least 0");
            }
            return NULL;
        }
    }
    Py_ssize_t end = PyLong_AsSsize_t(args[A_END]);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t unused;
    one = PyLong_FromLong(1);
    if (one == NULL || frame_shape(one, args[A_COLUMNS], &unused, column_of) < 0) {
        Py_XDECREF(one);
        return NULL;
    }
    Py_DECREF(one);
    if (hold_criteria(&h, args, arg_of, args[A_NAMES], &criteria) < 0) {
        goto done;
    }
    run.position = numbers[3];
    /* As match_frame: the buffers are held, no Python object is touched, ingest runs meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    match_run_frames(h.held[PAYLOAD].buf, h.held[PAYLOAD].len, numbers[0], numbers[1], numbers[2], end, column_of,
                     &criteria, &out, &run);
    Py_END_ALLOW_THREADS
    if (out.failed) {
        PyErr_NoMemory();
    }
    else {
        result = Py_BuildValue("(y#nnn)", out.data ? out.data : "", (Py_ssize_t)out.len, run.entries, run.events,
                               run.position);
    }
done:
    free(out.data);
    release_criteria(&h);
    return result;
}

static PyMethodDef module_methods[] = {
    {"match_run", (PyCFunction)(void (*)(void))match_run, METH_FASTCALL,
     "match_run(buffer, size, entries, entry, position, end, columns, kinds, names, counters, thresholds, state) -> "
     "(bytes of int64 (kind, name, ts, dur, args start, args end, track, first ts) per candidate, entries read, "
     "their events, position after them): the run of EVENTS frames from index entry `entry` (see frame_match.py)."},
    {"match_frame", (PyCFunction)(void (*)(void))match_frame, METH_FASTCALL,
     "match_frame(payload, count, columns, track, kinds, names, counters, thresholds, state) -> bytes of int64 "
     "(index, kind, name, ts, dur, args start, args end) per candidate, or None: the payload is left to the Python "
     "twin (frame_match.py)."},
    {NULL, NULL, 0, NULL},
};

/* No state: each interpreter can import it, with a GIL of its own. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef match_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.incidents._match",
    .m_doc = "The rules' first pass over a stored EVENTS frame's payload, in C (see frame_match.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__match(void)
{
    return PyModuleDef_Init(&match_module);
}
