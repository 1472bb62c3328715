// tkreg.ops' plan key in C++: what a call's plan is kept under, read from the tensors themselves.
//
// In Python the key of two tensors (dtype, shape, strides, device and alignment class of each)
// costs about 1.5 us a call on a launch-bound op, as much as torch's own dispatch; here it is one
// call that reads the TensorImpl and returns its fields packed in a bytes object (hashing and
// comparing one bytes object is cheaper than a tuple of torch objects). The packed key is a second
// spelling: the dispatcher keeps its plans under the Python key (tkreg/ops/keys.py) and files each
// one under the packed key too, made by pack() below from the Python key, which must give the very
// bytes key() gives for the tensors (tests/test_ops_native.py holds them to it).
//
// pack(fields) makes the same bytes from a Python key's flat fields (dtype, shape, strides, device,
// alignment class per tensor), so that a plan made without tensors (one an earlier process
// remembered) is found on the fast path from its first call.
//
// An absent optional input (None) is one word, kAbsent, which no tensor's header equals; pack()
// writes it for a Python key's five None fields (tkreg/ops/keys.py ABSENT).
//
// key(*tensors) returns None, never raises, where an input is neither None nor of a plain type (set with
// plain(types)), is not strided, carries a conjugate or negative bit, is a dual tensor of
// forward-mode AD (level 0, the one torch.autograd.forward_ad uses), or cannot be read, and
// for any tensors while torch.autocast is on: the caller then takes its checked path.
#include "native.h"

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
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
// A header's dim sits in bits 32 and up, never negative: no tensor's header is -1.
constexpr int64_t kAbsent = -1;

}  // namespace

bool tkreg_is_plain(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  for (int i = 0; i < plain_count; ++i) {
    if (type == plain_types[i]) return true;
  }
  return false;
}

namespace {

// Header word of one tensor: dtype, device type and index, and rank, each in its own bits.
int64_t header(c10::ScalarType dtype, c10::Device device, int64_t dim) {
  return static_cast<int64_t>(static_cast<uint8_t>(dtype)) | (static_cast<int64_t>(static_cast<uint8_t>(device.type())) << 8) |
         (static_cast<int64_t>(static_cast<uint8_t>(device.index() + 1)) << 16) | (dim << 32);
}

// The words of one (dtype, shape, strides, device, alignment) as key() writes them; false where the
// fields are not of those types.
bool pack_fields(PyObject* const* f, std::vector<int64_t>& words) {
  PyObject *dtype = f[0], *shape = f[1], *strides = f[2], *device = f[3], *align = f[4];
  if (dtype == Py_None && shape == Py_None && strides == Py_None && device == Py_None && align == Py_None) {
    words.push_back(kAbsent);
    return true;
  }
  if (!THPDtype_Check(dtype) || !PyTuple_Check(shape) || !PyTuple_Check(strides) || !THPDevice_Check(device) ||
      !PyLong_Check(align)) {
    return false;
  }
  const Py_ssize_t dim = PyTuple_GET_SIZE(shape);
  if (PyTuple_GET_SIZE(strides) != dim) return false;
  words.push_back(header(reinterpret_cast<THPDtype*>(dtype)->scalar_type, reinterpret_cast<THPDevice*>(device)->device, dim));
  if (!tkreg_append_ints(shape, words) || !tkreg_append_ints(strides, words)) return false;
  const long long a = PyLong_AsLongLong(align);
  if (a == -1 && PyErr_Occurred()) return false;
  words.push_back(a);
  return true;
}

}  // namespace

bool tkreg_append_ints(PyObject* tuple, std::vector<int64_t>& into) {
  if (!PyTuple_Check(tuple)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
    const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (v == -1 && PyErr_Occurred()) return false;
    into.push_back(v);
  }
  return true;
}

void KeyWords::reserve(Py_ssize_t more) {
  if (used + more <= room) return;
  room = 2 * (used + more);
  large.resize(room);  // keeps the words where they are already there
  if (data == small) std::memcpy(large.data(), small, used * sizeof(int64_t));
  data = large.data();
}

bool tkreg_key_words(PyObject* const* args, Py_ssize_t count, KeyWords& into) {
  try {
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* obj = args[i];
      if (obj == Py_None) {  // an absent optional input (an op without one plans no such key)
        into.push(kAbsent);
        continue;
      }
      if (!tkreg_is_plain(obj)) return false;
      const at::Tensor& t = THPVariable_Unpack(obj);
      if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return false;
      // a dual tensor: forward-mode AD takes the checked path (a tensor without autograd metadata has no tangent)
      if (t.unsafeGetTensorImpl()->autograd_meta() != nullptr && t._fw_grad(/*level=*/0).defined()) return false;
      const int64_t dim = t.dim();
      into.reserve(2 + 2 * dim);
      int64_t* words = into.data;
      Py_ssize_t used = into.used;
      words[used++] = header(t.scalar_type(), t.device(), dim);
      const auto sizes = t.sizes();
      const auto strides = t.strides();
      for (int64_t d = 0; d < dim; ++d) words[used++] = sizes[d];
      for (int64_t d = 0; d < dim; ++d) words[used++] = strides[d];
      words[used++] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.const_data_ptr()) & alignment_mask);
      into.used = used;
    }
  } catch (...) {
    // A tensor whose metadata cannot be read here (symbolic sizes, no storage): the checked path.
    PyErr_Clear();
    return false;
  }
  return true;
}

PyObject* tkreg_key_bytes(const KeyWords& words, Py_ssize_t count) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words.data), count * static_cast<Py_ssize_t>(sizeof(int64_t)));
}

PyObject* tkreg_packed_key(PyObject* const* args, Py_ssize_t count) {
  // Under torch.autocast a peer's own call computes in another dtype: the checked path decides.
  // (fast_call.cpp asks before it reads the words, and casts first where the op declares a policy.)
  if (tkreg_autocast_on()) Py_RETURN_NONE;
  KeyWords words;
  if (!tkreg_key_words(args, count, words)) Py_RETURN_NONE;
  return tkreg_key_bytes(words, words.used);
}

namespace {

PyObject* key(PyObject* /*module*/, PyObject* const* args, Py_ssize_t count) { return tkreg_packed_key(args, count); }

PyObject* pack(PyObject* /*module*/, PyObject* fields) {
  if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) % 5 != 0) {
    PyErr_SetString(PyExc_TypeError, "pack() takes a flat tuple of (dtype, shape, strides, device, alignment) per tensor");
    return nullptr;
  }
  std::vector<int64_t> words;
  PyObject** items = PySequence_Fast_ITEMS(fields);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i += 5) {
    if (!pack_fields(items + i, words)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "pack(): not the fields of a plan key");
      return nullptr;
    }
  }
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words.data()), static_cast<Py_ssize_t>(words.size() * sizeof(int64_t)));
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
    {"pack", pack, METH_O, "pack(fields) -> bytes: the packed key of a Python key's flat tensor fields"},
    {"plain", plain, METH_VARARGS, "plain(types, alignment_bytes): the exact tensor types key() accepts, and the alignment class"},
    {"fast_call", tkreg_make_fast_call, METH_VARARGS,
     "fast_call(name, doc, table, slow, graded, names, kinds, defaults, epoch, autocast[, required]): tkreg.ops.<op>'s planned call (fast_call.cpp)"},
    {"plans_changed", tkreg_plans_changed, METH_NOARGS,
     "plans_changed(): a plan's returned or gradient_call was set; every fast call's memo starts over (fast_call.cpp)"},
    {"outputs", tkreg_make_outputs, METH_O, "outputs(layouts) -> allocate(): a plan's new outputs per call (outputs.cpp)"},
    {"replayed", tkreg_make_replayed, METH_VARARGS,
     "replayed(allocate, replay, declined, at, picks) -> builtin: a replayed plan's call (replayed_call.cpp)"},
    {"reordered", tkreg_make_reordered, METH_VARARGS,
     "reordered(target, order) -> builtin: target called with the inputs at order's positions (reordered_call.cpp)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plan_key", "tkreg.ops' plan key and planned call, in C++", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__plan_key(void) {
  if (tkreg_fast_call_ready() < 0 || tkreg_outputs_ready() < 0 || tkreg_replayed_ready() < 0 ||
      tkreg_reordered_ready() < 0)
    return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", TKREG_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
