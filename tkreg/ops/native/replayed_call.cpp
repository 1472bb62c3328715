// A replayed kernel plan's call in C++: replayed(allocate, replay, declined, at, picks) -> builtin.
//
// Where a kernel's launches are recorded (tkreg/ops/replaying.py), a plan's call allocates its
// outputs, replays the launches with the inputs' and outputs' addresses and hands back one output.
// In Python that is a function of three lines, and tkreg.ops.<op>'s C++ call (fast_call.cpp) then
// pays for a Python frame on every launch-bound call: on an H200 host, tkreg.ops took 0.2-0.6 us
// more than that function called directly (calls of 5-10 us, 2026-11-30). The builtin makes the
// same calls with no frame:
//
//   outs = allocate()
//   if replay((*inputs, *outs)): return outs[at]
//   made = declined(*inputs)         # not replayed now (a launch hook, another device): the launcher
//   return made[at] if picks else made
//
// ``picks``: the declined call returns every output (an op whose callers get fewer), so the
// builtin picks the one; otherwise it returns what the caller gets.
#include "native.h"

#include <new>

namespace {

struct Replayed {
  PyObject_HEAD
  PyObject* allocate;  // allocate() -> the new outputs (a sequence)
  PyObject* replay;    // replay(tensors: tuple) -> bool
  PyObject* declined;  // declined(*inputs): what runs where replay() declines the call
  Py_ssize_t at;       // the output the caller gets
  bool picks;
  PyMethodDef def;
};

int traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<Replayed*>(self_obj);
  Py_VISIT(self->allocate);
  Py_VISIT(self->replay);
  Py_VISIT(self->declined);
  return 0;
}

int clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<Replayed*>(self_obj);
  Py_CLEAR(self->allocate);
  Py_CLEAR(self->replay);
  Py_CLEAR(self->declined);
  return 0;
}

PyTypeObject ReplayedType = {PyVarObject_HEAD_INIT(nullptr, 0) "tkreg.ops.native.ReplayedState"};

PyObject* call(PyObject* self_obj, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<Replayed*>(self_obj);
  PyObject* made = PyObject_CallNoArgs(self->allocate);
  if (made == nullptr) return nullptr;
  PyObject* outs = PySequence_Tuple(made);  // the same tuple where allocate made one (outputs.cpp)
  Py_DECREF(made);
  if (outs == nullptr) return nullptr;
  const Py_ssize_t count = PyTuple_GET_SIZE(outs);
  PyObject* tensors = PyTuple_New(nargs + count);
  if (tensors == nullptr) {
    Py_DECREF(outs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(tensors, i, Py_NewRef(args[i]));
  for (Py_ssize_t i = 0; i < count; ++i) PyTuple_SET_ITEM(tensors, nargs + i, Py_NewRef(PyTuple_GET_ITEM(outs, i)));
  PyObject* replayed = PyObject_CallOneArg(self->replay, tensors);
  Py_DECREF(tensors);
  const int truth = replayed != nullptr ? PyObject_IsTrue(replayed) : -1;
  Py_XDECREF(replayed);
  if (truth != 0) {
    PyObject* got = truth > 0 ? PySequence_GetItem(outs, self->at) : nullptr;
    Py_DECREF(outs);
    return got;
  }
  Py_DECREF(outs);
  PyObject* declined = PyObject_Vectorcall(self->declined, args, static_cast<size_t>(nargs), nullptr);
  if (declined == nullptr || !self->picks) return declined;
  PyObject* got = PySequence_GetItem(declined, self->at);
  Py_DECREF(declined);
  return got;
}

}  // namespace

int tkreg_replayed_ready() {
  return tkreg_ready_state_type(ReplayedType, sizeof(Replayed), "the state of one replayed plan's call (replayed_call.cpp)",
                                tkreg_state_dealloc<clear>, traverse, clear);
}

PyObject* tkreg_make_replayed(PyObject* /*module*/, PyObject* args) {
  PyObject *allocate = nullptr, *replay = nullptr, *declined = nullptr;
  Py_ssize_t at = 0;
  int picks = 0;
  if (!PyArg_ParseTuple(args, "OOOnp", &allocate, &replay, &declined, &at, &picks)) return nullptr;
  if (!PyCallable_Check(allocate) || !PyCallable_Check(replay) || !PyCallable_Check(declined) || at < 0) {
    PyErr_SetString(PyExc_TypeError, "replayed(): allocate, replay and declined must be callable, and at an index");
    return nullptr;
  }
  auto* self = PyObject_GC_New(Replayed, &ReplayedType);
  if (self == nullptr) return nullptr;
  self->allocate = Py_NewRef(allocate);
  self->replay = Py_NewRef(replay);
  self->declined = Py_NewRef(declined);
  self->at = at;
  self->picks = picks != 0;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  self->def = {"replayed", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
               "replayed(*inputs): new outputs, the recorded launches replayed into them, the caller's output "
               "(replayed_call.cpp)"};
  return tkreg_builtin_of(reinterpret_cast<PyObject*>(self), &self->def);
}
