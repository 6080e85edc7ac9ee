"""The op family: PyTorch modules a teacher compiles exactly and a small Coder can learn.

    from kernelzero.family import FamilyConfig, generate, split_holdout
    modules = generate(FamilyConfig(), n=1000, seed=0)

Modules: ops (the ops and their phrasings), shapes (CPU- and GPU-sized inputs), config
(FamilyConfig, FamilyModule), writer (one module being written), kinds (what each kind writes),
generator (generate, make_module), splits (held-out sets by text and by op combination).
"""
from kernelzero.family.generator import FamilyConfig, FamilyModule, generate, make_module
from kernelzero.family.splits import combo_key, split_holdout

__all__ = ["FamilyConfig", "FamilyModule", "combo_key", "generate", "make_module", "split_holdout"]
