// tkreg.ops' plan key in C++: what a call's plan is kept under, read from the tensors themselves.
//
// In Python the key of two tensors (dtype, shape, strides, device and alignment class of each)
// costs about 1.5 us a call on a launch-bound op, as much as torch's own dispatch; here it is one
// call that reads the TensorImpl and returns its fields packed in a bytes object (hashing and
// comparing one bytes object is cheaper than a tuple of torch objects). The packed key is an alias:
// the dispatcher keeps its plans under the Python key (tkreg/ops/keys.py) and remembers, for each
// plan, the packed key of the inputs that found it, so the two spellings never have to agree byte
// for byte, only on which tensors are alike.
//
// key(*tensors) returns None, never raises, where an input is not of a plain type (set with
// plain(types)), is not strided, carries a conjugate or negative bit, or cannot be read: the
// caller then takes its checked path.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

#ifndef TKREG_TORCH_VERSION
#error "build with -DTKREG_TORCH_VERSION=<torch.__version__> (setup.py does)"
#endif

namespace {

constexpr int kMaxPlain = 8;
PyTypeObject* plain_types[kMaxPlain] = {};
int plain_count = 0;
// An address's alignment class: its low bits, as tkreg.core.signature.ALIGNMENT_CLASS_BYTES
// (set with plain(types, alignment_bytes)).
uintptr_t alignment_mask = 15;

bool is_plain(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  for (int i = 0; i < plain_count; ++i) {
    if (type == plain_types[i]) return true;
  }
  return false;
}

// Header word of one tensor: dtype, device type and index, and rank, each in its own bits.
int64_t header(const at::Tensor& t) {
  const c10::Device device = t.device();
  return static_cast<int64_t>(static_cast<uint8_t>(t.scalar_type())) |
         (static_cast<int64_t>(static_cast<uint8_t>(device.type())) << 8) |
         (static_cast<int64_t>(static_cast<uint8_t>(device.index() + 1)) << 16) | (static_cast<int64_t>(t.dim()) << 32);
}

PyObject* key(PyObject* /*module*/, PyObject* const* args, Py_ssize_t count) {
  // One header, the sizes, the strides and the alignment class per tensor, as int64 words.
  int64_t small[64];
  std::vector<int64_t> large;
  int64_t* words = small;
  Py_ssize_t used = 0, room = 64;
  try {
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* obj = args[i];
      if (!is_plain(obj)) Py_RETURN_NONE;
      const at::Tensor& t = THPVariable_Unpack(obj);
      if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) Py_RETURN_NONE;
      const int64_t dim = t.dim();
      if (used + 2 + 2 * dim > room) {
        room = 2 * (used + 2 + 2 * dim);
        large.resize(room);
        if (words == small) std::memcpy(large.data(), small, used * sizeof(int64_t));
        words = large.data();
      }
      words[used++] = header(t);
      const auto sizes = t.sizes();
      const auto strides = t.strides();
      for (int64_t d = 0; d < dim; ++d) words[used++] = sizes[d];
      for (int64_t d = 0; d < dim; ++d) words[used++] = strides[d];
      words[used++] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.const_data_ptr()) & alignment_mask);
    }
  } catch (...) {
    // A tensor whose metadata cannot be read here (symbolic sizes, no storage): the checked path.
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words), used * static_cast<Py_ssize_t>(sizeof(int64_t)));
}

PyObject* plain(PyObject* /*module*/, PyObject* args) {
  PyObject* types = nullptr;
  unsigned long long alignment_bytes = 0;
  if (!PyArg_ParseTuple(args, "O!K", &PyTuple_Type, &types, &alignment_bytes)) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(types);
  if (n > kMaxPlain) {
    PyErr_Format(PyExc_ValueError, "at most %d plain types", kMaxPlain);
    return nullptr;
  }
  if (alignment_bytes == 0 || (alignment_bytes & (alignment_bytes - 1)) != 0) {
    PyErr_SetString(PyExc_ValueError, "alignment_bytes must be a power of two");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(types, i))) {
      PyErr_SetString(PyExc_TypeError, "plain() takes a tuple of types");
      return nullptr;
    }
  }
  for (int i = 0; i < plain_count; ++i) Py_DECREF(plain_types[i]);
  for (Py_ssize_t i = 0; i < n; ++i) {
    plain_types[i] = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(types, i));
    Py_INCREF(plain_types[i]);
  }
  plain_count = static_cast<int>(n);
  alignment_mask = static_cast<uintptr_t>(alignment_bytes - 1);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(key)), METH_FASTCALL,
     "key(*tensors) -> bytes | None: the packed plan key of these tensors (None: take the checked path)"},
    {"plain", plain, METH_VARARGS, "plain(types, alignment_bytes): the exact tensor types key() accepts, and the alignment class"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plan_key", "tkreg.ops' plan key, read in C++", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__plan_key(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", TKREG_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
