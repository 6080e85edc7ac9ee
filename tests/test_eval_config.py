"""EvalConfig and its RuntimeConfig: a `runtime` mapping (a config file's section) is converted,
a key it does not know is named with the allowed ones, and the settings derived from both read
the runtime knobs."""
import pytest

from kernelzero.eval import EvalConfig, RuntimeConfig


def test_a_runtime_mapping_becomes_a_runtime_config():
    cfg = EvalConfig(runtime={"spares": 4, "transfer": "host"})
    assert cfg.runtime == RuntimeConfig(spares=4, transfer="host")
    assert EvalConfig().runtime == RuntimeConfig()
    assert EvalConfig().runtime is not EvalConfig().runtime  # each config its own


def test_an_unknown_runtime_key_is_named_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"EvalConfig.runtime: unknown key 'spare'; allowed: .*spares"):
        EvalConfig(runtime={"spare": 4})
    with pytest.raises(ValueError, match="EvalConfig.runtime=3"):
        EvalConfig(runtime=3)
    with pytest.raises(ValueError, match=r"RuntimeConfig.transfer='nvlink': choose one of"):
        EvalConfig(runtime={"transfer": "nvlink"})


def test_derived_settings_read_the_runtime_knobs():
    cpu, gpu = EvalConfig(max_workers=2), EvalConfig(device="cuda", max_workers=2)
    assert (cpu.spare_pool_size, gpu.spare_pool_size) == (3, 6)
    assert (cpu.worker_start, gpu.worker_start) == ("fork", "spawn")
    assert (cpu.transfer_mode, gpu.transfer_mode) == ("host", "ipc")
    set_ = EvalConfig(device="cuda", runtime=RuntimeConfig(spares=1, start_method="fork",
                                                           transfer="host"))
    assert (set_.spare_pool_size, set_.worker_start, set_.transfer_mode) == (1, "fork", "host")


def test_spares_on_a_card_keep_to_a_third_of_its_memory():
    # A trainer asks for a spare per candidate and task of a step (72): on an 80 GB card their
    # CUDA contexts would leave the judgements no memory budget.
    cfg = EvalConfig(device="cuda", max_workers=14, runtime=RuntimeConfig(spares=72))
    assert cfg.spares_on(80 * 2**30) == 26   # 80 GiB / 3 / 1 GiB
    assert cfg.spares_on(141 * 2**30) == 47
    assert cfg.spares_on(None) == 72         # the card's memory unknown: as asked
    assert EvalConfig(device="cuda", max_workers=4).spares_on(80 * 2**30) == 10  # under the cap
    assert EvalConfig(max_workers=4, runtime=RuntimeConfig(spares=72)).spares_on(2**30) == 72  # CPU


def test_runtime_knobs_are_not_judging_settings():
    """Two judges that differ only in throughput machinery give the same verdicts."""
    fast = EvalConfig(runtime=RuntimeConfig(spares=30, ipc_arena=False))
    assert fast.judging_settings() == EvalConfig().judging_settings()
    assert "runtime" not in EvalConfig.JUDGING_FIELDS
