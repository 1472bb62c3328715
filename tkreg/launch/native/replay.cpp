// A recorded call's launches made again in C++ (tkreg.launch.recording): the extension module
// tkreg.launch.native._replay.
//
// The Python replay is a generated function that checks the fast path's guards, reads each
// tensor's address, and calls triton's C launcher per launch, which parses its arguments again
// from Python objects and releases and takes back the GIL around cuLaunchKernelEx. A replay here
// keeps each launch's parameters packed once (8 bytes a parameter, the tensors' left empty), so a
// call checks the same guards, writes the call's addresses in and calls cuLaunchKernelEx: less
// host work per call, and less memory touched, which is what a call pays for when the host's
// caches are cold (a model's first call of a shape after other work).
//
// The guards are the Python replay's (tkreg/launch/fastlaunch.py ``_fast_path_open``): fast
// launches on, no launch hook, not triton's debug or instrumentation mode, no pre-run hook, the
// recorded current device, and a current CUDA context (else the Python path runs, whose launcher
// makes one). Where one fails, ``replay`` launches nothing and returns False. Kernels that read
// globals, take tensor descriptors, scratch memory or clusters are never given a replay here.
#include <Python.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <new>
#include <vector>

#include "cuda.h"  // triton's own copy (triton/backends/nvidia/include): types only, the driver is found at run time

namespace {

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using CtxGetCurrent = CUresult (*)(CUcontext*);
using GetErrorString = CUresult (*)(CUresult, const char**);

struct Driver {
  bool looked = false;
  LaunchKernelEx launch = nullptr;
  CtxGetCurrent context = nullptr;
  GetErrorString error = nullptr;
};
Driver driver;

bool driver_found() {
  if (!driver.looked) {
    driver.looked = true;
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY);
    if (lib != nullptr) {
      driver.launch = reinterpret_cast<LaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
      driver.context = reinterpret_cast<CtxGetCurrent>(dlsym(lib, "cuCtxGetCurrent"));
      driver.error = reinterpret_cast<GetErrorString>(dlsym(lib, "cuGetErrorString"));
    }
  }
  return driver.launch != nullptr && driver.context != nullptr && driver.error != nullptr;
}

// What the guards read, given once by guards(): fastlaunch's globals (``_enabled``,
// ``_current_device``, ``_current_stream``, read at each call so a test's fakes and set_enabled
// apply at once), triton's runtime and compilation knobs, and triton's HookChain type.
struct Guards {
  PyObject* globals = nullptr;
  PyObject* runtime = nullptr;
  PyObject* compilation = nullptr;
  PyObject* hook_chain = nullptr;
};
Guards guards_of;

PyObject *enabled_name, *device_name, *stream_name, *enter_name, *exit_name, *debug_name, *instrumentation_name,
    *calls_name, *pre_run_name;

// 1 where the attribute is a hook that calls nothing (None, or a HookChain with no calls), else 0.
int quiet_hook(PyObject* owner, PyObject* name) {
  PyObject* hook = PyObject_GetAttr(owner, name);
  if (hook == nullptr) return -1;
  int quiet = hook == Py_None;
  if (!quiet && Py_TYPE(hook) == reinterpret_cast<PyTypeObject*>(guards_of.hook_chain)) {
    PyObject* calls = PyObject_GetAttr(hook, calls_name);
    quiet = calls != nullptr && PyList_CheckExact(calls) && PyList_GET_SIZE(calls) == 0;
    Py_XDECREF(calls);
  }
  Py_DECREF(hook);
  return quiet;
}

// 1 where the attribute is false, 0 where true, -1 where it cannot be read.
int attribute_false(PyObject* owner, PyObject* name) {
  PyObject* value = PyObject_GetAttr(owner, name);
  if (value == nullptr) return -1;
  const int truth = PyObject_IsTrue(value);
  Py_DECREF(value);
  return truth < 0 ? -1 : !truth;
}

bool fast_path_open() {
  if (guards_of.globals == nullptr) return false;
  PyObject* enabled = PyDict_GetItemWithError(guards_of.globals, enabled_name);  // borrowed
  const bool open = enabled == Py_True && quiet_hook(guards_of.runtime, enter_name) == 1 &&
                    quiet_hook(guards_of.runtime, exit_name) == 1 && attribute_false(guards_of.runtime, debug_name) == 1 &&
                    attribute_false(guards_of.compilation, instrumentation_name) == 1;
  if (!open) PyErr_Clear();  // a guard that cannot be read: the Python path says why
  return open;
}

// A global function of fastlaunch called with ``args``, as an int (-1 with no exception where it
// cannot be read as one).
long long call_global(PyObject* name, PyObject* const* args, size_t nargs) {
  PyObject* function = PyDict_GetItemWithError(guards_of.globals, name);  // borrowed
  if (function == nullptr) {
    PyErr_Clear();
    return -1;
  }
  PyObject* got = PyObject_Vectorcall(function, args, nargs, nullptr);
  if (got == nullptr) {
    PyErr_Clear();
    return -1;
  }
  const long long value = PyLong_Check(got) ? PyLong_AsLongLong(got) : -1;
  Py_DECREF(got);
  if (value == -1) PyErr_Clear();
  return value;
}

struct Launch {
  CUfunction function;
  unsigned grid[3];
  unsigned block;   // 32 * num_warps
  unsigned shared;  // dynamic shared memory, bytes
  bool cooperative, pdl;
  std::vector<uint64_t> words;                   // one a kernel parameter, as passed, then the two scratch pointers
  std::vector<std::pair<Py_ssize_t, Py_ssize_t>> slots;  // (word, index of the call's tensor)
};

struct Replay {
  PyObject_HEAD
  PyObject* kernels;  // the launches' JITFunctions: their pre-run hooks are checked each call
  PyObject* device;   // the recorded current device (an int)
  long long device_index;
  Py_ssize_t tensors;  // how many of the call's tensors the launches take (the highest index + 1)
  std::vector<Launch>* launches;
  PyMethodDef def;
};

int traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<Replay*>(self_obj);
  Py_VISIT(self->kernels);
  Py_VISIT(self->device);
  return 0;
}

int clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<Replay*>(self_obj);
  Py_CLEAR(self->kernels);
  Py_CLEAR(self->device);
  return 0;
}

void dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<Replay*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  clear(self_obj);
  delete self->launches;
  PyObject_GC_Del(self_obj);
}

PyTypeObject ReplayType = {PyVarObject_HEAD_INIT(nullptr, 0) "tkreg.launch.native.ReplayState"};

// Room for a call's words (or addresses, or parameter pointers) on the stack, as most kernels take
// fewer than kOnStack parameters; more go on the heap.
constexpr size_t kOnStack = 48;
template <typename T>
struct Room {
  T small[kOnStack];
  std::vector<T> large;
  T* of(size_t count) {
    if (count <= kOnStack) return small;
    large.resize(count);
    return large.data();
  }
};

// The call's tensors' addresses, in order, into ``into``; false (no exception) where the call does
// not give as many tensors as the launches take, or one is not a tensor. None (an absent optional
// input, which the recorded call had in the same place) is no launch's argument: 0 there.
bool addresses(Replay* self, PyObject* tensors, uint64_t* into) {
  if (!PyTuple_Check(tensors) || PyTuple_GET_SIZE(tensors) < self->tensors) return false;
  for (Py_ssize_t i = 0; i < self->tensors; ++i) {
    PyObject* item = PyTuple_GET_ITEM(tensors, i);
    if (item == Py_None) {
      into[i] = 0;
      continue;
    }
    if (!THPVariable_Check(item)) return false;
    into[i] = reinterpret_cast<uint64_t>(THPVariable_Unpack(item).data_ptr());
  }
  return true;
}

// The launch's words with the call's addresses in their slots, into ``values``.
void fill(const Launch& launch, const uint64_t* at, uint64_t* values) {
  std::memcpy(values, launch.words.data(), launch.words.size() * sizeof(uint64_t));
  for (const auto& [word, index] : launch.slots) values[word] = at[index];
}

// The fast path's guards for these launches, the driver left out: open, no pre-run hook on any
// kernel, the recorded current device.
bool guards_pass(Replay* self) {
  if (!fast_path_open()) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->kernels); ++i) {
    PyObject* hooks = PyObject_GetAttr(PyTuple_GET_ITEM(self->kernels, i), pre_run_name);
    const int none = hooks != nullptr ? !PyObject_IsTrue(hooks) : -1;
    Py_XDECREF(hooks);
    if (none != 1) {
      PyErr_Clear();
      return false;
    }
  }
  return call_global(device_name, nullptr, 0) == self->device_index;
}

PyObject* replay(PyObject* self_obj, PyObject* tensors) {
  auto* self = reinterpret_cast<Replay*>(self_obj);
  if (!guards_pass(self)) Py_RETURN_FALSE;
  CUcontext context = nullptr;
  if (!driver_found() || driver.context(&context) != CUDA_SUCCESS || context == nullptr) Py_RETURN_FALSE;
  const long long stream = call_global(stream_name, &self->device, 1);
  if (stream == -1) Py_RETURN_FALSE;
  Room<uint64_t> at_room, value_room;
  Room<void*> param_room;
  uint64_t* at = at_room.of(static_cast<size_t>(self->tensors));
  if (!addresses(self, tensors, at)) Py_RETURN_FALSE;
  for (const Launch& launch : *self->launches) {
    if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0) continue;  // as triton's launcher
    const size_t count = launch.words.size();
    uint64_t* values = value_room.of(count);
    void** params = param_room.of(count);
    fill(launch, at, values);
    for (size_t i = 0; i < count; ++i) params[i] = &values[i];
    CUlaunchAttribute attributes[2];
    unsigned attribute_count = 0;
    if (launch.pdl) {
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[attribute_count++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (launch.cooperative) {
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attributes[attribute_count++].value.cooperative = 1;
    }
    CUlaunchConfig config;
    std::memset(&config, 0, sizeof config);
    config.gridDimX = launch.grid[0];
    config.gridDimY = launch.grid[1];
    config.gridDimZ = launch.grid[2];
    config.blockDimX = launch.block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = launch.shared;
    config.hStream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
    config.attrs = attribute_count > 0 ? attributes : nullptr;
    config.numAttrs = attribute_count;
    const CUresult result = driver.launch(&config, launch.function, params, nullptr);
    if (result != CUDA_SUCCESS) {
      const char* text = nullptr;
      driver.error(result, &text);
      PyErr_Format(PyExc_RuntimeError, "Triton Error [CUDA]: %s", text != nullptr ? text : "unknown error");
      return nullptr;
    }
  }
  Py_RETURN_TRUE;
}

// replayer(device, kernels, launches) -> replay(tensors) -> bool. Each launch: (function, grid
// (3 ints), num_warps, shared, cooperative, pdl, words (bytes, 8 a parameter), slots (tuple of
// (word, tensor index))).
PyObject* make_replayer(PyObject* /*module*/, PyObject* args) {
  PyObject *device = nullptr, *kernels = nullptr, *launches = nullptr;
  if (!PyArg_ParseTuple(args, "O!O!O!", &PyLong_Type, &device, &PyTuple_Type, &kernels, &PyTuple_Type, &launches)) {
    return nullptr;
  }
  auto made = std::vector<Launch>();
  Py_ssize_t tensors = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(launches); ++i) {
    unsigned long long function = 0;
    unsigned grid_x = 0, grid_y = 0, grid_z = 0, warps = 0, shared = 0;
    int cooperative = 0, pdl = 0;
    PyObject *words = nullptr, *slots = nullptr;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(launches, i), "K(III)IIppO!O!", &function, &grid_x, &grid_y, &grid_z, &warps,
                          &shared, &cooperative, &pdl, &PyBytes_Type, &words, &PyTuple_Type, &slots)) {
      return nullptr;
    }
    Launch launch;
    launch.function = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(function));
    launch.grid[0] = grid_x;
    launch.grid[1] = grid_y;
    launch.grid[2] = grid_z;
    launch.block = 32 * warps;
    launch.shared = shared;
    launch.cooperative = cooperative != 0;
    launch.pdl = pdl != 0;
    const Py_ssize_t size = PyBytes_GET_SIZE(words);
    if (size % 8 != 0 || warps == 0) {
      PyErr_SetString(PyExc_ValueError, "replayer(): words must be 8 bytes a parameter, and num_warps positive");
      return nullptr;
    }
    launch.words.resize(static_cast<size_t>(size / 8));
    std::memcpy(launch.words.data(), PyBytes_AS_STRING(words), static_cast<size_t>(size));
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(slots); ++j) {
      Py_ssize_t word = 0, index = 0;
      if (!PyArg_ParseTuple(PyTuple_GET_ITEM(slots, j), "nn", &word, &index)) return nullptr;
      if (word < 0 || word >= size / 8 || index < 0) {
        PyErr_SetString(PyExc_ValueError, "replayer(): a slot names a word the launch does not have");
        return nullptr;
      }
      launch.slots.emplace_back(word, index);
      tensors = index + 1 > tensors ? index + 1 : tensors;
    }
    made.push_back(std::move(launch));
  }
  auto* self = PyObject_GC_New(Replay, &ReplayType);
  if (self == nullptr) return nullptr;
  self->kernels = Py_NewRef(kernels);
  self->device = Py_NewRef(device);
  self->device_index = PyLong_AsLongLong(device);
  self->tensors = tensors;
  self->launches = new (std::nothrow) std::vector<Launch>(std::move(made));
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  if (self->launches == nullptr) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  self->def = {"replay", replay, METH_O, "replay(tensors) -> bool: the recorded launches with these tensors (replay.cpp)"};
  PyObject* function = PyCFunction_NewEx(&self->def, reinterpret_cast<PyObject*>(self), nullptr);
  Py_DECREF(self);
  return function;
}

// The state of a replay made by replayer(), or nullptr with TypeError set.
Replay* state_of(PyObject* function) {
  PyObject* state = PyCFunction_Check(function) ? PyCFunction_GET_SELF(function) : nullptr;
  if (state == nullptr || Py_TYPE(state) != &ReplayType) {
    PyErr_SetString(PyExc_TypeError, "expected a replay made by replayer()");
    return nullptr;
  }
  return reinterpret_cast<Replay*>(state);
}

// guards_pass(replay) -> bool: whether its guards pass now, the driver left out (for tests).
PyObject* guards_pass_now(PyObject* /*module*/, PyObject* function) {
  Replay* self = state_of(function);
  if (self == nullptr) return nullptr;
  return PyBool_FromLong(guards_pass(self));
}

// parameters(replay, tensors) -> [bytes]: each launch's parameters as a replay with these tensors
// would pass them, launching nothing (for tests).
PyObject* parameters(PyObject* /*module*/, PyObject* args) {
  PyObject *function = nullptr, *tensors = nullptr;
  if (!PyArg_ParseTuple(args, "OO!", &function, &PyTuple_Type, &tensors)) return nullptr;
  Replay* self = state_of(function);
  if (self == nullptr) return nullptr;
  Room<uint64_t> at_room;
  uint64_t* at = at_room.of(static_cast<size_t>(self->tensors));
  if (!addresses(self, tensors, at)) {
    PyErr_SetString(PyExc_ValueError, "parameters(): the launches take more tensors than given, or a non-tensor");
    return nullptr;
  }
  PyObject* got = PyList_New(0);
  if (got == nullptr) return nullptr;
  std::vector<uint64_t> values;
  for (const Launch& launch : *self->launches) {
    values.resize(launch.words.size());
    fill(launch, at, values.data());
    PyObject* packed = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(values.data()),
                                                 static_cast<Py_ssize_t>(values.size() * 8));
    if (packed == nullptr || PyList_Append(got, packed) < 0) {
      Py_XDECREF(packed);
      Py_DECREF(got);
      return nullptr;
    }
    Py_DECREF(packed);
  }
  return got;
}

// guards(fastlaunch_globals, runtime_knobs, compilation_knobs, HookChain): what replays check.
PyObject* guards(PyObject* /*module*/, PyObject* args) {
  PyObject *globals = nullptr, *runtime = nullptr, *compilation = nullptr, *hook_chain = nullptr;
  if (!PyArg_ParseTuple(args, "O!OOO!", &PyDict_Type, &globals, &runtime, &compilation, &PyType_Type, &hook_chain)) {
    return nullptr;
  }
  Py_XSETREF(guards_of.globals, Py_NewRef(globals));
  Py_XSETREF(guards_of.runtime, Py_NewRef(runtime));
  Py_XSETREF(guards_of.compilation, Py_NewRef(compilation));
  Py_XSETREF(guards_of.hook_chain, Py_NewRef(hook_chain));
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"replayer", make_replayer, METH_VARARGS,
     "replayer(device, kernels, launches) -> replay(tensors) -> bool: recorded launches made again (replay.cpp)"},
    {"parameters", parameters, METH_VARARGS, "parameters(replay, tensors) -> [bytes]: what each launch would pass"},
    {"guards_pass", guards_pass_now, METH_O, "guards_pass(replay) -> bool: its guards now, the driver left out"},
    {"guards", guards, METH_VARARGS, "guards(fastlaunch_globals, runtime_knobs, compilation_knobs, HookChain)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay", "recorded launches made again, in C++", -1, methods};

PyObject* interned(const char* text) { return PyUnicode_InternFromString(text); }

}  // namespace

PyMODINIT_FUNC PyInit__replay(void) {
  ReplayType.tp_basicsize = sizeof(Replay);
  ReplayType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  ReplayType.tp_doc = "the launches of one native replay (replay.cpp)";
  ReplayType.tp_dealloc = dealloc;
  ReplayType.tp_traverse = traverse;
  ReplayType.tp_clear = clear;
  if (PyType_Ready(&ReplayType) < 0) return nullptr;
  enabled_name = interned("_enabled");
  device_name = interned("_current_device");
  stream_name = interned("_current_stream");
  enter_name = interned("launch_enter_hook");
  exit_name = interned("launch_exit_hook");
  debug_name = interned("debug");
  instrumentation_name = interned("instrumentation_mode");
  calls_name = interned("calls");
  pre_run_name = interned("pre_run_hooks");
  if (pre_run_name == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", TKREG_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
