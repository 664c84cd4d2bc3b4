/* Arguments of the common shapes (a map of text keys and flat values, an instant's Keywords, a message's flat
   values) packed as msgpack-python packs what event_packing.py's Python path makes of them. */

#include "packer.h"

/* Text as msgpack-python packs it: 1 when written; 0 when it is for Python (text UTF-8 cannot encode, a lone
   surrogate: the Python path escapes it); -1 on error. */
int
pack_text(Packed *out, PyObject *text)
{
    Py_ssize_t size;
    const char *utf8;
    if (PyUnicode_IS_COMPACT_ASCII(text)) { /* the usual case: its bytes are its UTF-8 */
        size = PyUnicode_GET_LENGTH(text);
        utf8 = (const char *)PyUnicode_DATA(text);
    }
    else utf8 = PyUnicode_AsUTF8AndSize(text, &size); /* may allocate (not an object); runs no Python code */
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (packed_reserve(out, 5 + size) < 0) return -1;
    unsigned char *p = put_raw_header(out->data + out->size, size, 1);
    memcpy(p, utf8, (size_t)size);
    out->size = (p - out->data) + size;
    return 1;
}

/* A value the Python path carries as it is, packed as msgpack-python packs it: None, a bool, an int of 64 bits, a
   float, text and bytes up to MAX_ARG_TEXT, each of exactly that type (a subclass may show itself otherwise). 1 when
   written; 0 when the value is for Python; -1 on error. */
int
pack_flat(Packed *out, PyObject *value)
{
    unsigned char *p;
    if (PyUnicode_CheckExact(value)) {
        return PyUnicode_GET_LENGTH(value) > MAX_ARG_TEXT ? 0 : pack_text(out, value);
    }
    if (packed_reserve(out, 9) < 0) return -1;
    p = out->data + out->size;
    if (value == Py_None) PUT1(p, 0xc0);
    else if (value == Py_True) PUT1(p, 0xc3);
    else if (value == Py_False) PUT1(p, 0xc2);
    else if (PyLong_CheckExact(value)) {
        int overflow = 0;
        int64_t small;
        long long v = small_int64(value, &small) ? small : PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow == 0) {
            if (v == -1 && PyErr_Occurred()) return -1;
            p = put_int(p, v);
        }
        else if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(value);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) { /* past 64 bits: the Python path writes text */
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
                PyErr_Clear();
                return 0;
            }
            p = put_uint64(p, u);
        }
        else return 0;
    }
    else if (PyFloat_CheckExact(value)) {
        PUT1(p, 0xcb);
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), (char *)p, 0) < 0) return -1;
        p += 8;
    }
    else if (PyBytes_CheckExact(value)) {
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        if (size > MAX_ARG_TEXT) return 0;
        if (packed_reserve(out, 5 + size) < 0) return -1;
        p = put_raw_header(out->data + out->size, size, 0);
        memcpy(p, PyBytes_AS_STRING(value), (size_t)size);
        p += size;
    }
    else return 0;
    out->size = p - out->data;
    return 1;
}

/* A map of text keys and values that pack_flat takes; *values: how many values may still be packed (counting the
   maps' items), which keeps every map far within what the Python path packs as it is (MAX_ARG_ITEMS in all, where
   normalise_args cuts at MAX_ARG_VALUES). 1 when written; 0 when it is for Python (nothing written); -1 on error.
   No Python code runs here, so the map cannot change under us. */
static int
pack_map_within(Packed *out, PyObject *map, int nested, Py_ssize_t *values)
{
    Py_ssize_t start = out->size, position = 0;
    PyObject *key, *value;
    *values -= PyDict_GET_SIZE(map);
    if (*values < 0) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, PyDict_GET_SIZE(map)) - out->data;
    while (PyDict_Next(map, &position, &key, &value)) {
        int written = PyUnicode_CheckExact(key) ? pack_text(out, key) : 0;
        if (written > 0) {
            /* one level of maps of flat values within (a span's response map): the Python path keeps them as they are */
            written = nested && PyDict_CheckExact(value) ? pack_map_within(out, value, 0, values) : pack_flat(out, value);
        }
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* A map of text keys and flat values (see pack_flat), or maps of such within, which the Python path packs as it is.
   1 when written; 0 when it is for Python (nothing written); -1 on error. */
int
pack_flat_map(Packed *out, PyObject *map)
{
    Py_ssize_t values = MAX_ARG_ITEMS;
    return pack_map_within(out, map, 1, &values);
}

/* An instant's Keywords as pack_flat_map packs the map it stands for (its names are the map's keys, in its order). */
int
pack_keywords(Packed *out, Keywords *keywords)
{
    Py_ssize_t start = out->size, i, n = Py_SIZE(keywords);
    if (n > MAX_ARG_ITEMS || keywords->names == NULL) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(keywords->names, i), *value = keywords->values[i];
        int written = PyUnicode_CheckExact(key) && value != NULL ? pack_text(out, key) : 0;
        if (written > 0) written = pack_flat(out, value);
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* Fill `cache` with the keys of `names` when each is text pack_text writes (and there are at most CACHED_KEYS);
   else leave it empty. -1 on error. */
static int
cache_keys(KeyCache *cache, PyObject *names)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(names);
    Py_CLEAR(cache->names);
    cache->keys.size = 0;
    if (n > CACHED_KEYS) return 0;
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(names, i);
        int written = PyUnicode_CheckExact(key) ? pack_text(&cache->keys, key) : 0;
        if (written <= 0) return written;
        cache->ends[i] = cache->keys.size;
    }
    cache->names = Py_NewRef(names);
    return 0;
}

/* pack_keywords, its keys copied from `cache`. */
int
pack_keywords_cached(Packed *out, Keywords *keywords, KeyCache *cache)
{
    Py_ssize_t start = out->size, i, n = Py_SIZE(keywords), from = 0;
    if (keywords->names == NULL) return 0;
    if (keywords->names != cache->names && cache_keys(cache, keywords->names) < 0) return -1;
    if (keywords->names != cache->names) return pack_keywords(out, keywords);
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        Py_ssize_t size = cache->ends[i] - from;
        int written = keywords->values[i] == NULL ? 0 : packed_reserve(out, size) < 0 ? -1 : 1;
        if (written > 0) {
            memcpy(out->data + out->size, cache->keys.data + from, (size_t)size);
            out->size += size;
            from = cache->ends[i];
            written = pack_flat(out, keywords->values[i]);
        }
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* A message's values (a tuple) when all are flat: normalise_values leaves such values as they are. As pack_flat_map. */
int
pack_flat_values(Packed *out, PyObject *values)
{
    Py_ssize_t start = out->size, i, n = PyTuple_GET_SIZE(values);
    if (n > MAX_ARG_ITEMS) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_array_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        int written = pack_flat(out, PyTuple_GET_ITEM(values, i));
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}
