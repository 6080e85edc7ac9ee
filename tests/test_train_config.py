"""Training config: paper defaults, presets load, mistakes are named."""
import pytest

from kernelzero.train.config import TrainConfig
from kernelzero.train.config_file import from_dict, load_config, preset_names


def test_paper_defaults():
    cfg = TrainConfig()
    assert (cfg.coder.alpha, cfg.coder.beta, cfg.proposer.rho) == (0.5, 0.1, -1.0)
    assert (cfg.rounds, cfg.proposer_steps, cfg.coder_steps) == (4, 20, 20)
    assert cfg.coder.speed_transform == "clip" and cfg.eval["tolerance"] == "paper"


def test_presets_load():
    assert {"tiny-cpu", "plumbing-cpu", "single-h200"} <= set(preset_names())
    tiny = load_config("tiny-cpu")
    assert tiny.device == "cpu" and tiny.coder.group_size == 8 and tiny.coder.updates_per_rollout == 2
    assert load_config("single-h200").eval_config().device == "cuda"


@pytest.mark.parametrize("preset", ["plumbing-cpu", "single-h200"])
def test_presets_leave_seed_tasks_to_train_on(preset):
    """The held-out set comes from the same example tasks as the seed tasks: a preset that held
    out all of them would start its first Coder phase with nothing to train on (the proposer's
    pool is empty then). Checked for the CPU preset and the device one alike."""
    from kernelzero.tasks import load_tasks
    from kernelzero.train.loop import EXAMPLE_TASKS

    cfg = load_config(preset)
    assert cfg.seed_tasks is None and cfg.heldout.tasks is None
    assert 1 <= cfg.heldout.limit < len(load_tasks(EXAMPLE_TASKS))


@pytest.mark.parametrize("data, match", [
    ({"coder": {"alpah": 0.5}}, "coder.alpah"),
    ({"rounds": -1}, "rounds"),
    ({"coder": {"alpha": 1.5}}, "alpha"),
    ({"coder": {"speed_transform": "cube"}}, "speed_transform"),
    ({"coder": {"group_size": 1}}, "group_size"),
    ({"proposer": {"band": [0.6, 0.4]}}, "band"),
    ({"heldout": {"samples": 2, "ks": [1, 4]}}, "k"),
    ({"eval": {"device": "tpu"}}, "device"),
    ({"eval": {"no_such_knob": 1}}, "eval section"),
    ({"eval": {"runtime": {"spare": 4}}}, r"EvalConfig.runtime: unknown key 'spare'; allowed: "),
    ({"eval": {"spares": 4, "transfer": "host"}}, r"spares, transfer belong under eval.runtime"),
    ({"reward": {"pool": "foo"}}, "reward.pool"),
    ({"reward": {"ray_address": "auto"}}, "needs reward.pool: ray"),
    ({"reward": {"url": "127.0.0.1:8000"}}, "http://"),
    ({"reward": {"url": "http://h:8000", "pool": "ray"}}, "reward.url"),
    ({"reward": {"uri": "http://h:8000"}}, "reward.uri"),
])
def test_mistakes_are_named(data, match):
    with pytest.raises(ValueError, match=match):
        from_dict(data)


@pytest.mark.parametrize("data, match", [
    ({"seed": "abc"}, r"seed='abc': expected a whole number"),
    ({"coder": {"group_size": 4.5}}, r"coder.group_size=4.5: expected a whole number"),
    ({"use_vllm": "no"}, r"use_vllm='no': expected true or false"),
    ({"rounds": True}, r"rounds=True: expected a whole number"),
    ({"coder": {"beta": "0.1"}}, r"coder.beta='0.1': expected a number"),
    ({"torch_threads": 2.5}, r"torch_threads=2.5: expected a whole number or null"),
    ({"tiny_size": [128, "x"]}, r"tiny_size=\[128, 'x'\]: expected a list of 2"),
    ({"proposer": {"band": 0.5}}, r"proposer.band=0.5: expected a list"),
    ({"cold_start": {"time_budget_s": "fast"}}, r"cold_start.time_budget_s='fast'"),
    ({"coder": 3}, r"coder: expected a section"),
    ({"eval": {"seed": "abc"}}, r"eval.seed='abc': expected a whole number or null"),
    ({"eval": {"device": "tpu"}}, r"eval.device='tpu': expected one of 'cpu', 'cuda'"),
    ({"eval": {"runtime": {"spares": "many"}}},
     r"eval.runtime.spares='many': expected a whole number or null"),
    ({"eval": {"runtime": {"prestart": "no"}}}, r"eval.runtime.prestart='no': expected true or false"),
    ({"eval": {"runtime": 4}}, r"eval.runtime=4: expected a section"),
])
def test_wrong_types_are_named_with_what_to_write(data, match):
    """YAML that parses but means something else (a string for a flag is true) never runs."""
    with pytest.raises(ValueError, match=match):
        from_dict(data)


def test_scientific_notation_is_a_number_where_one_is_wanted():
    """`1e-5` is a string to PyYAML (YAML 1.1 wants `1.0e-5`); train --set's own help writes it."""
    from kernelzero.train.config_file import parse_overrides
    cfg = load_config("tiny-cpu", parse_overrides(["coder.learning_rate=1e-5"]))
    assert cfg.coder.learning_rate == 1e-5
    with pytest.raises(ValueError, match="name="):
        from_dict({"name": 5})
    runtime = load_config("tiny-cpu", parse_overrides(["eval.runtime.load_reserve_factor=1e1"]))
    assert runtime.eval_config().runtime.load_reserve_factor == 10.0
    with pytest.raises(ValueError, match="seed='1e3'"):
        from_dict({"seed": "1e3"})  # an int field is not converted


def test_right_types_pass_and_an_int_is_a_float():
    cfg = from_dict({"seed": 3, "coder": {"beta": 1, "group_size": 4}, "torch_threads": None,
                     "cold_start": {"time_budget_s": 30}, "proposer": {"band": [0.2, 0.8]}})
    assert (cfg.seed, cfg.coder.beta, cfg.cold_start.time_budget_s) == (3, 1, 30)


def test_reward_section_overrides_merge_and_the_token_stays_out_of_the_run_copy(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nreward: {url: 'http://h:1', token: s3cret}\n")
    cfg = load_config(path, {"reward": {"url": "http://h:2"}})  # as `--reward-url` overrides it
    assert (cfg.reward.url, cfg.reward.token, cfg.reward.where) == ("http://h:2", "s3cret", "service")
    assert cfg.to_dict()["reward"] == {"pool": "local", "ray_address": None, "url": "http://h:2",
                                       "token": None}
    assert load_config("tiny-cpu").reward.where == "local"


def test_unknown_preset(tmp_path):
    with pytest.raises(FileNotFoundError, match="tiny-cpu"):
        load_config("no-such-preset")


def test_loop_refuses_to_overwrite_or_resume_with_another_config(tmp_path):
    from kernelzero.train.loop import Loop, RunExists

    cfg = load_config("plumbing-cpu")
    loop = Loop(cfg, tmp_path)
    loop.state.save(tmp_path / "state.json")
    with pytest.raises(RunExists, match="--resume"):
        Loop(cfg, tmp_path)
    with pytest.raises(RunExists, match="seed"):
        Loop(load_config("plumbing-cpu", {"seed": 3}), tmp_path, resume=True)
    assert Loop(load_config("plumbing-cpu", {"rounds": 3}), tmp_path, resume=True).resumed  # more rounds: fine
    moved = load_config("plumbing-cpu", {"reward": {"url": "http://10.0.0.5:8000"}})
    assert Loop(moved, tmp_path, resume=True).resumed  # judged elsewhere now: fine


@pytest.mark.parametrize("preset", ["plumbing-cpu", "tiny-cpu"])
def test_held_out_tasks_are_not_trained_on(tmp_path, preset):
    """Example tasks (plumbing-cpu) or the op family's training modules (tiny-cpu): never one the
    held-out sets measure."""
    from kernelzero.train.heldout import heldout_sets
    from kernelzero.train.loop import EXAMPLE_TASKS, Loop

    loop = Loop(load_config(preset), tmp_path)
    train = {t.hash for t in loop._seed_tasks()}
    held = {t.hash for ts in heldout_sets(loop.cfg, EXAMPLE_TASKS).values() for t in ts}
    assert train and held and not train & held


def test_a_step_always_has_its_prompts():
    """Fewer tasks than prompts per step: rows repeat, so TRL finds a full batch (it ended the
    phase at step 0 otherwise)."""
    from kernelzero.train.ca_grpo import fill_batch

    rows = [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]
    assert fill_batch(rows, 4) == rows + rows[:1]
    assert fill_batch(rows, 2) == rows and fill_batch([], 4) == []


def test_on_cuda_the_spare_pool_covers_a_coder_step_unless_set():
    """8 x 4 candidates over 4 tasks: 36 workers started ahead; an explicit `runtime.spares`
    wins; CPU judging keeps the evaluator's own small default."""
    assert load_config("single-h200").eval_config().runtime.spares == 36
    five = load_config("single-h200", {"eval": {"runtime": {"spares": 5}}})
    assert five.eval_config().runtime.spares == 5
    assert load_config("single-h200", {"eval": {"device": "cpu"}}).eval_config().runtime.spares is None
    assert load_config("tiny-cpu").eval_config().runtime.spares is None


def test_each_phase_prints_one_line_of_its_figures():
    from kernelzero.train.round_report import phase_line as _phase_line

    coder = _phase_line({"phase": "coder", "tasks": 48, "pool_tasks": 3, "correct_rate": 0.3125,
                         "gate_open_rate": 0.25, "mixed_group_rate": None})
    assert coder == ("  coder: 48 tasks (3 from the pool), kernels correct 31%, speed gate open 25%, "
                     "groups with a reward spread n/a")
    prop = _phase_line({"phase": "proposer", "modules": 4, "valid": 1, "in_band": 1,
                        "rejections": {"no module in the completion": 2, "too slow": 1}})
    assert prop == ("  proposer: 1/4 modules valid, 1 in the band; refused: no module in the "
                    "completion 2, too slow 1")


def test_activation_checkpointing_is_switched_under_the_name_transformers_reads():
    """Off for the small models (it halves their steps per second), and set without the
    deprecation warning newer transformers gives for the old name."""
    import warnings

    from trl import GRPOConfig, SFTConfig

    from kernelzero.train.sft import checkpointing

    for cls in (SFTConfig, GRPOConfig):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            args = cls(output_dir="/tmp/kz-ckpt-test", use_cpu=True, report_to=[],
                       **checkpointing(cls, False))
        assert args.gradient_checkpointing is False


def test_set_overrides_nest_and_malformed_ones_are_usage_errors():
    from kernelzero.cli import main
    from kernelzero.train.config_file import parse_overrides

    assert parse_overrides(["coder.beta=0.2", "coder.alpha=0.4", "rounds=1"]) == \
        {"coder": {"beta": 0.2, "alpha": 0.4}, "rounds": 1}
    with pytest.raises(ValueError, match="write KEY=VALUE"):
        parse_overrides(["rounds"])
    with pytest.raises(ValueError, match="'rounds' is not a section"):
        parse_overrides(["rounds=1", "rounds.x=2"])
    assert main(["train", "--config", "tiny-cpu", "--set", "rounds"]) == 2


def test_seed_tasks_join_family_draws_of_other_chain_lengths(tmp_path):
    """`family:N:ops=A-B` items joined by commas: each draws its own modules with its chain
    lengths (the first item's draw is the plain `family:N` one), none held out; bad items are
    named with what to write."""
    from kernelzero.train.loop import Loop

    def tasks(spec):
        loop = Loop(load_config("tiny-cpu", {"seed_tasks": spec}), tmp_path / spec.replace(":", "_"))
        return loop._seed_tasks()

    mixed = tasks("family:12:ops=4-4,family:10:ops=1-2")
    first, second = mixed[:12], mixed[12:]
    assert len(mixed) == 22
    assert [t.hash for t in first] == [t.hash for t in tasks("family:12")]  # tiny-cpu draws 4-op chains
    assert all(t.meta["chain_length"] == 4 for t in first)
    assert all(1 <= t.meta["chain_length"] <= 2 for t in second)
    assert len({t.name for t in mixed}) == 22
    for bad in ("family:x", "family:3:ops=3-1", "family:3:width=2", "family:3,some/dir"):
        with pytest.raises(ValueError, match="seed_tasks"):
            load_config("tiny-cpu", {"seed_tasks": bad})
