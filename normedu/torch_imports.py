"""The parts of torch that torch imports only at their first use, for processes that fork.

A warm process (the book's and the grader's zygotes, ``run_ranks``'s forkserver) imports torch
once so that each process forked from it starts in milliseconds. torch leaves two parts of
itself to be imported later, the first time they are needed; a fork that reaches them imports
them again, a second or two of CPU per process:

- :data:`AUTOGRAD`: ``symbolic_shapes`` (and sympy), at the first call of a
  ``torch.autograd.Function``;
- :data:`DYNAMO`: ``torch._dynamo`` (about 320 modules), at the first optimizer step, the first
  ``DistributedDataParallel`` and the first ``torch.compile``.

A warm process imports those its forks will reach. Importing them starts no thread, so forking
afterwards stays safe. This module imports nothing itself: it only names them.
"""

AUTOGRAD = "torch.fx.experimental.symbolic_shapes"
DYNAMO = "torch._dynamo"
#: Both, for a process whose forks train models (they reach both).
FIRST_USE = (DYNAMO, AUTOGRAD)
