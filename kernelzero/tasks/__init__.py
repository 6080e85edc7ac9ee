from kernelzero.tasks.task import (Candidate, Task, canonical_source, detect_backend, find_samples,
                                   load_tasks, source_hash)

__all__ = ["Candidate", "Task", "canonical_source", "detect_backend", "find_samples", "load_tasks", "source_hash"]
