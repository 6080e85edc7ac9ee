"""Stand-in for pydantic, enough for KernelBench's `KernelExecResult` (bench/kernelbench_identity.py
puts this folder at the end of sys.path: an installed pydantic wins)."""
import copy


class BaseModel:
    def __init__(self, **values):
        for klass in reversed(type(self).__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if hasattr(klass, name):
                    setattr(self, name, copy.deepcopy(getattr(klass, name)))
        for name, value in values.items():
            setattr(self, name, value)

    def model_dump(self) -> dict:
        return dict(vars(self))

    dict = model_dump
