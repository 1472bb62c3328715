// tkreg.ops.<op>'s planned call in C++: the whole fast path of a call a model makes again and again.
//
// In Python the fast path (tkreg/ops/fast_paths.py, _UNROLLED) is one frame that asks whether a
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
// The plan's calls are found in a memo of the last plans found (MEMO_SLOTS, by the key's words:
// the tensors' fields, then the parameter values' bits) before the table: the bytes key, its hash
// and the dict lookup cost an H200 host 0.15-0.4 us a call (2026-11-28), 2-4% of a launch-bound
// call. A slot keeps the plan's ``returned`` and ``gradient_call`` themselves, not the plan: their
// two attribute lookups cost a CPU host about 50 ns a call. The slot the last call used is tried
// before the key is hashed. The table's ``epoch`` (a bytearray of 8; tkreg/ops/keys.py PlanTable)
// changes whenever the table starts over or a key gets another plan, and the plans' generation
// (``plans_changed()``, which tkreg/ops/plans.py Plan calls when either attribute is set on any
// plan) whenever a plan's calls change; either empties the memo.
//
// Under torch.autocast the call first casts its inputs as the op declares (``autocast``: the
// policy codes on CUDA and the CPU, autocast.cpp), then takes the same path with autocast off; an
// op that declares nothing for the inputs' device type goes to ``slow``, which makes the peer's own
// call, as does anything the casts do not take.
//
// A call may leave out the op's trailing optional inputs (``required``: how many it must pass):
// they are None, as if passed, so such a call finds the same plan on the same path.
//
// A trace never runs this: torch.compile inlines the polyfill library.py registers for each
// builtin (torch.compiler.substitute_in_graph), and a tracer's tensors are not plain.
#include "native.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

constexpr Py_ssize_t kMemoSlots = 16;  // a power of two: a key's slot is its hash's low bits
constexpr Py_ssize_t kMemoWords = 48;  // longer keys (many inputs of high rank) take the table alone
constexpr Py_ssize_t kPaddedOnStack = 16;  // inputs and parameter values of a call that leaves inputs out

struct MemoSlot {
  uint64_t hash = 0;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  Py_ssize_t length = 0;  // words in use; 0: empty
  int64_t words[kMemoWords];
  PyObject* returned = nullptr;  // the plan's calls when the slot was filled (strong references)
  PyObject* gradient = nullptr;
};

// Bumped whenever any plan's ``returned`` or ``gradient_call`` is set (plans_changed()): a memo
// slot filled in another generation is empty.
uint64_t plan_generation = 1;

struct FastCall {
  PyObject_HEAD
  PyObject* table;     // packed key, or (packed key, parameter values) -> plan
  PyObject* slow;      // slow(inputs: tuple, params: dict)
  PyObject* names;     // the parameters' names (tuple of str)
  PyObject* kinds;     // their declared types (tuple of types)
  PyObject* defaults;  // their default values (tuple): the key's values where a call gives none
  PyObject* epoch;     // bytearray(8): the table's epoch; a memo slot of another epoch is empty
  std::vector<char>* graded;  // per input: whether the op gives it a gradient (its size: the arity)
  int autocast[2];     // the op's autocast policy codes on CUDA and on the CPU (native.h)
  Py_ssize_t required; // inputs a call must pass; the rest (optional) are None where left out
  MemoSlot* memo;      // kMemoSlots slots
  Py_ssize_t last;     // the slot the last call found its plan's calls in
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
  Py_VISIT(self->epoch);
  if (self->memo != nullptr) {
    for (Py_ssize_t i = 0; i < kMemoSlots; ++i) {
      Py_VISIT(self->memo[i].returned);
      Py_VISIT(self->memo[i].gradient);
    }
  }
  return 0;
}

int clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  Py_CLEAR(self->table);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->names);
  Py_CLEAR(self->kinds);
  Py_CLEAR(self->defaults);
  Py_CLEAR(self->epoch);
  if (self->memo != nullptr) {
    for (Py_ssize_t i = 0; i < kMemoSlots; ++i) {
      Py_CLEAR(self->memo[i].returned);
      Py_CLEAR(self->memo[i].gradient);
      self->memo[i].length = 0;
    }
  }
  return 0;
}

void dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  clear(self_obj);
  delete self->graded;
  delete[] self->memo;
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

// Appends a parameter value's words to the memo key (a kind tag, then its bits) where it is None, a
// bool, a float other than NaN or an int that fits in 64 bits; false otherwise (no memo then).
bool value_words(PyObject* value, KeyWords& into) {
  if (value == Py_None || value == Py_True || value == Py_False) {
    into.push(1);
    into.push(value == Py_None ? 0 : value == Py_True ? 1 : 2);
    return true;
  }
  if (PyFloat_CheckExact(value)) {
    const double v = PyFloat_AS_DOUBLE(value);
    if (v != v) return false;
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    into.push(2);
    into.push(bits);
    return true;
  }
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    into.push(3);
    into.push(v);
    return true;
  }
  return false;
}

uint64_t hash_words(const int64_t* words, Py_ssize_t count) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (Py_ssize_t i = 0; i < count; ++i) {
    h = (h ^ static_cast<uint64_t>(words[i])) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  }
  return h;
}

uint64_t epoch_of(FastCall* self) {
  uint64_t epoch = 0;
  if (PyByteArray_GET_SIZE(self->epoch) >= static_cast<Py_ssize_t>(sizeof epoch)) {
    std::memcpy(&epoch, PyByteArray_AS_STRING(self->epoch), sizeof epoch);
  }
  return epoch;
}

// Whether a slot holds the calls of the plan kept under these words, in this epoch and generation.
bool slot_holds(const MemoSlot& slot, const KeyWords& words, uint64_t epoch) {
  return slot.length == words.used && slot.epoch == epoch && slot.generation == plan_generation &&
         std::memcmp(slot.words, words.data, words.used * sizeof(int64_t)) == 0;
}

// The calls of the plan kept for this call (``returned`` and ``gradient``, new references): 1 where
// found, from the memo, else from the table (and then kept in the memo); 0, with no exception set,
// where the call is not one the fast path takes; -1 on an error.
int calls_of(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** returned,
             PyObject** gradient) {
  const bool has_params = PyTuple_GET_SIZE(self->names) > 0;
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw > 0 && !has_params) return 0;
  KeyWords words;
  if (!tkreg_key_words(args, nargs, words)) return 0;
  const Py_ssize_t tensor_words = words.used;
  PyObject* values = nullptr;  // a new reference, where the op has parameters
  if (has_params) {
    values = nkw > 0 ? given_values(self, args + nargs, kwnames) : Py_NewRef(self->defaults);
    if (values == nullptr) return 0;
  }
  bool memo_key = true;
  for (Py_ssize_t i = 0; values != nullptr && memo_key && i < PyTuple_GET_SIZE(values); ++i) {
    memo_key = value_words(PyTuple_GET_ITEM(values, i), words);
  }
  MemoSlot* slot = nullptr;
  uint64_t hash = 0, epoch = 0;
  if (memo_key && words.used <= kMemoWords) {
    epoch = epoch_of(self);
    slot = &self->memo[self->last];
    if (!slot_holds(*slot, words, epoch)) {  // a model that calls one signature over and over never hashes
      hash = hash_words(words.data, words.used);
      self->last = static_cast<Py_ssize_t>(hash & (kMemoSlots - 1));
      slot = &self->memo[self->last];
    }
    if (slot_holds(*slot, words, epoch)) {
      Py_XDECREF(values);
      *returned = Py_NewRef(slot->returned);
      *gradient = Py_NewRef(slot->gradient);
      return 1;
    }
  }
  PyObject* key = tkreg_key_bytes(words, tensor_words);
  if (key != nullptr && values != nullptr) {
    PyObject* packed = key;
    key = PyTuple_Pack(2, packed, values);
    Py_DECREF(packed);
  }
  Py_XDECREF(values);
  if (key == nullptr) {
    PyErr_Clear();
    return 0;
  }
  PyObject* plan = PyDict_GetItemWithError(self->table, key);  // borrowed
  Py_DECREF(key);
  if (plan == nullptr) {
    PyErr_Clear();
    return 0;
  }
  Py_INCREF(plan);  // the attribute lookups may run Python code
  const uint64_t generation = plan_generation;
  *returned = PyObject_GetAttr(plan, returned_attr);
  *gradient = *returned != nullptr ? PyObject_GetAttr(plan, gradient_attr) : nullptr;
  Py_DECREF(plan);
  if (*gradient == nullptr) {
    Py_CLEAR(*returned);
    return -1;
  }
  if (slot != nullptr && generation == plan_generation) {
    Py_XSETREF(slot->returned, Py_NewRef(*returned));
    Py_XSETREF(slot->gradient, Py_NewRef(*gradient));
    std::memcpy(slot->words, words.data, words.used * sizeof(int64_t));
    slot->length = words.used;
    slot->hash = hash;
    slot->epoch = epoch;
    slot->generation = generation;
  }
  return 1;
}

// The call of inputs the key may take: the plan's, or the checked path's.
PyObject* planned_call(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const auto& graded = *self->graded;
  PyObject *returned = nullptr, *gradient = nullptr;
  const int found = calls_of(self, args, nargs, kwnames, &returned, &gradient);
  if (found < 0) return nullptr;
  if (found == 0) return slow_call(self, args, nargs, kwnames);
  bool wanted = false, ungraded_wanted = false;
  if (at::GradMode::is_enabled()) {
    for (Py_ssize_t i = 0; i < nargs; ++i) {  // plain tensors or None: the key checked each one
      if (args[i] != Py_None && THPVariable_Unpack(args[i]).requires_grad()) {
        wanted = true;
        ungraded_wanted = ungraded_wanted || !graded[i];
      }
    }
  }
  // held until the call returns: a call may fill the memo again (a nested call, a first call that
  // replaces itself), which lets go of the slot's references
  PyObject* run = wanted ? gradient : returned;
  PyObject* got = nullptr;
  if (run == Py_None || ungraded_wanted) {  // the checked path: its own error, or the op's autograd
    got = slow_call(self, args, nargs, kwnames);
  } else {
    got = PyObject_Vectorcall(run, args, static_cast<size_t>(nargs), nullptr);
  }
  Py_DECREF(returned);
  Py_DECREF(gradient);
  return got;
}

// A call under torch.autocast: the inputs cast as the op declares, then the planned call of them
// with autocast off (the plan's kernels, or a peer plan's torch call in the dtypes it was planned
// for), as the checked path makes it (library.py, ``slow``).
PyObject* autocast_call(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  TkregOwned cast;
  if (!tkreg_autocast_inputs(self->autocast, args, nargs, cast.items)) return slow_call(self, args, nargs, kwnames);
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t j = 0; j < nkw; ++j) cast.items.push_back(Py_NewRef(args[nargs + j]));  // the parameters' values
  TkregAutocastOff off;
  return planned_call(self, cast.items.data(), nargs, kwnames);
}

PyObject* checked_call(FastCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) return slow_call(self, args, nargs, kwnames);
  if (tkreg_autocast_on()) return autocast_call(self, args, nargs, kwnames);
  return planned_call(self, args, nargs, kwnames);
}

PyObject* fast_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<FastCall*>(self_obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const auto arity = static_cast<Py_ssize_t>(self->graded->size());
  if (nargs == arity) return checked_call(self, args, nargs, kwnames);
  if (nargs > arity || nargs < self->required) return slow_call(self, args, nargs, kwnames);
  // trailing optional inputs left out: None in their place, then the parameters' values. On the
  // stack where they fit (matmul(a, b) leaves out its bias on every call: no allocation for it).
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  const Py_ssize_t total = arity + nkw;
  PyObject* on_stack[kPaddedOnStack];
  std::vector<PyObject*> on_heap;
  PyObject** padded = on_stack;
  if (total > kPaddedOnStack) {
    on_heap.resize(static_cast<size_t>(total));
    padded = on_heap.data();
  }
  std::copy(args, args + nargs, padded);
  std::fill(padded + nargs, padded + arity, Py_None);
  std::copy(args + nargs, args + nargs + nkw, padded + arity);
  return checked_call(self, padded, arity, kwnames);
}

}  // namespace

PyObject* tkreg_plans_changed(PyObject* /*module*/, PyObject* /*unused*/) {
  ++plan_generation;
  Py_RETURN_NONE;
}

int tkreg_fast_call_ready() {
  if (tkreg_ready_state_type(FastCallType, sizeof(FastCall), "the state of one tkreg.ops.<op> builtin (fast_call.cpp)",
                             dealloc, traverse, clear) < 0) {
    return -1;
  }
  returned_attr = PyUnicode_InternFromString("returned");
  gradient_attr = PyUnicode_InternFromString("gradient_call");
  return returned_attr != nullptr && gradient_attr != nullptr ? 0 : -1;
}

PyObject* tkreg_make_fast_call(PyObject* /*module*/, PyObject* args) {
  const char *name = nullptr, *doc = nullptr;
  PyObject *table = nullptr, *slow = nullptr, *graded = nullptr, *names = nullptr, *kinds = nullptr, *defaults = nullptr;
  PyObject* epoch = nullptr;
  int autocast_cuda = 0, autocast_cpu = 0;
  Py_ssize_t required = -1;
  if (!PyArg_ParseTuple(args, "ssO!OO!O!O!O!O!(ii)|n", &name, &doc, &PyDict_Type, &table, &slow, &PyTuple_Type, &graded,
                        &PyTuple_Type, &names, &PyTuple_Type, &kinds, &PyTuple_Type, &defaults, &PyByteArray_Type, &epoch,
                        &autocast_cuda, &autocast_cpu, &required)) {
    return nullptr;
  }
  for (const int policy : {autocast_cuda, autocast_cpu}) {
    if (policy < TKREG_AUTOCAST_UNDECLARED || policy > TKREG_AUTOCAST_FLOAT32) {
      PyErr_SetString(PyExc_ValueError, "fast_call(): autocast must be two policy codes (tkreg/ops/native/native.h)");
      return nullptr;
    }
  }
  const Py_ssize_t count = PyTuple_GET_SIZE(names);
  if (!PyCallable_Check(slow) || PyTuple_GET_SIZE(graded) == 0 || PyTuple_GET_SIZE(kinds) != count ||
      PyTuple_GET_SIZE(defaults) != count || PyByteArray_GET_SIZE(epoch) != 8) {
    PyErr_SetString(PyExc_ValueError, "fast_call(): slow must be callable, graded name every input, names, kinds "
                                      "and defaults be of one length, and epoch a bytearray of 8");
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
  self->epoch = Py_NewRef(epoch);
  self->autocast[0] = autocast_cuda;
  self->autocast[1] = autocast_cpu;
  // every input required unless told (0 < required <= arity)
  const Py_ssize_t arity = PyTuple_GET_SIZE(graded);
  self->required = required > 0 && required <= arity ? required : arity;
  self->memo = new (std::nothrow) MemoSlot[kMemoSlots];
  self->last = 0;
  self->graded = new (std::nothrow) std::vector<char>();
  self->name = new (std::nothrow) std::string(name);
  self->doc = new (std::nothrow) std::string(doc);
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  if (self->graded == nullptr || self->memo == nullptr || self->name == nullptr || self->doc == nullptr) {
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
