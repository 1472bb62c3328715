"""Faulty ``add`` kernels for tkreg's fault-isolation tests (a test fixture, not installed by default)."""
