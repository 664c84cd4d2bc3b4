/* Keywords: an instant's keyword arguments as its call passed them. The recorder makes them (keywords.c), the packers
   read them (pack_values.c). */
#ifndef RINGTRACE_KEYWORDS_H
#define RINGTRACE_KEYWORDS_H

#include <Python.h>

/* An instant's keyword arguments as its call passed them: the call's names (its kwnames tuple, one object for every
   call of a call site) and their values, in one allocation. A dict would cost the recording thread its table and a
   hash insert per key, and the flusher their walk and release. The encoder packs one as the map it stands for
   (pack_keywords); Python code reads that map through as_dict() (keyword_args.py). Tracked by the cyclic collector
   only when a value may lead back to it, as a tuple of such values is. */
typedef struct {
    PyObject_VAR_HEAD
    PyObject *names;     /* NULL only once cleared by the collector */
    PyObject *values[1]; /* Py_SIZE(self) of them */
} Keywords;

#endif
