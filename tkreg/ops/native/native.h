// What plan_key.cpp, fast_call.cpp, outputs.cpp, autocast.cpp, replayed_call.cpp and reordered_call.cpp share (one extension module, tkreg.ops.native._plan_key).
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

// Reads the key words of these arguments into ``into`` (one word for None, an absent optional
// input); false where one is neither None nor a plain strided tensor, or cannot be read (see
// plan_key.cpp); never raises. It does not ask whether torch.autocast is on: its callers do
// (tkreg_packed_key, fast_call).
bool tkreg_key_words(PyObject* const* args, Py_ssize_t count, KeyWords& into);

// The packed plan key of these arguments (bytes: the first ``count`` words of tkreg_key_words),
// or None where one is not a plain strided tensor or torch.autocast is on; never raises.
PyObject* tkreg_packed_key(PyObject* const* args, Py_ssize_t count);

// The bytes of the first ``count`` words (the packed key of the tensors they were read from).
PyObject* tkreg_key_bytes(const KeyWords& words, Py_ssize_t count);

// Appends the ints of a tuple to ``into``; false where it is not a tuple of ints (with an exception
// set where an item could not be read as one).
bool tkreg_append_ints(PyObject* tuple, std::vector<int64_t>& into);

// Whether an object is of the exact tensor types the key takes (set with plain(types)).
bool tkreg_is_plain(PyObject* obj);

// What an op declares torch.autocast does to it on one device type (Op.autocast), as fast_call
// takes it: tkreg/ops/autocasting.py POLICY_CODES gives the same numbers.
enum : int { TKREG_AUTOCAST_UNDECLARED = 0, TKREG_AUTOCAST_UNCHANGED = 1, TKREG_AUTOCAST_LOWER = 2, TKREG_AUTOCAST_FLOAT32 = 3 };

// Whether torch.autocast is on for CUDA or the CPU.
bool tkreg_autocast_on();

// torch.autocast off for CUDA and the CPU while it lives; on again where it was (autocast.cpp).
struct TkregAutocastOff {
  TkregAutocastOff();
  ~TkregAutocastOff();
  bool cuda, cpu;
};

// New references it drops when it goes.
struct TkregOwned {
  std::vector<PyObject*> items;
  ~TkregOwned();
};

// Appends to ``into`` (new references) the call's inputs as torch.autocast casts them under the op's
// policies (``policies``: on CUDA, on the CPU), with torch's own cached casts; false where the C++
// call does not take the call (an input neither None nor a plain tensor, another device type, an op that
// declares nothing there, a cast that failed), with no exception set (see autocast.cpp).
bool tkreg_autocast_inputs(const int policies[2], PyObject* const* args, Py_ssize_t nargs, std::vector<PyObject*>& into);

// Readies the type of a builtin's state that holds Python objects (fast_call, replayed_call,
// reordered_call): GC-tracked, with these slots; -1 with an exception set where it cannot.
inline int tkreg_ready_state_type(PyTypeObject& type, Py_ssize_t size, const char* doc, destructor dealloc,
                                  traverseproc traverse, inquiry clear) {
  type.tp_basicsize = size;
  type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  type.tp_doc = doc;
  type.tp_dealloc = dealloc;
  type.tp_traverse = traverse;
  type.tp_clear = clear;
  return PyType_Ready(&type);
}

// The dealloc of such a state whose ``Clear`` drops everything it holds.
template <inquiry Clear>
void tkreg_state_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Clear(self);
  PyObject_GC_Del(self);
}

// A builtin bound to ``state``, whose method definition ``def`` lives in the state: the builtin
// keeps the state alive as its __self__, and the caller's reference to it is handed over.
inline PyObject* tkreg_builtin_of(PyObject* state, PyMethodDef* def, PyObject* module = nullptr) {
  PyObject* builtin = PyCFunction_NewEx(def, state, module);
  Py_DECREF(state);
  return builtin;
}

// fast_call(name, doc, table, slow, graded, names, kinds, defaults, epoch, autocast) -> builtin (see fast_call.cpp).
PyObject* tkreg_make_fast_call(PyObject* module, PyObject* args);

PyObject* tkreg_plans_changed(PyObject* module, PyObject* unused);

// Readies fast_call's type; -1 with an exception set where it cannot.
int tkreg_fast_call_ready();

// outputs(layouts) -> builtin: each call, new tensors of these layouts (see outputs.cpp).
PyObject* tkreg_make_outputs(PyObject* module, PyObject* layouts);

// Readies outputs' type; -1 with an exception set where it cannot.
int tkreg_outputs_ready();

// replayed(allocate, replay, declined, at, picks) -> builtin: a replayed plan's call (see replayed_call.cpp).
PyObject* tkreg_make_replayed(PyObject* module, PyObject* args);

// Readies replayed's type; -1 with an exception set where it cannot.
int tkreg_replayed_ready();

// reordered(target, order) -> builtin: call(*inputs) is target(*(inputs[i] for i in order)) (see reordered_call.cpp).
PyObject* tkreg_make_reordered(PyObject* module, PyObject* args);

// Readies reordered's type; -1 with an exception set where it cannot.
int tkreg_reordered_ready();
