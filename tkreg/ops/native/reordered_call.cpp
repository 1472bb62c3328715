// A peer plan's direct torch call in C++: reordered(target, order) -> builtin.
//
// An op's peer is often a Python function that looks at its inputs and then makes one torch call:
// matmul's is torch.matmul(a, b) without a bias and torch.addmm(bias, a, b) with one. A plan is
// kept per signature, so which call that is is known when the plan is made (Op.peer_direct), and
// the plan can make it with no frame of the peer's own: call(*inputs) is target(inputs[order[0]],
// inputs[order[1]], ...). On the 2-core CPU machine the Python peer cost tkreg.ops.matmul 0.4-0.9 us
// a call over the torch call it makes (2026-12-01), more than the 5% a launch-bound call can spare.
//
// A call passes what fast_call.cpp passes (every input, None for one left out); an index past the
// inputs given raises TypeError, as a call of a function with too few arguments does.
#include "native.h"

#include <new>

namespace {

constexpr Py_ssize_t kMaxOrder = 16;

struct Reordered {
  PyObject_HEAD
  PyObject* target;
  Py_ssize_t count;
  Py_ssize_t order[kMaxOrder];
  PyMethodDef def;
};

int traverse(PyObject* self_obj, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<Reordered*>(self_obj)->target);
  return 0;
}

int clear(PyObject* self_obj) {
  Py_CLEAR(reinterpret_cast<Reordered*>(self_obj)->target);
  return 0;
}

PyTypeObject ReorderedType = {PyVarObject_HEAD_INIT(nullptr, 0) "tkreg.ops.native.ReorderedState"};

PyObject* call(PyObject* self_obj, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<Reordered*>(self_obj);
  PyObject* picked[kMaxOrder];
  for (Py_ssize_t i = 0; i < self->count; ++i) {
    const Py_ssize_t at = self->order[i];
    if (at >= nargs) {
      PyErr_Format(PyExc_TypeError, "reordered call: takes input %zd, given %zd inputs", at, nargs);
      return nullptr;
    }
    picked[i] = args[at];  // borrowed: the caller holds them for the call
  }
  return PyObject_Vectorcall(self->target, picked, static_cast<size_t>(self->count), nullptr);
}

}  // namespace

int tkreg_reordered_ready() {
  return tkreg_ready_state_type(ReorderedType, sizeof(Reordered), "the state of one reordered call (reordered_call.cpp)",
                                tkreg_state_dealloc<clear>, traverse, clear);
}

PyObject* tkreg_make_reordered(PyObject* /*module*/, PyObject* args) {
  PyObject *target = nullptr, *order = nullptr;
  if (!PyArg_ParseTuple(args, "OO!", &target, &PyTuple_Type, &order)) return nullptr;
  const Py_ssize_t count = PyTuple_GET_SIZE(order);
  if (!PyCallable_Check(target) || count > kMaxOrder) {
    PyErr_Format(PyExc_TypeError, "reordered(): target must be callable, and order a tuple of at most %zd indices", kMaxOrder);
    return nullptr;
  }
  Py_ssize_t indices[kMaxOrder];
  for (Py_ssize_t i = 0; i < count; ++i) {
    const Py_ssize_t at = PyNumber_AsSsize_t(PyTuple_GET_ITEM(order, i), PyExc_OverflowError);
    if (at == -1 && PyErr_Occurred()) return nullptr;
    if (at < 0) {
      PyErr_SetString(PyExc_ValueError, "reordered(): an index in order is negative");
      return nullptr;
    }
    indices[i] = at;
  }
  auto* self = PyObject_GC_New(Reordered, &ReorderedType);
  if (self == nullptr) return nullptr;
  self->target = Py_NewRef(target);
  self->count = count;
  for (Py_ssize_t i = 0; i < count; ++i) self->order[i] = indices[i];
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  self->def = {"reordered", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
               "reordered(*inputs): the target called with the inputs at the order's positions (reordered_call.cpp)"};
  return tkreg_builtin_of(reinterpret_cast<PyObject*>(self), &self->def);
}
