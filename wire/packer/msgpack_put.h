/* msgpack as msgpack-python writes it, through a cursor `p` into a buffer the caller sized: the writers the packers
   share, inline. */
#ifndef RINGTRACE_MSGPACK_PUT_H
#define RINGTRACE_MSGPACK_PUT_H

#include <Python.h>
#include <stdint.h>

#define PUT1(p, b) (*(p)++ = (unsigned char)(b))
#define PUT2(p, v) (PUT1(p, (v) >> 8), PUT1(p, (v)))
#define PUT4(p, v) (PUT2(p, (v) >> 16), PUT2(p, (v)))
#define PUT8(p, v) (PUT4(p, (v) >> 32), PUT4(p, (v)))

/* An integer in its shortest form, unsigned for values >= 0. At most 9 bytes. */
static inline unsigned char *
put_int(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    if (v >= 0) {
        if (v < 0x80) PUT1(p, u);
        else if (v < 0x100) { PUT1(p, 0xcc); PUT1(p, u); }
        else if (v < 0x10000) { PUT1(p, 0xcd); PUT2(p, u); }
        else if (v < 0x100000000LL) { PUT1(p, 0xce); PUT4(p, u); }
        else { PUT1(p, 0xcf); PUT8(p, u); }
    }
    else {
        if (v >= -32) PUT1(p, u);
        else if (v >= -128) { PUT1(p, 0xd0); PUT1(p, u); }
        else if (v >= -32768) { PUT1(p, 0xd1); PUT2(p, u); }
        else if (v >= -2147483648LL) { PUT1(p, 0xd2); PUT4(p, u); }
        else { PUT1(p, 0xd3); PUT8(p, u); }
    }
    return p;
}

/* An array header. At most 5 bytes. */
static inline unsigned char *
put_array_header(unsigned char *p, Py_ssize_t n)
{
    uint64_t u = (uint64_t)n;
    if (n < 16) PUT1(p, 0x90 | u);
    else if (n < 0x10000) { PUT1(p, 0xdc); PUT2(p, u); }
    else { PUT1(p, 0xdd); PUT4(p, u); }
    return p;
}

/* An unsigned integer past INT64_MAX, as msgpack-python writes it (uint 64). */
static inline unsigned char *
put_uint64(unsigned char *p, uint64_t u)
{
    PUT1(p, 0xcf);
    PUT8(p, u);
    return p;
}

/* A str or bin header for `n` bytes (`str` 1 for text): at most 5 bytes. msgpack-python writes str 8 for text since
   use_bin_type is on. */
static inline unsigned char *
put_raw_header(unsigned char *p, Py_ssize_t n, int str)
{
    uint64_t u = (uint64_t)n;
    if (str && n < 32) PUT1(p, 0xa0 | u);
    else if (n < 0x100) { PUT1(p, str ? 0xd9 : 0xc4); PUT1(p, u); }
    else if (n < 0x10000) { PUT1(p, str ? 0xda : 0xc5); PUT2(p, u); }
    else { PUT1(p, str ? 0xdb : 0xc6); PUT4(p, u); }
    return p;
}

/* A map header. At most 5 bytes. */
static inline unsigned char *
put_map_header(unsigned char *p, Py_ssize_t n)
{
    uint64_t u = (uint64_t)n;
    if (n < 16) PUT1(p, 0x80 | u);
    else if (n < 0x10000) { PUT1(p, 0xde); PUT2(p, u); }
    else { PUT1(p, 0xdf); PUT4(p, u); }
    return p;
}

/* Bytes put_int writes for v. */
static inline Py_ssize_t
int_size(int64_t v)
{
    if (v >= 0) return v < 0x80 ? 1 : v < 0x100 ? 2 : v < 0x10000 ? 3 : v < 0x100000000LL ? 5 : 9;
    return v >= -32 ? 1 : v >= -128 ? 2 : v >= -32768 ? 3 : v >= -2147483648LL ? 5 : 9;
}

/* Bytes put_array_header writes for n. */
static inline Py_ssize_t
array_header_size(Py_ssize_t n)
{
    return n < 16 ? 1 : n < 0x10000 ? 3 : 5;
}

/* v in `size` bytes, little-endian. */
static inline unsigned char *
put_le(unsigned char *p, uint64_t v, int size)
{
    int i;
    for (i = 0; i < size; i++) PUT1(p, v >> (8 * i));
    return p;
}

#endif
