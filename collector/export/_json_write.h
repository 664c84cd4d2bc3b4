/* JSON text of msgpack values, written in C as orjson writes them (but a float, which may take more digits to the
same double): what the C writers of JSON share (_chrome.c, Chrome JSON; _tables.c, the tables' args text). Numbers
are written in C: integers exactly; floats with the fewest of 15, 16 or 17 significant digits that read back to the
same double; non-finite floats as null, as orjson writes them. The caller sets the thread's locale to "C" (with_c_locale
below) around put_value. */

#ifndef RINGTRACE_JSON_WRITE_H
#define RINGTRACE_JSON_WRITE_H

#include "_msgpack_read.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>

static void
put_u128(Out *out, unsigned __int128 v)
{
    char digits[40];
    int n = 0;
    do {
        digits[sizeof(digits) - 1 - n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    put(out, digits + sizeof(digits) - n, (size_t)n);
}

static void
put_int(Out *out, i128 v)
{
    if (v < 0) {
        PUT_LITERAL(out, "-");
        put_u128(out, (unsigned __int128)(-v));
    }
    else {
        put_u128(out, (unsigned __int128)v);
    }
}

/* snprintf and strtod follow the thread's locale, which the caller sets to "C" (with_c_locale): a decimal point,
   whatever the program's locale, and no read of the global locale that another thread may be changing. */
static void
put_double(Out *out, double v)
{
    if (!isfinite(v)) {
        PUT_LITERAL(out, "null");
        return;
    }
    char text[40];
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
        n = snprintf(text, sizeof(text), "%.*g", digits, v);
        if (digits == 17 || strtod(text, NULL) == v) {
            break;
        }
    }
    put(out, text, (size_t)n);
    if (strpbrk(text, ".e") == NULL) {
        PUT_LITERAL(out, ".0");
    }
}

/* ---- JSON writing ---- */

/* A msgpack str (UTF-8, checked by skip()) as a JSON string, escaped as orjson escapes: the quote, the backslash
   and control characters. */
static void
put_string(Out *out, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    PUT_LITERAL(out, "\"");
    size_t run = 0; /* the start of the bytes not written yet */
    for (size_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (b >= 0x20 && b != '"' && b != '\\') {
            continue;
        }
        put(out, (const char *)s + run, i - run);
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t len = 2;
        switch (b) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[b >> 4]; esc[5] = hex[b & 15];
            len = 6;
        }
        put(out, esc, len);
        run = i + 1;
    }
    put(out, (const char *)s + run, n - run);
    PUT_LITERAL(out, "\"");
}

/* One msgpack value as JSON. DEFER: a value JSON does not hold as the Python walk writes it (bytes, an extension
   type, a map key that is not a string, too deep); the cursor is then anywhere. */
static int
put_value(Cursor *c, Out *out, int depth)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    switch (b) {
    case 0xc0: c->p++; PUT_LITERAL(out, "null"); return OK;
    case 0xc2: c->p++; PUT_LITERAL(out, "false"); return OK;
    case 0xc3: c->p++; PUT_LITERAL(out, "true"); return OK;
    case 0xca: {
        if (!need(c, 5)) return BAD;
        uint32_t bits = (uint32_t)be(c->p + 1, 4);
        float f;
        memcpy(&f, &bits, 4);
        c->p += 5;
        put_double(out, (double)f);
        return OK;
    }
    case 0xcb: {
        if (!need(c, 9)) return BAD;
        uint64_t bits = be(c->p + 1, 8);
        double d;
        memcpy(&d, &bits, 8);
        c->p += 9;
        put_double(out, d);
        return OK;
    }
    }
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) {
        i128 v;
        if (read_int(c, &v) != OK) {
            return BAD;
        }
        put_int(out, v);
        return OK;
    }
    if ((b & 0xe0) == 0xa0 || (b >= 0xd9 && b <= 0xdb)) {
        int64_t n = str_length(c);
        if (n < 0) {
            return BAD;
        }
        put_string(out, c->p, (size_t)n);
        c->p += n;
        return OK;
    }
    int map = (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
    int array = (b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd;
    if (!map && !array) {
        return DEFER; /* bin, ext (or 0xc1, which the Python walk refuses) */
    }
    if (depth >= MAX_DEPTH) {
        return DEFER;
    }
    uint32_t items;
    if (read_container(c, map, &items) != OK) {
        return BAD;
    }
    put(out, map ? "{" : "[", 1);
    for (uint32_t i = 0; i < items; i++) {
        if (i) {
            PUT_LITERAL(out, ",");
        }
        if (map) {
            int64_t n = str_length(c);
            if (n < 0) {
                return need(c, 1) ? DEFER : BAD;
            }
            put_string(out, c->p, (size_t)n);
            c->p += n;
            PUT_LITERAL(out, ":");
        }
        int status = put_value(c, out, depth + 1);
        if (status != OK) {
            return status;
        }
    }
    put(out, map ? "}" : "]", 1);
    return OK;
}

/* fn(arg) with this thread's locale set to "C" for snprintf and strtod (the program's own is left as it is); BAD
   when no locale object can be had (the Python side then decides). */
static int
with_c_locale(int (*fn)(void *), void *arg)
{
    locale_t c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0) {
        return BAD;
    }
    locale_t previous = uselocale(c_locale);
    int status = fn(arg);
    uselocale(previous);
    freelocale(c_locale);
    return status;
}

#endif
