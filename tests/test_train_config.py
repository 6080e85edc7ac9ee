"""Training config: paper defaults, presets load, mistakes are named."""
import pytest

from kernelzero.train.config import TrainConfig, from_dict, load_config, preset_names


def test_paper_defaults():
    cfg = TrainConfig()
    assert (cfg.coder.alpha, cfg.coder.beta, cfg.proposer.rho) == (0.5, 0.1, -1.0)
    assert (cfg.rounds, cfg.proposer_steps, cfg.coder_steps) == (4, 20, 20)
    assert cfg.coder.speed_transform == "clip" and cfg.eval["tolerance"] == "paper"


def test_presets_load():
    assert {"tiny-cpu", "single-h200"} <= set(preset_names())
    tiny = load_config("tiny-cpu")
    assert tiny.device == "cpu" and tiny.coder.group_size == 4
    assert load_config("single-h200").eval_config().device == "cuda"


@pytest.mark.parametrize("data, match", [
    ({"coder": {"alpah": 0.5}}, "coder.alpah"),
    ({"rounds": 0}, "rounds"),
    ({"coder": {"alpha": 1.5}}, "alpha"),
    ({"coder": {"speed_transform": "cube"}}, "speed_transform"),
    ({"coder": {"group_size": 1}}, "group_size"),
    ({"proposer": {"band": [0.6, 0.4]}}, "band"),
    ({"heldout": {"samples": 2, "ks": [1, 4]}}, "k"),
    ({"eval": {"device": "tpu"}}, "device"),
    ({"eval": {"no_such_knob": 1}}, "eval section"),
    ({"reward": {"pool": "foo"}}, "reward.pool"),
    ({"reward": {"ray_address": "auto"}}, "needs reward.pool: ray"),
    ({"reward": {"url": "127.0.0.1:8000"}}, "http://"),
    ({"reward": {"url": "http://h:8000", "pool": "ray"}}, "reward.url"),
    ({"reward": {"uri": "http://h:8000"}}, "reward.uri"),
])
def test_mistakes_are_named(data, match):
    with pytest.raises(ValueError, match=match):
        from_dict(data)


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

    cfg = load_config("tiny-cpu")
    loop = Loop(cfg, tmp_path)
    loop.state.save(tmp_path / "state.json")
    with pytest.raises(RunExists, match="--resume"):
        Loop(cfg, tmp_path)
    with pytest.raises(RunExists, match="seed"):
        Loop(load_config("tiny-cpu", {"seed": 3}), tmp_path, resume=True)
    assert Loop(load_config("tiny-cpu", {"rounds": 3}), tmp_path, resume=True).resumed  # more rounds: fine
    moved = load_config("tiny-cpu", {"reward": {"url": "http://10.0.0.5:8000"}})
    assert Loop(moved, tmp_path, resume=True).resumed  # judged elsewhere now: fine


def test_held_out_tasks_are_not_trained_on(tmp_path):
    from kernelzero.train.loop import Loop

    loop = Loop(load_config("tiny-cpu"), tmp_path)
    train = {t.hash for t in loop._seed_tasks()}
    held = {t.hash for t in loop._heldout_tasks()}
    assert train and held and not train & held
