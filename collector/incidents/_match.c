/* The rules' first pass over a stored EVENTS frame, in C: the events that may meet a rule (its candidates), found
straight from the frame's msgpack payload without a Python object per event, as frame_match.py's Python twin
(_candidates_py, which defines the behaviour; the tests hold both to the same results) finds them.

The payload comes from the network: its structure is checked whole (walk(): every length against the bytes left,
depth-limited; str's bytes and map keys' types are not checked there) before any event is judged, and its columns
read once. A payload it refuses, or one nested deeper than the C reader goes, gives None: the Python twin decides
then. An event's args are read strictly (skip(), as msgpack-python reads them) only where a criterion needs them.

Then the rules' verdicts on a run's candidates (rule_verdicts.py's twin, rule_verdicts_py, defines them): each rule
a candidate may meet judged where no Python is needed, a rule's places among its firings of a step taken, the rest
counted; the candidates' args and the tables are read bounds-checked as the payload is.

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

static int walk(Cursor *c);

/* Per first byte, the size of a value that needs no walk() (nil, booleans, integers, floats, fixstrs); 0: others. */
static const uint8_t FLAT_SIZE[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
    1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 5, 9, 2, 3, 5, 9,
    2, 3, 5, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* One value that needs no walk() (FLAT_SIZE's, and strs of up to 255 bytes): past it, or 0. */
static inline int
flat(const uint8_t **at, const uint8_t *end)
{
    const uint8_t *p = *at;
    if (p >= end) {
        return 0;
    }
    size_t size = FLAT_SIZE[*p];
    if (size == 0) {
        if (*p != 0xd9 || end - p < 2) {
            return 0;
        }
        size = 2 + (size_t)p[1];
    }
    if ((size_t)(end - p) < size) {
        return 0;
    }
    *at = p + size;
    return 1;
}

/* walk() with the values that fill most args taken inline: those flat() takes, and a fixmap or fixarray of them (a
   span's ids, a counter's value, a message's values). The same result. */
static inline int
step_over(Cursor *c)
{
    const uint8_t *p = c->p;
    if (flat(&p, c->end)) {
        c->p = p;
        return OK;
    }
    if (p < c->end && (*p & 0xe0) == 0x80) { /* (a fixmap's items at depth 1: within MAX_DEPTH) */
        unsigned items = (*p & 0x0f) << ((*p & 0x10) ? 0 : 1);
        p++;
        while (items > 0 && flat(&p, c->end)) {
            items--;
        }
        if (items == 0) {
            c->p = p;
            return OK;
        }
    }
    return walk(c);
}

/* Whether the args value under the cursor (checked by walk() already; the cursor is a copy) is a map whose "status"
   is the str "error" (its bytes: a str that is not UTF-8 is not "error"). A key given twice counts with its last
   value, as msgpack-python keeps it. The rest of the map is not read: it may not read strictly (a candidate's args
   are read so by the verdicts, which then find no status). */
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
            if (step_over(&args) != OK || step_over(&args) != OK) {
                return 0;
            }
            continue;
        }
        args.p = key.p + n;
        Cursor value = args;
        int64_t m = str_length(&value);
        error = m >= 0 && key_is(value.p, m, "error");
        if (step_over(&args) != OK) {
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

/* Past one value, its structure checked as msgpack-python reads it with str's bytes taken as they are (decoded with
   "surrogateescape") and maps' keys never hashed (read as pairs): every length against the bytes left, no byte that
   msgpack never uses, an extension's code and a timestamp's size and nanoseconds as skip() checks them, and no value
   deeper than MAX_DEPTH (the top value at 0, a container's items one deeper). What it does not check, a str's UTF-8
   and a map key's type, skip() does where a value is read: a candidate's args are read alone, strictly. Iterative:
   a stack of the items left at each depth. */
static int
walk(Cursor *c)
{
    uint64_t left[MAX_DEPTH + 2];
    int depth = 0;
    const uint8_t *p = c->p, *end = c->end;
    left[0] = 1;
    for (;;) {
        while (left[depth] == 0) {
            if (depth == 0) {
                c->p = p;
                return OK;
            }
            depth--;
        }
        left[depth]--;
        if (p >= end || depth > MAX_DEPTH) {
            return BAD;
        }
        uint8_t b = *p;
        size_t room = (size_t)(end - p);
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            p += 1;
            continue;
        }
        if ((b & 0xe0) == 0xa0) {
            size_t n = (size_t)(b & 0x1f);
            if (room < 1 + n) {
                return BAD;
            }
            p += 1 + n;
            continue;
        }
        if ((b & 0xe0) == 0x80 || (b >= 0xdc && b <= 0xdf)) { /* fixmap, fixarray, array 16/32, map 16/32 */
            int map = (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
            uint64_t items;
            if (b <= 0x9f) {
                items = b & 0x0f;
                p += 1;
            }
            else {
                size_t size = b == 0xdc || b == 0xde ? 2 : 4;
                if (room < 1 + size) {
                    return BAD;
                }
                items = be(p + 1, (int)size);
                p += 1 + size;
            }
            if (items) {
                left[++depth] = map ? 2 * items : items;
            }
            continue;
        }
        size_t head;
        uint64_t n;
        int ext;
        if (value_head(p, room, &head, &n, &ext) != OK) { /* (a str 8/16/32's bytes taken as they are) */
            return BAD;
        }
        if (ext) {
            Cursor at = {p, end};
            if (skip(&at, 0) != OK) { /* (its code and a timestamp's size and nanoseconds, as skip() checks them) */
                return BAD;
            }
        }
        p += head + n;
    }
}

/* read_i64 with the integers that fill most columns (fixints, uint8 to uint32) taken inline: the same result. */
static inline int
fast_i64(Cursor *c, int64_t *out)
{
    if (c->p < c->end) {
        uint8_t b = *c->p;
        if (b <= 0x7f || b >= 0xe0) {
            *out = (int8_t)b; /* (0x00-0x7f: 0 to 127; 0xe0-0xff: -32 to -1) */
            c->p += 1;
            return OK;
        }
        size_t left = (size_t)(c->end - c->p);
        if (b == 0xcc && left >= 2) {
            *out = c->p[1];
            c->p += 2;
            return OK;
        }
        if (b == 0xcd && left >= 3) {
            *out = (int64_t)be(c->p + 1, 2);
            c->p += 3;
            return OK;
        }
        if (b == 0xce && left >= 5) {
            *out = (int64_t)be(c->p + 1, 4);
            c->p += 5;
            return OK;
        }
    }
    return read_i64(c, out);
}

/* Per first byte, the size of an integer of 64 bits (0: none, or 0xcf, a uint64 read_i64 checks the range of). */
static const uint8_t INT_SIZE[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 0,
    2, 3, 5, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* A frame's columns read once: per event its kind, name and dur (column `which` at ints + which * cap), where its
   ts is in the payload (read for a candidate alone) and where its args value starts (args[count]: where the last
   ends). Kept across a run's frames (grown as needed). */
typedef struct {
    int64_t *ints;
    const uint8_t **args, *end; /* (end: the payload's) */
    size_t cap;
} Columns;

/* Room for `count` events; -1 if out of memory. */
static int
columns_room(Columns *cols, size_t count)
{
    if (cols->cap > count) {
        return 0;
    }
    free(cols->ints);
    free(cols->args);
    size_t cap = count + 1; /* (args has count + 1 places; and none is allocated empty) */
    cols->ints = malloc(cap * 4 * sizeof(int64_t));
    cols->args = malloc(cap * sizeof(const uint8_t *));
    cols->cap = cols->ints && cols->args ? cap : 0;
    return cols->cap ? 0 : -1;
}

/* The payload as five columns of `count` values (read_columns, _msgpack_read.h), each args value checked by walk():
   BAD if msgpack-python would refuse the payload read so (with str's bytes as they are, maps as pairs), or if a kind,
   name, ts or dur is not an integer of 64 bits (so that a frame refused changes no counter's state). The values are
   kept in `cols`, read once. NO_ROOM: out of memory. */
#define NO_ROOM (-2)
static int
read_frame(const uint8_t *payload, size_t payload_len, Py_ssize_t count, const int column_of[COLUMNS], Columns *cols)
{
    Cursor c = {payload, payload + payload_len};
    uint32_t columns;
    cols->end = c.end;
    if (read_container(&c, 0, &columns) != OK || columns != COLUMNS) {
        return BAD;
    }
    if ((size_t)count > payload_len / COLUMNS) { /* (each value takes a byte at least: not there) */
        return BAD;
    }
    if (columns_room(cols, (size_t)count) < 0) {
        return NO_ROOM;
    }
    for (int i = 0; i < COLUMNS; i++) {
        uint32_t n;
        if (read_container(&c, 0, &n) != OK || n != (uint64_t)count) {
            return BAD;
        }
        int which = 0;
        while (column_of[which] != i) {
            which++;
        }
        if (which == ARGS) {
            for (uint32_t k = 0; k < n; k++) {
                cols->args[k] = c.p;
                if (step_over(&c) != OK) {
                    return BAD;
                }
            }
            cols->args[n] = c.p;
            continue;
        }
        int64_t *values = cols->ints + (size_t)which * cols->cap;
        if (which == TS) { /* where each is (read for a candidate alone): past each by its size, checked as read_i64 */
            for (uint32_t k = 0; k < n; k++) {
                size_t size = c.p < c.end ? INT_SIZE[*c.p] : 0;
                values[k] = c.p - payload;
                if (size && (size_t)(c.end - c.p) >= size) {
                    c.p += size;
                    continue;
                }
                int64_t value;
                if (read_i64(&c, &value) != OK) {
                    return BAD;
                }
            }
            continue;
        }
        uint32_t k = 0;
        uint64_t word;
        /* Eight positive fixints at a time (kind and name ids are, most often), while they come so. */
        while (n - k >= 8 && (size_t)(c.end - c.p) >= 8 &&
               (memcpy(&word, c.p, 8), (word & 0x8080808080808080ULL) == 0)) {
            for (int j = 0; j < 8; j++) {
                values[k + j] = c.p[j];
            }
            c.p += 8;
            k += 8;
        }
        for (; k < n; k++) {
            if (fast_i64(&c, &values[k]) != OK) {
                return BAD;
            }
        }
    }
    return c.p == c.end ? OK : BAD; /* trailing bytes: msgpack-python refuses them */
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
   0 if there is none. The args read strictly (skip() took them). */
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
            if (step_over(&args) != OK || step_over(&args) != OK) {
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
        else if (read_int(&at, &integer) == OK) { /* (int64 or uint64: converted as one, not as 128 bits) */
            *value = integer < 0 ? (double)(int64_t)integer : (double)(uint64_t)integer;
            found = 1;
        }
        if (step_over(&args) != OK) {
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

/* Whether an args value (walk() checked it and where it ends) reads strictly too, as skip() (msgpack-python) reads
   it: UTF-8 strs, hashable keys. Asked once an event, where a counter's criterion reads it (*known: -1 till then). */
/* strictly() for one flat() value or a fixmap or fixarray of them (a counter's args, most often): 1 or 0, or -1 if
   the args are not so (skip() reads them). What skip() checks of them: their strs' UTF-8. */
static inline int
flat_strictly(Cursor args)
{
    const uint8_t *p = args.p;
    unsigned items = 1;
    if (p < args.end && (*p & 0xe0) == 0x80) {
        items = (*p & 0x0f) << ((*p & 0x10) ? 0 : 1);
        p++;
    }
    for (; items > 0; items--) {
        const uint8_t *at = p;
        if (!flat(&p, args.end)) {
            return -1;
        }
        if (((*at & 0xe0) == 0xa0 && !is_utf8(at + 1, *at & 0x1f)) || (*at == 0xd9 && !is_utf8(at + 2, at[1]))) {
            return 0;
        }
    }
    return p == args.end;
}

static inline int
strictly(Cursor args, int *known)
{
    if (*known < 0) {
        *known = flat_strictly(args);
    }
    if (*known < 0) {
        Cursor whole = args;
        *known = skip(&whole, 0) == OK && whole.p == whole.end;
    }
    return *known;
}

/* Whether an event meets a criterion; a counter's state is brought up to date first, whatever else holds. A counter's
   value is read only from args that read strictly (as the verdicts and the judge read a candidate's: else they have
   none), so that its state follows the values they see; a status is looked for in any args walk() took (an event
   that says "error" in args that do not read strictly is a candidate all the same: the verdicts find no status). */
static inline int
meets(int64_t min_dur, int64_t flags, int64_t dur, Cursor args, int *strict, const Criteria *criteria, int64_t name,
      uint32_t track)
{
    int changed = (flags & FLAG_CROSSING) && criteria != NULL && strictly(args, strict) &&
                  counter_changed(args, criteria, name, track);
    return changed || (min_dur != NEVER && dur >= min_dur) || ((flags & FLAG_STATUS_ERROR) && status_is_error(args));
}

/* The candidates of a payload read_frame took into `cols`, into `out` (OUT_SLOTS int64s each). */
static void
candidates(const uint8_t *payload, const Columns *cols, Py_ssize_t count, uint32_t track, const Criteria *criteria,
           Out *out)
{
    const int64_t *kinds = cols->ints + KIND * cols->cap, *names = cols->ints + NAME * cols->cap,
                  *offsets = cols->ints + TS * cols->cap, *durations = cols->ints + DUR * cols->cap;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t kind = kinds[i], name = names[i], dur = durations[i];
        if (kind < 0 || kind >= criteria->kind_count) {
            continue;
        }
        Py_ssize_t at = (Py_ssize_t)kind * KIND_SLOTS;
        int64_t kind_min = get_i64(criteria->kinds, at);
        int64_t kind_flags = get_i64(criteria->kinds, at + 1) & ~(int64_t)FLAG_CROSSING; /* (a name's only) */
        int64_t group = get_i64(criteria->kinds, at + 2), name_min = NEVER, flags = 0;
        const char *group_names = NULL;
        Py_ssize_t slot = 0;
        if (group >= 0 && group < criteria->groups && name >= 0 && name < criteria->name_count[group]) {
            group_names = criteria->names[group];
            slot = (Py_ssize_t)name * NAME_SLOTS;
            name_min = get_i64(group_names, slot);
            flags = get_i64(group_names, slot + 1);
        }
        if (!((kind_flags | flags) & (FLAG_STATUS_ERROR | FLAG_CROSSING)) && !(kind_min != NEVER && dur >= kind_min) &&
            !(name_min != NEVER && dur >= name_min)) {
            continue; /* (most events: what meets() would say, without its args) */
        }
        Cursor args = {cols->args[i], cols->args[i + 1]};
        int strict = -1;
        int hit = meets(kind_min, kind_flags, dur, args, &strict, NULL, name, track);
        if (group_names != NULL && (!hit || (flags & FLAG_CROSSING))) { /* (a counter's state is kept up to date) */
            hit = meets(name_min, flags, dur, args, &strict, criteria, name, track) || hit;
        }
        if (hit) {
            Cursor at = {payload + offsets[i], cols->end};
            int64_t ts = 0;
            read_i64(&at, &ts); /* (read_frame checked it) */
            int64_t row[OUT_SLOTS] = {(int64_t)i, kind, name, ts, dur, (int64_t)(cols->args[i] - payload),
                                      (int64_t)(cols->args[i + 1] - payload)};
            put(out, (const char *)row, sizeof(row));
        }
    }
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
    Columns cols = {0};
    const uint8_t *payload = h.held[PAYLOAD].buf;
    size_t payload_len = (size_t)h.held[PAYLOAD].len;
    status = read_frame(payload, payload_len, count, column_of, &cols);
    if (status == OK) {
        candidates(payload, &cols, count, (uint32_t)track, &criteria, &out);
    }
    out.failed |= status == NO_ROOM;
    free(cols.ints);
    free(cols.args);
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
   read_frame too. A frame that is not stops the run before it (the Python side reads it alone), as does a gap
   (session frames, for the decoder). */
static void
match_run_frames(const uint8_t *buffer, Py_ssize_t length, Py_ssize_t size, Py_ssize_t entries, Py_ssize_t entry,
                 Py_ssize_t end, const int column_of[COLUMNS], const Criteria *criteria, Columns *cols, Out *out,
                 RunRead *run)
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
        size_t payload_len = (size_t)(body_length - header_size);
        int status = read_frame(payload, payload_len, count, column_of, cols);
        if (status != OK) {
            out->failed |= status == NO_ROOM;
            return;
        }
        Out found = {0};
        candidates(payload, cols, count, track, criteria, &found);
        if (found.failed) {
            free(found.data);
            out->failed = 1;
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
    Columns cols = {0};
    match_run_frames(h.held[PAYLOAD].buf, h.held[PAYLOAD].len, numbers[0], numbers[1], numbers[2], end, column_of,
                     &criteria, &cols, &out, &run);
    free(cols.ints);
    free(cols.args);
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

/* ---- the rules' verdicts on a run's candidates (rule_verdicts.py defines them: rule_verdicts_py) ---- */

#define ENTRY_SLOTS 3      /* per entry: the rule's place, least duration, test */
#define KIND_ENTRY_SLOTS 5 /* per kind id: entries' start and count, name group (-1: none), 1 if shaped "span", its
                              render program (-1: none) */
#define NAME_ENTRY_SLOTS 3 /* per name id of a group: entries' start and count, its counter's key (-1: none) */
#define LIMIT_SLOTS 4      /* doubles per counter entry: 1 if it has "above", above, 1 if it has "below", below */
#define LOG_SLOTS 3        /* per counter's value: the candidate's index in the run, its track, its counter's key */
#define VERDICT_SLOTS 3    /* per verdict: the candidate's index in the run, the rule's place, MADE or JUDGE */
#define TEST_LONG 1
#define TEST_ERROR 2
#define TEST_ALWAYS 3
#define TEST_ASK 4
#define TEST_CROSSES 5
#define TEST_TEXT 6
#define VERDICT_MADE 1
#define VERDICT_JUDGE 2
#define MAX_AHEAD_NS ((i128)60 * 1000000000)          /* admission.py */
#define MAX_DURATION_NS ((i128)24 * 3600 * 1000000000) /* admission.py */

typedef struct {
    const char *entries, *kinds, *names[MAX_GROUPS], *limits, *globs, *renders;
    Py_ssize_t entry_count, kind_count, name_count[MAX_GROUPS], groups, limit_count, glob_count, render_count;
    char *room, *surplus; /* int64 per rule's place, written */
    Py_ssize_t places;
    int counters; /* whether counters' crossings are judged here (else as TEST_ASK) */
} RuleTables;

/* Counters' last values during one call: (track, key) to a value, open addressing, never full (sized for every
   value the call can add). */
typedef struct {
    int64_t track, key;
    double value;
    int used;
} LastValue;

typedef struct {
    LastValue *slots;
    size_t mask;
} LastValues;

static LastValue *
last_value(const LastValues *v, int64_t track, int64_t key)
{
    uint64_t h = ((uint64_t)track * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)key * 0xC2B2AE3D27D4EB4FULL);
    size_t i = (size_t)(h ^ (h >> 29)) & v->mask;
    while (v->slots[i].used && (v->slots[i].track != track || v->slots[i].key != key)) {
        i = (i + 1) & v->mask;
    }
    return &v->slots[i];
}

static inline void
remember_value(const LastValues *v, int64_t track, int64_t key, double value)
{
    LastValue *slot = last_value(v, track, key);
    *slot = (LastValue){track, key, value, 1};
}

/* Whether a counter entry's limits (limits[index]) hold of `value`, the counter's last value being `before` (if
   `had`): it crossed "above" or "below" (judge.py). */
static int
crossed(const RuleTables *t, int64_t index, double value, int had, double before)
{
    if (index < 0 || index >= t->limit_count) {
        return 0;
    }
    Py_ssize_t at = (Py_ssize_t)index * LIMIT_SLOTS;
    double has_above = get_double(t->limits, at), above = get_double(t->limits, at + 1);
    double has_below = get_double(t->limits, at + 2), below = get_double(t->limits, at + 3);
    if (has_above == 1.0 && value > above && !(had && before > above)) {
        return 1;
    }
    return has_below == 1.0 && value < below && !(had && before < below);
}

/* A counter's "value" in the args in buffer[start:end], read as the judge reads them (one value filling the span
   exactly): 1, or 0 if there is none. */
static int
args_value(const uint8_t *buffer, Py_ssize_t length, int64_t start, int64_t end, double *value)
{
    if (start < 0 || start > end || end > length) {
        return 0;
    }
    Cursor args = {buffer + start, buffer + end}, whole = args;
    if (skip(&whole, 0) != OK || whole.p != whole.end) {
        return 0;
    }
    return counter_value(args, value);
}

/* A range of entries, or an empty one if it is not within them. */
static inline void
entry_range(const RuleTables *t, int64_t start, int64_t count, Py_ssize_t *from, Py_ssize_t *to)
{
    int ok = start >= 0 && count >= 0 && count <= t->entry_count - start;
    *from = ok ? (Py_ssize_t)start : 0;
    *to = ok ? (Py_ssize_t)(start + count) : 0;
}

/* Whether the args in buffer[start:end] are one map saying "status": "error", read as the judge reads them (one
   value filling the span exactly, as msgpack-python unpacks it). */
static int
args_say_error(const uint8_t *buffer, Py_ssize_t length, int64_t start, int64_t end)
{
    if (start < 0 || start > end || end > length) {
        return 0;
    }
    Cursor args = {buffer + start, buffer + end}, whole = args;
    if (skip(&whole, 0) != OK || whole.p != whole.end) {
        return 0;
    }
    return status_is_error(args);
}

/* ---- a message's text rendered and globbed (text_match.py defines both: render_text, glob_holds) ---- */

#define PART_LIT 1
#define PART_ANY 2
#define PART_STAR 3
#define PART_SET 4
#define PART_NEVER 5
#define PIECE_TEXT 1
#define PIECE_VALUE 2
#define MAX_CODE_POINT 0x10FFFF

/* The words of the program at `start` of a table of `count` int64s: [*from, *to); 0 if it is not within the table. */
static int
program(const char *table, Py_ssize_t count, int64_t start, Py_ssize_t *from, Py_ssize_t *to)
{
    if (start < 0 || start >= count) {
        return 0;
    }
    int64_t length = get_i64(table, (Py_ssize_t)start);
    if (length < 0 || length > count - start - 1) {
        return 0;
    }
    *from = (Py_ssize_t)start + 1;
    *to = *from + (Py_ssize_t)length;
    return 1;
}

static inline void
put_point(Out *text, uint32_t point)
{
    put(text, (const char *)&point, sizeof(point));
}

static inline uint32_t
point_at(const Out *text, size_t index)
{
    uint32_t point;
    memcpy(&point, text->data + index * sizeof(point), sizeof(point));
    return point;
}

/* Whether the table's words [from, from + n) (within it: the caller checked) are all code points. */
static int
points_valid(const char *table, Py_ssize_t from, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t point = get_i64(table, from + (Py_ssize_t)i);
        if (point < 0 || point > MAX_CODE_POINT) {
            return 0;
        }
    }
    return 1;
}

/* The table's words [from, from + n) as code points (points_valid() holds). */
static void
put_words(Out *text, const char *table, Py_ssize_t from, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        put_point(text, (uint32_t)get_i64(table, from + (Py_ssize_t)i));
    }
}

static void
put_ascii(Out *text, const char *s)
{
    for (; *s; s++) {
        put_point(text, (uint8_t)*s);
    }
}

/* A value checked by the caller (nil, a bool, an integer or a UTF-8 text: renderable()) as Python shows it. */
static void
put_value(Out *text, Cursor value)
{
    uint8_t b = *value.p;
    i128 integer;
    if (b == 0xc0 || b == 0xc2 || b == 0xc3) {
        put_ascii(text, b == 0xc0 ? "None" : b == 0xc2 ? "False" : "True");
    }
    else if (read_int(&value, &integer) == OK) {
        char digits[48];
        int n = 0;
        int negative = integer < 0;
        unsigned __int128 magnitude = negative ? (unsigned __int128)0 - (unsigned __int128)integer
                                               : (unsigned __int128)integer;
        do {
            digits[n++] = (char)('0' + (int)(magnitude % 10));
            magnitude /= 10;
        } while (magnitude);
        if (negative) {
            put_point(text, '-');
        }
        while (n > 0) {
            put_point(text, (uint8_t)digits[--n]);
        }
    }
    else {
        int64_t n = str_length(&value);
        const uint8_t *s = value.p, *end = value.p + (n > 0 ? n : 0);
        while (s < end) { /* (UTF-8 checked by skip(): every sequence whole) */
            uint8_t first = *s;
            int len = first < 0x80 ? 1 : (first & 0xe0) == 0xc0 ? 2 : (first & 0xf0) == 0xe0 ? 3 : 4;
            uint32_t point = len == 1 ? first : len == 2 ? first & 0x1fu : len == 3 ? first & 0x0fu : first & 0x07u;
            for (int k = 1; k < len && s + k < end; k++) {
                point = (point << 6) | (s[k] & 0x3fu);
            }
            put_point(text, point);
            s += len;
        }
    }
}

/* Whether a value is one put_value renders (nil, a bool, an integer, a text); the cursor moves past it if so. */
static int
renderable(Cursor *value)
{
    if (!need(value, 1)) {
        return 0;
    }
    uint8_t b = *value->p;
    i128 integer;
    if (b == 0xc0 || b == 0xc2 || b == 0xc3) {
        value->p += 1;
        return 1;
    }
    if (read_int(value, &integer) == OK) {
        return 1;
    }
    Cursor text = *value;
    int64_t n = str_length(&text);
    if (n < 0 || !is_utf8(text.p, (size_t)n)) {
        return 0;
    }
    value->p = text.p + n;
    return 1;
}

/* The text of the message whose args are buffer[start:end] by the render program at `at` (render_text): 1, or 0
   where Python renders it (see text_match.py). `values` holds a cursor per value, `text` the code points. */
static int
render_message(const RuleTables *t, int64_t at, const uint8_t *buffer, Py_ssize_t length, int64_t start, int64_t end,
               Out *values, Out *text)
{
    values->len = text->len = 0;
    if (start < 0 || start > end || end > length) {
        return 0;
    }
    Cursor args = {buffer + start, buffer + end}, whole = args;
    uint32_t items;
    if (skip(&whole, 0) != OK || whole.p != whole.end || read_container(&args, 0, &items) != OK) {
        return 0;
    }
    for (uint32_t i = 0; i < items; i++) {
        Cursor value = args;
        if (!renderable(&args)) {
            return 0;
        }
        put(values, (const char *)&value, sizeof(value));
    }
    Py_ssize_t w, w_end;
    if (values->failed || !program(t->renders, t->render_count, at, &w, &w_end)) {
        return 0;
    }
    const char *words = t->renders;
    while (w < w_end) {
        int64_t piece = get_i64(words, w);
        if (piece == PIECE_TEXT && w + 1 < w_end) {
            int64_t n = get_i64(words, w + 1);
            if (n < 0 || n > w_end - w - 2 || !points_valid(words, w + 2, n)) {
                return 0;
            }
            put_words(text, words, w + 2, n);
            w += 2 + (Py_ssize_t)n;
            continue;
        }
        if (piece != PIECE_VALUE || w + 2 >= w_end) {
            return 0;
        }
        int64_t with_name = get_i64(words, w + 1), name_length = get_i64(words, w + 2);
        if (name_length < 0 || name_length > w_end - w - 4) {
            return 0;
        }
        Py_ssize_t name_at = w + 3, count_at = name_at + (Py_ssize_t)name_length;
        int64_t count = get_i64(words, count_at);
        if (count < 0 || count > w_end - count_at - 1) {
            return 0;
        }
        int64_t chosen = -1;
        for (int64_t k = 0; k < count; k++) {
            int64_t index = get_i64(words, count_at + 1 + (Py_ssize_t)k);
            if (index >= 0 && index < (int64_t)items && index > chosen) {
                chosen = index;
            }
        }
        w = count_at + 1 + (Py_ssize_t)count;
        if (!points_valid(words, name_at, name_length)) { /* (a name that cannot be: Python's, shown or not) */
            return 0;
        }
        if (chosen < 0) { /* as written: "$name" or "${name}" */
            put_ascii(text, with_name ? "$" : "${");
            put_words(text, words, name_at, name_length);
            put_ascii(text, with_name ? "" : "}");
            continue;
        }
        if (with_name) { /* "name(value)" */
            put_words(text, words, name_at, name_length);
            put_point(text, '(');
        }
        Cursor value;
        memcpy(&value, values->data + (size_t)chosen * sizeof(Cursor), sizeof(value));
        put_value(text, value);
        if (with_name) {
            put_point(text, ')');
        }
    }
    return !text->failed;
}

/* Whether the part at `at` (of one code point, checked whole by glob_text) takes `point`. */
static int
takes(const char *words, Py_ssize_t at, uint32_t point)
{
    int64_t part = get_i64(words, at);
    if (part == PART_LIT) {
        return get_i64(words, at + 1) == (int64_t)point;
    }
    if (part == PART_ANY) {
        return 1;
    }
    int64_t negated = get_i64(words, at + 1), n = get_i64(words, at + 2);
    int inside = 0;
    for (int64_t k = 0; k < n && !inside; k++) {
        Py_ssize_t range = at + 3 + 2 * (Py_ssize_t)k;
        inside = get_i64(words, range) <= (int64_t)point && (int64_t)point <= get_i64(words, range + 1);
    }
    return inside != (negated != 0);
}

/* Whether the text matches the glob program at `at` (glob_holds): 1 or 0; -1 where Python matches it. */
static int
glob_text(const RuleTables *t, int64_t at, const Out *text)
{
    Py_ssize_t from, end;
    if (!program(t->globs, t->glob_count, at, &from, &end)) {
        return -1;
    }
    const char *words = t->globs;
    int never = 0;
    for (Py_ssize_t w = from; w < end;) {
        int64_t part = get_i64(words, w);
        if (part == PART_LIT && w + 1 < end) {
            w += 2;
        }
        else if (part == PART_ANY || part == PART_STAR || part == PART_NEVER) {
            never |= part == PART_NEVER;
            w += 1;
        }
        else if (part == PART_SET && w + 2 < end && get_i64(words, w + 2) >= 0 &&
                 get_i64(words, w + 2) <= (end - w - 3) / 2) {
            w += 3 + 2 * (Py_ssize_t)get_i64(words, w + 2);
        }
        else {
            return -1;
        }
    }
    if (never) {
        return 0;
    }
    size_t n = text->len / sizeof(uint32_t), i = 0, star_i = 0;
    Py_ssize_t p = from, star_p = -1;
    while (i < n) {
        int64_t part = p < end ? get_i64(words, p) : 0;
        if (part == PART_STAR) {
            star_p = p++;
            star_i = i;
        }
        else if (p < end && takes(words, p, point_at(text, i))) {
            p += part == PART_LIT ? 2 : part == PART_ANY ? 1 : 3 + 2 * (Py_ssize_t)get_i64(words, p + 2);
            i++;
        }
        else if (star_p >= 0) {
            p = star_p + 1;
            i = ++star_i;
        }
        else {
            return 0;
        }
    }
    while (p < end && get_i64(words, p) == PART_STAR) {
        p++;
    }
    return p == end;
}

/* Each candidate's verdicts (see rule_verdicts.py) into `out`. */
static void
verdicts_of(const char *found, Py_ssize_t rows, const uint8_t *buffer, Py_ssize_t length, const RuleTables *t,
            int64_t now_ns, int64_t clock_offset_ns, const LastValues *values, Out *out, Out *log, Out *log_values,
            Out *message_values, Out *text)
{
    for (Py_ssize_t index = 0; index < rows && !out->failed && !log->failed && !log_values->failed &&
                               !message_values->failed && !text->failed;
         index++) {
        const char *row = found + index * RUN_SLOTS * (Py_ssize_t)sizeof(int64_t);
        int64_t kind = get_i64(row, 0), name = get_i64(row, 1), ts = get_i64(row, 2), dur = get_i64(row, 3);
        int64_t args_start = get_i64(row, 4), args_end = get_i64(row, 5), first_ts = get_i64(row, 7);
        i128 wall = (i128)first_ts + ts + clock_offset_ns, wall_end = wall + dur;
        if (wall < 0 || wall_end < wall || wall_end > MAX_WALL_NS || kind < 0 || kind >= t->kind_count) {
            continue;
        }
        Py_ssize_t at = (Py_ssize_t)kind * KIND_ENTRY_SLOTS;
        int64_t group = get_i64(t->kinds, at + 2), span = get_i64(t->kinds, at + 3);
        Py_ssize_t a, a_end, b = 0, b_end = 0;
        int64_t key = -1, track = get_i64(row, 6);
        entry_range(t, get_i64(t->kinds, at), get_i64(t->kinds, at + 1), &a, &a_end);
        if (group >= 0 && group < t->groups && name >= 0 && name < t->name_count[group]) {
            Py_ssize_t slot = (Py_ssize_t)name * NAME_ENTRY_SLOTS;
            entry_range(t, get_i64(t->names[group], slot), get_i64(t->names[group], slot + 1), &b, &b_end);
            key = t->counters ? get_i64(t->names[group], slot + 2) : -1;
        }
        /* A counter's value and the one before, if an entry needs them. */
        int counter = 0, had = 0;
        double value = 0, before = 0;
        for (Py_ssize_t e = a; key >= 0 && !counter && e < a_end; e++) {
            counter = get_i64(t->entries, e * ENTRY_SLOTS + 2) == TEST_CROSSES;
        }
        for (Py_ssize_t e = b; key >= 0 && !counter && e < b_end; e++) {
            counter = get_i64(t->entries, e * ENTRY_SLOTS + 2) == TEST_CROSSES;
        }
        if (counter) {
            counter = args_value(buffer, length, args_start, args_end, &value);
        }
        if (counter) {
            LastValue *last = last_value(values, track, key);
            had = last->used;
            before = last->value;
        }
        i128 ahead = (wall_end > wall ? wall_end : wall) - now_ns;
        int refused = ahead > MAX_AHEAD_NS || (i128)dur > MAX_DURATION_NS; /* (dur >= 0: wall_end >= wall) */
        int error = -1, rendered = -1; /* (-1: not yet) */
        while (a < a_end || b < b_end) {
            int take_a = b >= b_end ||
                         (a < a_end && get_i64(t->entries, a * ENTRY_SLOTS) <= get_i64(t->entries, b * ENTRY_SLOTS));
            Py_ssize_t e = (take_a ? a++ : b++) * ENTRY_SLOTS;
            int64_t place = get_i64(t->entries, e), min_dur = get_i64(t->entries, e + 1),
                    test = get_i64(t->entries, e + 2);
            if (place < 0 || place >= t->places) {
                continue;
            }
            if (test == TEST_ASK || (test == TEST_CROSSES && key < 0)) {
                int64_t verdict[VERDICT_SLOTS] = {(int64_t)index, place, VERDICT_JUDGE};
                put(out, (const char *)verdict, sizeof(verdict));
                continue;
            }
            if (test == TEST_ERROR && error < 0) {
                error = args_say_error(buffer, length, args_start, args_end);
            }
            int text_holds = 0;
            if (test == TEST_TEXT) { /* (rendered once, for the first of its entries) */
                if (rendered < 0) {
                    rendered = render_message(t, get_i64(t->kinds, at + 4), buffer, length, args_start, args_end,
                                              message_values, text);
                }
                text_holds = rendered ? glob_text(t, min_dur, text) : -1;
                if (text_holds < 0) {
                    int64_t verdict[VERDICT_SLOTS] = {(int64_t)index, place, VERDICT_JUDGE};
                    put(out, (const char *)verdict, sizeof(verdict));
                    continue;
                }
            }
            if (!(test == TEST_ALWAYS || (test == TEST_LONG && span == 1 && dur >= min_dur) ||
                  (test == TEST_ERROR && error == 1) || (test == TEST_TEXT && text_holds) ||
                  (test == TEST_CROSSES && counter && crossed(t, min_dur, value, had, before)))) {
                continue;
            }
            int64_t left = get_i64(t->room, place);
            if (!refused && left <= 0) {
                set_i64(t->surplus, place, get_i64(t->surplus, place) + 1);
                continue;
            }
            if (!refused) {
                set_i64(t->room, place, left - 1);
            }
            int64_t verdict[VERDICT_SLOTS] = {(int64_t)index, place, VERDICT_MADE};
            put(out, (const char *)verdict, sizeof(verdict));
        }
        if (counter) {
            remember_value(values, track, key, value);
            int64_t entry[LOG_SLOTS] = {(int64_t)index, track, key};
            put(log, (const char *)entry, sizeof(entry));
            put(log_values, (const char *)&value, sizeof(value));
        }
    }
}

/* Rows whose name has a counter's key: the most values one call can add. */
static Py_ssize_t
keyed_rows(const char *found, Py_ssize_t rows, const RuleTables *t)
{
    Py_ssize_t keyed = 0;
    for (Py_ssize_t index = 0; index < rows; index++) {
        const char *row = found + index * RUN_SLOTS * (Py_ssize_t)sizeof(int64_t);
        int64_t kind = get_i64(row, 0), name = get_i64(row, 1);
        if (kind < 0 || kind >= t->kind_count) {
            continue;
        }
        int64_t group = get_i64(t->kinds, (Py_ssize_t)kind * KIND_ENTRY_SLOTS + 2);
        if (group >= 0 && group < t->groups && name >= 0 && name < t->name_count[group]) {
            keyed += get_i64(t->names[group], (Py_ssize_t)name * NAME_ENTRY_SLOTS + 2) >= 0;
        }
    }
    return keyed;
}

/* The verdicts with the counters' last values known (known: (track, key) int64 pairs, known_values: doubles; a
   pair given twice counts with its last value), into the three outputs; -1 if out of memory. */
static int
judge_run(const char *found, Py_ssize_t rows, const Py_buffer *buffer, const RuleTables *t, int64_t now_ns,
          int64_t offset, const char *known, const char *known_values, Py_ssize_t known_count, Out *out, Out *log,
          Out *log_values)
{
    size_t values_at_most = (size_t)known_count + (size_t)(t->counters ? keyed_rows(found, rows, t) : 0);
    if (values_at_most > SIZE_MAX / 4 / sizeof(LastValue)) {
        return -1;
    }
    size_t need_slots = 2 * values_at_most + 2, size = 2;
    while (size < need_slots) {
        size <<= 1;
    }
    LastValues values = {calloc(size, sizeof(LastValue)), size - 1};
    if (values.slots == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < known_count; i++) {
        remember_value(&values, get_i64(known, 2 * i), get_i64(known, 2 * i + 1), get_double(known_values, i));
    }
    Out message_values = {0}, text = {0};
    verdicts_of(found, rows, buffer->buf, buffer->len, t, now_ns, offset, &values, out, log, log_values,
                &message_values, &text);
    int failed = message_values.failed || text.failed;
    free(values.slots);
    free(message_values.data);
    free(text.data);
    return failed ? -1 : 0;
}

/* rule_verdicts(found, buffer, entries, kinds, names, limits, globs, renders, room, surplus, now_ns, clock_offset_ns,
   known, known_values, counters) */
static PyObject *
rule_verdicts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    enum { A_FOUND, A_BUFFER, A_ENTRIES, A_KINDS, A_NAMES, A_LIMITS, A_GLOBS, A_RENDERS, A_ROOM, A_SURPLUS, A_NOW,
           A_OFFSET, A_KNOWN, A_KNOWN_VALUES, A_COUNTERS, A_COUNT };
    enum { H_FOUND, H_BUFFER, H_ENTRIES, H_KINDS, H_LIMITS, H_GLOBS, H_RENDERS, H_ROOM, H_SURPLUS, H_KNOWN,
           H_KNOWN_VALUES, H_COUNT };
    static const int arg_of[H_COUNT] = {A_FOUND, A_BUFFER, A_ENTRIES, A_KINDS, A_LIMITS, A_GLOBS, A_RENDERS,
                                        A_ROOM, A_SURPLUS, A_KNOWN, A_KNOWN_VALUES};
    Py_buffer held[H_COUNT], names[MAX_GROUPS];
    Py_ssize_t taken = 0, groups = 0;
    RuleTables t = {0};
    Out out = {0}, log = {0}, log_values = {0};
    PyObject *result = NULL;
    int status = 0;
    if (nargs != A_COUNT) {
        PyErr_SetString(PyExc_TypeError, "rule_verdicts(found, buffer, entries, kinds, names, limits, globs, renders, "
                                         "room, surplus, now_ns, clock_offset_ns, known, known_values, counters)");
        return NULL;
    }
    int64_t now_ns = PyLong_AsLongLong(args[A_NOW]), offset = PyLong_AsLongLong(args[A_OFFSET]);
    int counters = PyObject_IsTrue(args[A_COUNTERS]);
    if (PyErr_Occurred() || counters < 0) {
        return NULL;
    }
    PyObject *names_tuple = args[A_NAMES];
    if (!PyTuple_Check(names_tuple) || PyTuple_GET_SIZE(names_tuple) > MAX_GROUPS) {
        PyErr_Format(PyExc_ValueError, "names must be a tuple of at most %d buffers", MAX_GROUPS);
        return NULL;
    }
    for (; taken < H_COUNT; taken++) {
        int writable = taken == H_ROOM || taken == H_SURPLUS;
        if (PyObject_GetBuffer(args[arg_of[taken]], &held[taken], writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    for (; groups < PyTuple_GET_SIZE(names_tuple); groups++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(names_tuple, groups), &names[groups], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        t.names[groups] = names[groups].buf;
        t.name_count[groups] = names[groups].len / (Py_ssize_t)(NAME_ENTRY_SLOTS * sizeof(int64_t));
    }
    t.groups = groups;
    t.counters = counters;
    t.entries = held[H_ENTRIES].buf;
    t.entry_count = held[H_ENTRIES].len / (Py_ssize_t)(ENTRY_SLOTS * sizeof(int64_t));
    t.kinds = held[H_KINDS].buf;
    t.kind_count = held[H_KINDS].len / (Py_ssize_t)(KIND_ENTRY_SLOTS * sizeof(int64_t));
    t.limits = held[H_LIMITS].buf;
    t.limit_count = held[H_LIMITS].len / (Py_ssize_t)(LIMIT_SLOTS * sizeof(double));
    t.globs = held[H_GLOBS].buf;
    t.glob_count = held[H_GLOBS].len / (Py_ssize_t)sizeof(int64_t);
    t.renders = held[H_RENDERS].buf;
    t.render_count = held[H_RENDERS].len / (Py_ssize_t)sizeof(int64_t);
    t.room = held[H_ROOM].buf;
    t.surplus = held[H_SURPLUS].buf;
    Py_ssize_t room = held[H_ROOM].len, surplus = held[H_SURPLUS].len;
    t.places = (room < surplus ? room : surplus) / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t rows = held[H_FOUND].len / (Py_ssize_t)(RUN_SLOTS * sizeof(int64_t));
    Py_ssize_t known = held[H_KNOWN].len / (Py_ssize_t)(2 * sizeof(int64_t));
    Py_ssize_t known_values = held[H_KNOWN_VALUES].len / (Py_ssize_t)sizeof(double);
    /* As match_run: the buffers are held, no Python object is touched, ingest runs meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    status = judge_run(held[H_FOUND].buf, rows, &held[H_BUFFER], &t, now_ns, offset, held[H_KNOWN].buf,
                       held[H_KNOWN_VALUES].buf, known < known_values ? known : known_values, &out, &log,
                       &log_values);
    Py_END_ALLOW_THREADS
    if (status < 0 || out.failed || log.failed || log_values.failed) {
        PyErr_NoMemory();
    }
    else {
        result = Py_BuildValue("(y#y#y#)", out.data ? out.data : "", (Py_ssize_t)out.len, log.data ? log.data : "",
                               (Py_ssize_t)log.len, log_values.data ? log_values.data : "", (Py_ssize_t)log_values.len);
    }
done:
    free(out.data);
    free(log.data);
    free(log_values.data);
    for (Py_ssize_t i = 0; i < groups; i++) {
        PyBuffer_Release(&names[i]);
    }
    for (Py_ssize_t i = 0; i < taken; i++) {
        PyBuffer_Release(&held[i]);
    }
    return result;
}

static PyMethodDef module_methods[] = {
    {"rule_verdicts", (PyCFunction)(void (*)(void))rule_verdicts, METH_FASTCALL,
     "rule_verdicts(found, buffer, entries, kinds, names, limits, globs, renders, room, surplus, now_ns, "
     "clock_offset_ns, known, known_values, counters) -> (bytes of int64 (candidate's index, rule's place, verdict) per verdict, bytes of "
     "int64 (candidate's index, track, counter's key) and bytes of double (its value) per counter's value); room "
     "and surplus written (see rule_verdicts.py)."},
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
