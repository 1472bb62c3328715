// What plan_key.cpp, fast_call.cpp and outputs.cpp share (one extension module, tkreg.ops.native._plan_key).
#pragma once
#include <Python.h>

#include <cstdint>
#include <vector>

// A plan key's words: per tensor a header (dtype, device, rank), the sizes, the strides and the
// alignment class, as int64 (see plan_key.cpp); on the stack up to 64 words.
struct KeyWords {
  int64_t small[64];
  std::vector<int64_t> large;
  int64_t* data = small;
  Py_ssize_t used = 0;
  Py_ssize_t room = 64;
  void reserve(Py_ssize_t more);  // room for ``more`` words after the used ones
  void push(int64_t word) {
    if (used == room) reserve(1);
    data[used++] = word;
  }
};

// Reads the key words of these arguments into ``into``; false where one is not a plain strided
// tensor or cannot be read (see plan_key.cpp); never raises.
bool tkreg_key_words(PyObject* const* args, Py_ssize_t count, KeyWords& into);

// The packed plan key of these arguments (bytes: the first ``count`` words of tkreg_key_words),
// or None where one is not a plain strided tensor; never raises.
PyObject* tkreg_packed_key(PyObject* const* args, Py_ssize_t count);

// The bytes of the first ``count`` words (the packed key of the tensors they were read from).
PyObject* tkreg_key_bytes(const KeyWords& words, Py_ssize_t count);

// Appends the ints of a tuple to ``into``; false where it is not a tuple of ints (with an exception
// set where an item could not be read as one).
bool tkreg_append_ints(PyObject* tuple, std::vector<int64_t>& into);

// fast_call(name, doc, table, slow, graded, names, kinds, defaults, epoch) -> builtin (see fast_call.cpp).
PyObject* tkreg_make_fast_call(PyObject* module, PyObject* args);

// Readies fast_call's type; -1 with an exception set where it cannot.
int tkreg_fast_call_ready();

// outputs(layouts) -> builtin: each call, new tensors of these layouts (see outputs.cpp).
PyObject* tkreg_make_outputs(PyObject* module, PyObject* layouts);

// Readies outputs' type; -1 with an exception set where it cannot.
int tkreg_outputs_ready();
