"""KernelZero: teach a language model to write fast, correct GPU kernels."""
__version__ = "0.1.0"
