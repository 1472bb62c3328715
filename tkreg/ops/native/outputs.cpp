// A plan's new outputs per call, made in C++: outputs(layouts) -> builtin returning a tuple of tensors.
//
// A kernel plan allocates its outputs on every call. From Python that is one torch.empty per
// output, with its shape, dtype and device parsed from arguments each time: on an H100 host 9-20 us
// a call for a norm's two outputs (y and rstd), more than its recorded launch (tkreg/ops/dispatch.py
// and replaying.py call this). Here the layouts are read once and each call is at::empty (or
// at::empty_strided) per output with options made ahead.
//
// layouts: a tuple of (shape, strides or None, dtype, device), as tkreg.ops.forms.OutputLayout
// keeps them. A failed allocation raises what torch.empty raises (torch.OutOfMemoryError).
#include "native.h"

#include <ATen/ATen.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <new>
#include <vector>

namespace {

struct Layout {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool strided;
  at::TensorOptions options;
};

struct Outputs {
  PyObject_HEAD
  std::vector<Layout>* layouts;
  PyMethodDef def;
};

void dealloc(PyObject* self_obj) {
  delete reinterpret_cast<Outputs*>(self_obj)->layouts;
  PyObject_Free(self_obj);
}

PyTypeObject OutputsType = {PyVarObject_HEAD_INIT(nullptr, 0) "tkreg.ops.native.OutputsState"};

PyObject* allocate(PyObject* self_obj, PyObject* /*unused*/) {
  HANDLE_TH_ERRORS
  const auto& layouts = *reinterpret_cast<Outputs*>(self_obj)->layouts;
  const Py_ssize_t count = static_cast<Py_ssize_t>(layouts.size());
  PyObject* made = PyTuple_New(count);
  if (made == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const Layout& layout = layouts[i];
    at::Tensor t = layout.strided ? at::empty_strided(layout.shape, layout.strides, layout.options)
                                  : at::empty(layout.shape, layout.options);
    PyObject* wrapped = THPVariable_Wrap(std::move(t));
    if (wrapped == nullptr) {
      Py_DECREF(made);
      return nullptr;
    }
    PyTuple_SET_ITEM(made, i, wrapped);
  }
  return made;
  END_HANDLE_TH_ERRORS
}

}  // namespace

int tkreg_outputs_ready() {
  OutputsType.tp_basicsize = sizeof(Outputs);
  OutputsType.tp_flags = Py_TPFLAGS_DEFAULT;
  OutputsType.tp_doc = "the layouts of one plan's outputs (outputs.cpp)";
  OutputsType.tp_dealloc = dealloc;
  return PyType_Ready(&OutputsType);
}

PyObject* tkreg_make_outputs(PyObject* /*module*/, PyObject* layouts) {
  if (!PyTuple_Check(layouts)) {
    PyErr_SetString(PyExc_TypeError, "outputs() takes a tuple of (shape, strides or None, dtype, device)");
    return nullptr;
  }
  auto* made = new (std::nothrow) std::vector<Layout>();
  if (made == nullptr) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(layouts); ++i) {
    PyObject* item = PyTuple_GET_ITEM(layouts, i);
    Layout layout;
    bool ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 4;
    PyObject *shape = ok ? PyTuple_GET_ITEM(item, 0) : nullptr, *strides = ok ? PyTuple_GET_ITEM(item, 1) : nullptr;
    PyObject *dtype = ok ? PyTuple_GET_ITEM(item, 2) : nullptr, *device = ok ? PyTuple_GET_ITEM(item, 3) : nullptr;
    ok = ok && THPDtype_Check(dtype) && THPDevice_Check(device) && tkreg_append_ints(shape, layout.shape);
    layout.strided = ok && strides != Py_None;
    ok = ok && (!layout.strided || (tkreg_append_ints(strides, layout.strides) && layout.strides.size() == layout.shape.size()));
    if (!ok) {
      delete made;
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "outputs(): each layout is (shape, strides or None, dtype, device)");
      return nullptr;
    }
    layout.options = at::TensorOptions()
                         .dtype(reinterpret_cast<THPDtype*>(dtype)->scalar_type)
                         .device(reinterpret_cast<THPDevice*>(device)->device);
    made->push_back(std::move(layout));
  }
  auto* self = PyObject_New(Outputs, &OutputsType);
  if (self == nullptr) {
    delete made;
    return nullptr;
  }
  self->layouts = made;
  self->def = {"allocate", allocate, METH_NOARGS, "allocate() -> tuple: new, unwritten outputs of the plan's layouts"};
  return tkreg_builtin_of(reinterpret_cast<PyObject*>(self), &self->def);
}
