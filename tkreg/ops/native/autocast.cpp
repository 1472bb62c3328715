// tkreg.ops.<op> under torch.autocast, in C++: the casts the op declares (Op.autocast, see
// tkreg/ops/autocasting.py), then the planned call of the cast inputs with autocast off.
//
// In Python a call under autocast takes the checked path: the policy, a .to() per input, and
// autocast's flags set and put back cost an H200 host 5-20 us a call (2026-11-29), more than the
// launch of a small kernel. Here the casts are torch's own at::autocast::cached_cast, so a
// float32 weight (a leaf that wants a gradient) is cast once per autocast region and its copy
// reused, as torch's own autocast kernels do; the flags are thread-local words.
#include "native.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/python_variable.h>

// One read of the thread's dispatch key set, as at::autocast::is_autocast_enabled reads it per
// device type (autocast is on where its key is not excluded): two calls of that cost a CPU host
// about 30 ns a call.
bool tkreg_autocast_on() {
  const c10::DispatchKeySet excluded = c10::impl::tls_local_dispatch_key_set().excluded_;
  return !excluded.has(at::autocast::get_autocast_dispatch_key_from_device_type(at::kCUDA)) ||
         !excluded.has(at::autocast::get_autocast_dispatch_key_from_device_type(at::kCPU));
}

TkregAutocastOff::TkregAutocastOff()
    : cuda(at::autocast::is_autocast_enabled(at::kCUDA)), cpu(at::autocast::is_autocast_enabled(at::kCPU)) {
  if (cuda) at::autocast::set_autocast_enabled(at::kCUDA, false);
  if (cpu) at::autocast::set_autocast_enabled(at::kCPU, false);
}

TkregAutocastOff::~TkregAutocastOff() {
  if (cuda) at::autocast::set_autocast_enabled(at::kCUDA, true);
  if (cpu) at::autocast::set_autocast_enabled(at::kCPU, true);
}

TkregOwned::~TkregOwned() {
  for (PyObject* item : items) Py_XDECREF(item);
}

bool tkreg_autocast_inputs(const int policies[2], PyObject* const* args, Py_ssize_t nargs, std::vector<PyObject*>& into) {
  // The first input is never optional: None there is the checked path's error to give.
  if (nargs == 0 || args[0] == Py_None) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    // a subclass keeps its own code: the checked path; None (an absent optional input) stays None
    if (args[i] != Py_None && !tkreg_is_plain(args[i])) return false;
  }
  try {
    // The first input's device type is the call's, as autocasting.policy_for takes it.
    const c10::DeviceType device_type = THPVariable_Unpack(args[0]).device().type();
    int policy;
    if (device_type == at::kCUDA) {
      policy = policies[0];
    } else if (device_type == at::kCPU) {
      policy = policies[1];
    } else {
      return false;  // another device type: the checked path asks torch
    }
    const bool autocast_here = at::autocast::is_autocast_enabled(device_type);
    if (autocast_here && policy == TKREG_AUTOCAST_UNDECLARED) return false;  // the peer's own call: the checked path says so
    at::ScalarType target = at::kFloat;
    const bool casts = autocast_here && (policy == TKREG_AUTOCAST_LOWER || policy == TKREG_AUTOCAST_FLOAT32);
    if (casts && policy == TKREG_AUTOCAST_LOWER) target = at::autocast::get_autocast_dtype(device_type);
    into.reserve(into.size() + nargs);
    for (Py_ssize_t i = 0; i < nargs; ++i) {
      if (args[i] == Py_None) {
        into.push_back(Py_NewRef(Py_None));
        continue;
      }
      const at::Tensor& given = THPVariable_Unpack(args[i]);
      // cached_cast casts a floating tensor of the region's device type, float64 excepted, and
      // hands back the one given otherwise (torch's autocast kernels call it the same way)
      at::Tensor cast = casts ? at::autocast::cached_cast(target, given, device_type) : given;
      PyObject* item = cast.unsafeGetTensorImpl() == given.unsafeGetTensorImpl() ? Py_NewRef(args[i])
                                                                                 : THPVariable_Wrap(std::move(cast));
      if (item == nullptr) {
        PyErr_Clear();
        return false;
      }
      into.push_back(item);
    }
  } catch (...) {
    // A cast that failed (out of memory): the checked path makes it again and raises torch's error.
    PyErr_Clear();
    return false;
  }
  return true;
}
