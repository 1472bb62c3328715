// tkreg.ops.<op>'s planned call in C++: the whole fast path of a call a model makes again and again.
//
// In Python the fast path (tkreg/ops/library.py, _UNROLLED) is one frame that asks whether a
// trace is running, builds the key, looks the plan up and checks grad mode, a dispatch mode and
// each input's requires_grad: about 0.9 us on a CPU machine where torch.add itself takes 1.9 us,
// more than the 5% a launch-bound call can spare. Here the same steps cost one builtin call.
//
// A call takes the plan's ``returned`` where: it passes the op's tensors positionally and either no
// parameters or exactly the op's parameters by name, each of its declared type; every input is a
// plain strided tensor (the packed key, plan_key.cpp); no dispatch mode is active; a plan is kept
// under the key (``table``: the PlanTable's packed keys); and no input wants a gradient. Where one
// wants a gradient, the plan's ``gradient_call`` takes the call if it has one and no input the op
// gives no gradient wants one. Anything else goes to ``slow(inputs, params)``, the checked path.
//
// A trace never runs this: torch.compile inlines the polyfill library.py registers for each
// builtin (torch.compiler.substitute_in_graph), and a tracer's tensors are not plain.
#include "native.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <new>
#include <string>
#include <vector>

namespace {

struct FastCall {
  PyObject_HEAD
  PyObject* table;     // packed key, or (packed key, parameter values) -> plan
  PyObject* slow;      // slow(inputs: tuple, params: dict)
  PyObject* names;     // the parameters' names (tuple of str)
  PyObject* kinds;     // their declared types (tuple of types)
  PyObject* defaults;  // their default values (tuple): the key's values where a call gives none
  std::vector<char>* graded;  // per input: whether the op gives it a gradient (its size: the arity)
  std::string* name;
  std::string* doc;
  PyMethodDef def;
};

PyObject* returned_attr = nullptr;
PyObject* gradient_attr = nullptr;

int traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  Py_VISIT(self->table);
  Py_VISIT(self->slow);
  Py_VISIT(self->names);
  Py_VISIT(self->kinds);
  Py_VISIT(self->defaults);
  return 0;
}

int clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  Py_CLEAR(self->table);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->names);
  Py_CLEAR(self->kinds);
  Py_CLEAR(self->defaults);
  return 0;
}

void dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  clear(self_obj);
  delete self->graded;
  delete self->name;
  delete self->doc;
  PyObject_GC_Del(self_obj);
}

PyTypeObject FastCallType = {PyVarObject_HEAD_INIT(nullptr, 0) "tkreg.ops.native.FastCallState"};

// The checked path: every positional argument as the inputs, the keywords as the parameters.
PyObject* slow_call(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* inputs = PyTuple_New(nargs);
  if (inputs == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(inputs, i, args[i]);
  }
  PyObject* params = PyDict_New();
  if (params == nullptr) {
    Py_DECREF(inputs);
    return nullptr;
  }
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    if (PyDict_SetItem(params, PyTuple_GET_ITEM(kwnames, j), args[nargs + j]) < 0) {
      Py_DECREF(inputs);
      Py_DECREF(params);
      return nullptr;
    }
  }
  PyObject* got = PyObject_CallFunctionObjArgs(self->slow, inputs, params, nullptr);
  Py_DECREF(inputs);
  Py_DECREF(params);
  return got;
}

// The parameter values a call gave by name, in the op's order, where it gave exactly the op's
// parameters, each of its declared type (a new tuple); else nullptr, with no exception set.
PyObject* given_values(FastCall* self, PyObject* const* values, PyObject* kwnames) {
  const Py_ssize_t count = PyTuple_GET_SIZE(self->names);
  if (PyTuple_GET_SIZE(kwnames) != count) return nullptr;
  PyObject* got = PyTuple_New(count);
  if (got == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* name = PyTuple_GET_ITEM(self->names, i);
    PyObject* value = nullptr;
    for (Py_ssize_t j = 0; j < count && value == nullptr; ++j) {
      PyObject* given = PyTuple_GET_ITEM(kwnames, j);
      if (given == name || PyUnicode_Compare(given, name) == 0) value = values[j];
    }
    if (value == nullptr || Py_TYPE(value) != reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(self->kinds, i))) {
      Py_DECREF(got);
      return nullptr;
    }
    Py_INCREF(value);
    PyTuple_SET_ITEM(got, i, value);
  }
  return got;
}

// The plan kept for this call (a new reference), or nullptr with no exception set where the call
// is not one the fast path takes.
PyObject* plan_of(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const bool has_params = PyTuple_GET_SIZE(self->names) > 0;
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw > 0 && !has_params) return nullptr;
  PyObject* packed = tkreg_packed_key(args, nargs);
  if (packed == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (packed == Py_None) {
    Py_DECREF(packed);
    return nullptr;
  }
  PyObject* key = packed;
  if (has_params) {
    PyObject* values = nkw > 0 ? given_values(self, args + nargs, kwnames) : Py_NewRef(self->defaults);
    if (values == nullptr) {
      Py_DECREF(packed);
      return nullptr;
    }
    key = PyTuple_Pack(2, packed, values);
    Py_DECREF(packed);
    Py_DECREF(values);
    if (key == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
  }
  PyObject* plan = PyDict_GetItemWithError(self->table, key);  // borrowed
  Py_DECREF(key);
  if (plan == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  return Py_NewRef(plan);
}

PyObject* fast_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const auto& graded = *self->graded;
  if (nargs != static_cast<Py_ssize_t>(graded.size()) || c10::impl::TorchDispatchModeTLS::any_modes_set()) {
    return slow_call(self, args, nargs, kwnames);
  }
  PyObject* plan = plan_of(self, args, nargs, kwnames);
  if (plan == nullptr) return slow_call(self, args, nargs, kwnames);
  bool wanted = false, ungraded_wanted = false;
  if (at::GradMode::is_enabled()) {
    for (Py_ssize_t i = 0; i < nargs; ++i) {  // plain tensors: the key checked each one
      if (THPVariable_Unpack(args[i]).requires_grad()) {
        wanted = true;
        ungraded_wanted = ungraded_wanted || !graded[i];
      }
    }
  }
  PyObject* run = PyObject_GetAttr(plan, wanted ? gradient_attr : returned_attr);
  Py_DECREF(plan);
  if (run == nullptr) return nullptr;
  if (run == Py_None || ungraded_wanted) {  // the checked path: its own error, or the op's autograd
    Py_DECREF(run);
    return slow_call(self, args, nargs, kwnames);
  }
  PyObject* got = PyObject_Vectorcall(run, args, static_cast<size_t>(nargs), nullptr);
  Py_DECREF(run);
  return got;
}

}  // namespace

int tkreg_fast_call_ready() {
  FastCallType.tp_basicsize = sizeof(FastCall);
  FastCallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  FastCallType.tp_doc = "the state of one tkreg.ops.<op> builtin (fast_call.cpp)";
  FastCallType.tp_dealloc = dealloc;
  FastCallType.tp_traverse = traverse;
  FastCallType.tp_clear = clear;
  if (PyType_Ready(&FastCallType) < 0) return -1;
  returned_attr = PyUnicode_InternFromString("returned");
  gradient_attr = PyUnicode_InternFromString("gradient_call");
  return returned_attr != nullptr && gradient_attr != nullptr ? 0 : -1;
}

PyObject* tkreg_make_fast_call(PyObject* /*module*/, PyObject* args) {
  const char *name = nullptr, *doc = nullptr;
  PyObject *table = nullptr, *slow = nullptr, *graded = nullptr, *names = nullptr, *kinds = nullptr, *defaults = nullptr;
  if (!PyArg_ParseTuple(args, "ssO!OO!O!O!O!", &name, &doc, &PyDict_Type, &table, &slow, &PyTuple_Type, &graded,
                        &PyTuple_Type, &names, &PyTuple_Type, &kinds, &PyTuple_Type, &defaults)) {
    return nullptr;
  }
  const Py_ssize_t count = PyTuple_GET_SIZE(names);
  if (!PyCallable_Check(slow) || PyTuple_GET_SIZE(graded) == 0 || PyTuple_GET_SIZE(kinds) != count ||
      PyTuple_GET_SIZE(defaults) != count) {
    PyErr_SetString(PyExc_ValueError, "fast_call(): slow must be callable, graded name every input, and names, kinds "
                                      "and defaults be of one length");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i)) || !PyType_Check(PyTuple_GET_ITEM(kinds, i))) {
      PyErr_SetString(PyExc_TypeError, "fast_call(): names must be strings and kinds types");
      return nullptr;
    }
  }
  auto* self = PyObject_GC_New(FastCall, &FastCallType);
  if (self == nullptr) return nullptr;
  self->table = Py_NewRef(table);
  self->slow = Py_NewRef(slow);
  self->names = Py_NewRef(names);
  self->kinds = Py_NewRef(kinds);
  self->defaults = Py_NewRef(defaults);
  self->graded = new (std::nothrow) std::vector<char>();
  self->name = new (std::nothrow) std::string(name);
  self->doc = new (std::nothrow) std::string(doc);
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  if (self->graded == nullptr || self->name == nullptr || self->doc == nullptr) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(graded); ++i) {
    const int truth = PyObject_IsTrue(PyTuple_GET_ITEM(graded, i));
    if (truth < 0) {
      Py_DECREF(self);
      return nullptr;
    }
    self->graded->push_back(static_cast<char>(truth));
  }
  // The method definition lives in the state, which the builtin keeps alive as its __self__.
  self->def = {self->name->c_str(), reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_call)),
               METH_FASTCALL | METH_KEYWORDS, self->doc->c_str()};
  PyObject* module = PyUnicode_FromString("tkreg.ops");
  PyObject* made = module != nullptr ? PyCFunction_NewEx(&self->def, reinterpret_cast<PyObject*>(self), module) : nullptr;
  Py_XDECREF(module);
  Py_DECREF(self);
  return made;
}
