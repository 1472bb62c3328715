"""``pytest --tkreg``: the pytest plugin, which items a registry generates, the runner processes
that execute them (pool, jobs), correctness checks, compile checks and benchmark timing."""
