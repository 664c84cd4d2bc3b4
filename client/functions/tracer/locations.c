/* Locations: whether a code object is recorded and its index in the locations list (decided once, kept in its
   co_extra word), and a C callable's index; each location interned by value. */

#include "tracer.h"

Py_ssize_t rt_code_extra_index = -1;

static int
set_code_word(PyObject *code, uint64_t word)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyUnstable_Code_SetExtra(code, rt_code_extra_index, (void *)(uintptr_t)word);
#else
    return _PyCode_SetExtra(code, rt_code_extra_index, (void *)(uintptr_t)word);
#endif
}

/* globals' "__name__" (a new reference), "" if none; NULL globals: the current frame's. */
static PyObject *
module_name(PyObject *globals)
{
    PyObject *owned = NULL;
    if (globals == NULL) {
        PyFrameObject *frame = PyEval_GetFrame();
        globals = owned = frame == NULL ? NULL : PyFrame_GetGlobals(frame);
    }
    PyObject *name = globals != NULL && PyDict_Check(globals) ? PyDict_GetItemString(globals, "__name__") : NULL;
    Py_XINCREF(name);
    Py_XDECREF(owned);
    PyErr_Clear();
    if (name != NULL && PyUnicode_Check(name)) {
        return name;
    }
    Py_XDECREF(name);
    return PyUnicode_FromString("");
}

/* The index of `location` (a (name, file, line) tuple) in the locations list, appended the first time: locations are
   interned by value (the tracer's `indexes`), so code compiled again (exec of the same source, a class made in a
   loop) shares one, and the list grows with the program's code, not with how often it is compiled. -1 (error set):
   no room for one more. */
static int64_t
location_index(Tracer *self, PyObject *location)
{
    PyObject *known = PyDict_GetItemWithError(self->indexes, location);
    if (known != NULL) {
        return PyLong_AsLongLong(known);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    Py_ssize_t index = PyList_GET_SIZE(self->locations);
    if (index >= (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_Format(PyExc_OverflowError, "function tracer: %zd code locations is the most a record can index",
                     index);
        return -1;
    }
    PyObject *number = PyLong_FromSsize_t(index);
    if (number == NULL || PyDict_SetItem(self->indexes, location, number) < 0) {
        Py_XDECREF(number);
        return -1;
    }
    Py_DECREF(number);
    if (PyList_Append(self->locations, location) < 0) {
        PyDict_DelItem(self->indexes, location); /* not there after all */
        return -1;
    }
    return index;
}

int
rt_index_locations(Tracer *self)
{
    Py_ssize_t count = PyList_GET_SIZE(self->locations);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *number = PyLong_FromSsize_t(i);
        PyObject *known = number == NULL ? NULL
                                         : PyDict_SetDefault(self->indexes, PyList_GET_ITEM(self->locations, i),
                                                             number);
        Py_XDECREF(number);
        if (known == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
                return -1;
            }
            PyErr_Clear(); /* not a location (unhashable): never shared */
        }
    }
    return 0;
}

int
rt_code_location_first(Tracer *self, PyObject *code, PyObject *globals, uint32_t *loc, int pass_on)
{
    PyObject *saved_type, *saved_value, *saved_tb; /* an exception may be on its way (PY_THROW, PY_UNWIND) */
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    int recorded = 0, interrupted = 0;
    uint64_t word = (uint64_t)self->generation << 32;
    PyObject *module = module_name(globals);
    PyObject *verdict = module == NULL ? NULL : PyObject_CallFunctionObjArgs(self->decide, code, module, NULL);
    Py_XDECREF(module);
    if (verdict == NULL) {
        /* its code is not recorded, and the error not asked again; unless it was Ctrl-C's, which says nothing of it */
        interrupted = rt_failed(self->decide, pass_on);
    }
    else {
        int truth = PyObject_IsTrue(verdict);
        Py_DECREF(verdict);
        if (truth < 0) {
            interrupted = rt_failed(self->decide, pass_on);
        }
        else if (truth) {
            PyCodeObject *c = (PyCodeObject *)code;
            PyObject *location = Py_BuildValue("(OOi)", c->co_qualname, c->co_filename, c->co_firstlineno);
            int64_t index = location == NULL ? -1 : location_index(self, location);
            Py_XDECREF(location);
            if (index < 0) {
                rt_unraisable(code);
            }
            else {
                recorded = 1;
                *loc = (uint32_t)index;
                word |= (uint64_t)index + 1;
            }
        }
    }
    if (!interrupted && set_code_word(code, word) < 0) {
        PyErr_Clear(); /* asked again when next met */
    }
    if (interrupted == 2) { /* a signal handler's: not decide's error, asked again when next met */
        rt_pass_on(saved_type, saved_value, saved_tb);
        return -1;
    }
    PyErr_Restore(saved_type, saved_value, saved_tb);
    return recorded;
}

static int
c_table_grow(Tracer *self)
{
    size_t capacity = self->c_capacity ? self->c_capacity * 2 : 64;
    CFunctionLocation *table = calloc(capacity, sizeof(CFunctionLocation));
    if (table == NULL) {
        return -1;
    }
    for (size_t i = 0; i < self->c_capacity; i++) {
        CFunctionLocation *old = &self->c_locations[i];
        if (old->method != NULL) {
            size_t j = rt_c_slot(old->method, old->type, capacity - 1);
            while (table[j].method != NULL) {
                j = (j + 1) & (capacity - 1);
            }
            table[j] = *old;
        }
    }
    free(self->c_locations);
    self->c_locations = table;
    self->c_capacity = capacity;
    return 0;
}

/* f"{__module__}.{__qualname__}" when the callable has a module other than "builtins", else its __qualname__. */
static PyObject *
c_function_name(PyObject *callable)
{
    PyObject *qualname = PyObject_GetAttrString(callable, "__qualname__");
    if (qualname == NULL || !PyUnicode_Check(qualname)) {
        Py_XDECREF(qualname);
        PyErr_Clear();
        qualname = PyObject_Repr(callable);
        if (qualname == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyObject_GetAttrString(callable, "__module__");
    if (module == NULL) {
        PyErr_Clear();
    }
    PyObject *name;
    if (module != NULL && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "builtins") != 0) {
        name = PyUnicode_FromFormat("%U.%U", module, qualname);
    }
    else {
        name = Py_NewRef(qualname);
    }
    Py_XDECREF(module);
    Py_DECREF(qualname);
    return name;
}

static int64_t
c_location_first(Tracer *self, PyObject *callable)
{
    PyObject *name = c_function_name(callable);
    PyObject *location = name == NULL ? NULL : Py_BuildValue("(Osi)", name, "", 0);
    Py_XDECREF(name);
    int64_t index = location == NULL ? -1 : location_index(self, location);
    Py_XDECREF(location);
    return index;
}

int
rt_c_location_first(Tracer *self, PyObject *callable, const void *method, PyObject *type, uint32_t *loc)
{
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    Py_XINCREF(type); /* kept alive across the Python code below, and then by the table */
    int64_t index = c_location_first(self, callable);
    int found = 0;
    if (index < 0) {
        rt_unraisable(callable);
    }
    else if ((self->c_count + 1) * 2 <= self->c_capacity || c_table_grow(self) == 0) {
        size_t mask = self->c_capacity - 1;
        size_t i = rt_c_slot(method, type, mask);
        while (self->c_locations[i].method != NULL &&
               !(self->c_locations[i].method == method && self->c_locations[i].type == type)) {
            i = (i + 1) & mask;
        }
        CFunctionLocation *entry = &self->c_locations[i];
        if (entry->method == NULL) {
            entry->method = method;
            entry->type = Py_XNewRef(type);
            entry->loc = (uint32_t)index;
            self->c_count++;
        }
        *loc = entry->loc;
        found = 1;
    }
    Py_XDECREF(type);
    PyErr_Restore(saved_type, saved_value, saved_tb);
    return found;
}

void
rt_clear_c_locations(Tracer *self)
{
    CFunctionLocation *table = self->c_locations;
    size_t capacity = self->c_capacity;
    self->c_locations = NULL;
    self->c_capacity = self->c_count = 0;
    for (size_t i = 0; i < capacity; i++) {
        Py_XDECREF(table[i].type);
    }
    free(table);
}
