"""Transport: a worker's outputs moved to the judge without the judge trusting the worker.

- tensorio.py: tensors as raw bytes in a file of the worker's private directory (shared memory
  where there is /dev/shm) plus a JSON description checked field by field; no pickle;
- cuda_ipc.py: CUDA outputs shared through CUDA IPC and copied at once into the judge's memory.

Both sides use these modules: the worker encodes, the judge decodes and checks.
"""
