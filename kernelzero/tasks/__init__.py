from kernelzero.tasks.task import (Candidate, Task, detect_backend, find_samples, load_tasks,
                                   source_hash)

__all__ = ["Candidate", "Task", "detect_backend", "find_samples", "load_tasks", "source_hash"]
