"""GPU kernels graded without a GPU: the Triton sources of Liger-Kernel and of this project, run
by Triton's interpreter (``TRITON_INTERPRET=1``), and JAX Pallas's layer norm with
``interpret=True``, on the CPU, graded by :mod:`lneps.testing`.

* :mod:`.interpreter_shims`: the few patches the interpreter needs to run the kernels'
  unmodified sources, each with why it exists;
* :mod:`.triton_two_pass`: this project's own Triton layer norm, in the two-pass design of
  Triton's tutorial;
* :mod:`.gpu_runs`: the kernels as functions of NumPy arrays, the grid, and one case graded;
* :mod:`.gpu_results`: the stored grades (``src/lneps/book/data/gpu_kernels/``), read without
  torch, Triton or JAX: what the chapter and its tests use.

Only :mod:`.gpu_results` is imported here: the others need the ``gpu`` extra
(``requirements-gpu.txt``).
"""
