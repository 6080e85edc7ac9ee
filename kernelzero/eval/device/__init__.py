"""The device shared between judgements: how much memory each needs, who may hold it, and who
may use the GPU when.

- footprint.py: a task's memory figures, measured under FakeTensorMode before any allocation;
- memory_plan.py: what each part of a judgement is admitted for, from those figures;
- memory_gate.py: `MemoryGate`, admission of judgements and reference runs into the budget;
- reserve.py: device memory a worker takes from the driver before it may use the GPU;
- gpu_lock.py: `GpuLock`, shared for running modules, exclusive for timing them.
"""
