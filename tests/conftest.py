import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "kernelzero" / "examples"
sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True, scope="session")
def _verdict_key_of_the_suite(tmp_path_factory):
    """The suite tags records with a key of its own (kernelzero.integrity), not the user's, and
    the commands it runs in subprocesses inherit it."""
    if "KZ_VERDICT_KEY_FILE" not in os.environ:
        os.environ["KZ_VERDICT_KEY_FILE"] = str(tmp_path_factory.mktemp("key") / "verdict.key")
    yield


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device: scripts/test.sh -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES
