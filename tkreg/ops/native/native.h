// What plan_key.cpp, fast_call.cpp and outputs.cpp share (one extension module, tkreg.ops.native._plan_key).
#pragma once
#include <Python.h>

#include <cstdint>
#include <vector>

// The packed plan key of these arguments (bytes), or None where one is not a plain strided tensor
// (see plan_key.cpp); never raises.
PyObject* tkreg_packed_key(PyObject* const* args, Py_ssize_t count);

// Appends the ints of a tuple to ``into``; false where it is not a tuple of ints (with an exception
// set where an item could not be read as one).
bool tkreg_append_ints(PyObject* tuple, std::vector<int64_t>& into);

// fast_call(name, doc, table, slow, graded, names, kinds, defaults) -> builtin (see fast_call.cpp).
PyObject* tkreg_make_fast_call(PyObject* module, PyObject* args);

// Readies fast_call's type; -1 with an exception set where it cannot.
int tkreg_fast_call_ready();

// outputs(layouts) -> builtin: each call, new tensors of these layouts (see outputs.cpp).
PyObject* tkreg_make_outputs(PyObject* module, PyObject* layouts);

// Readies outputs' type; -1 with an exception set where it cannot.
int tkreg_outputs_ready();
