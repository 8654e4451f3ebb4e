"""Stands where torch would be found, for tests of what memlake says when
PyTorch is missing on a machine that has it."""
raise ModuleNotFoundError("No module named 'torch'", name="torch")
