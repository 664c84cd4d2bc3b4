/* What the packers (pack_columns.c, pack_args.c, pack_events.c, pack_values.c) share: a growing buffer, the writers
   of the common argument shapes, the readers of a run's values. */
#ifndef RINGTRACE_PACKERS_H
#define RINGTRACE_PACKERS_H

#include "speedups.h"
#include "msgpack_put.h"

/* A growing buffer of msgpack bytes. */
typedef struct {
    unsigned char *data;
    Py_ssize_t size, capacity;
} Packed;

/* The keys of the last Keywords a run packed, packed: consecutive instants mostly come from one call site, whose
   calls all pass the same names tuple. */
#define CACHED_KEYS 8
typedef struct {
    PyObject *names;               /* the names tuple `keys` holds, a reference; NULL: none */
    Packed keys;                   /* its keys as pack_text writes them, back to back */
    Py_ssize_t ends[CACHED_KEYS];  /* where each ends in keys.data */
} KeyCache;

/* The value of an int (of any int type) of at most two digits, so within 60 bits: every kind, string id and timestamp
   the encoder reads, most argument values. 1 when read, 0 for PyLong_AsLongLongAndOverflow to read. A call less for
   each such int, four an event: read as CPython up to 3.11 lays an int out (digits of PyLong_SHIFT bits, their count
   signed in ob_size); later versions, whose layout changed, through their own reader of one-digit ints. */
static inline int
small_int64(PyObject *value, int64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000
    const digit *digits = ((PyLongObject *)value)->ob_digit;
    switch (Py_SIZE(value)) {
    case 0: *out = 0; return 1;
    case 1: *out = (int64_t)digits[0]; return 1;
    case -1: *out = -(int64_t)digits[0]; return 1;
    case 2: *out = (int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT); return 1;
    case -2: *out = -((int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT)); return 1;
    default: return 0;
    }
#else
    if (!PyUnstable_Long_IsCompact((PyLongObject *)value)) return 0;
    *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)value);
    return 1;
#endif
}

#pragma GCC visibility push(hidden)

/* pack_values.c */
int packed_reserve(Packed *out, Py_ssize_t more);
int pack_text(Packed *out, PyObject *text);
int pack_flat(Packed *out, PyObject *value);
int pack_flat_map(Packed *out, PyObject *map);
int pack_keywords(Packed *out, Keywords *keywords);
int pack_keywords_cached(Packed *out, Keywords *keywords, KeyCache *cache);
int pack_flat_values(Packed *out, PyObject *values);

/* pack_columns.c */
PyObject *record_value(PyObject *records, Py_ssize_t i, int c);
int as_int64(PyObject *value, const char *column, int64_t *out);
int string_id(PyObject *table, PyObject *label, int64_t *out);

#pragma GCC visibility pop

#endif
