"""Planning and running ``prepare``: config, work units, executors (local, Ray), workers, tokenizing,
assembling, reports."""
