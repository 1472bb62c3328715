"""The registry core: the specs plugins register (Op, Kernel, Scheduler, Requirements), the
hooks and the loading of plugins, the registry with its reasons, and the device questions lookup
asks (capability, platform). It imports no other part of tkreg, and neither torch nor triton."""
