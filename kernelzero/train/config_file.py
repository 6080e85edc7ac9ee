"""A training run's config from a file: a preset name (`tiny-cpu`) or a YAML path, merged with
command-line overrides, every key and every value's type checked against the config's
dataclasses (kernelzero.train.config) before anything runs.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

import yaml

from kernelzero.train.config import (CAGRPOConfig, HeldOutConfig, ProposerConfig, RewardConfig,
                                     TrainConfig)

PRESET_DIR = Path(__file__).parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(spec: str | Path, overrides: dict | None = None) -> TrainConfig:
    """A TrainConfig from a preset name (`tiny-cpu`) or a YAML file path; unknown keys are errors."""
    path = Path(spec)
    if not path.suffix and (PRESET_DIR / f"{spec}.yaml").exists():
        path = PRESET_DIR / f"{spec}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no config file or preset {spec!r} (presets: {', '.join(preset_names())})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    merge_overrides(data, overrides or {})
    return from_dict(data)


def parse_overrides(items: list[str], flag: str = "--set", example: str = "cold_start.data=data.jsonl") -> dict:
    """`KEY=VALUE` strings (`--set coder.learning_rate=1e-5`; VALUE read as YAML) as the nested
    overrides `load_config` and `merge_overrides` take. A malformed item raises ValueError, naming
    `flag` and `example` (the option it came from)."""
    overrides: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: write KEY=VALUE, e.g. {flag} {example}")
        tree, path = overrides, key.strip().split(".")
        for part in path[:-1]:
            tree = tree.setdefault(part, {})
            if not isinstance(tree, dict):
                raise ValueError(f"{flag}: {part!r} is not a section")
        tree[path[-1]] = yaml.safe_load(value)
    return overrides


def merge_overrides(data: dict, overrides: dict) -> None:
    """Overrides into the file's data, section by section: `--reward-url` sets reward.url and
    `--set cold_start.sft.max_steps=9` one key, keeping the file's other keys there."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            merge_overrides(data[key], value)
        else:
            data[key] = value


def from_dict(data: dict) -> TrainConfig:
    """Build a TrainConfig, naming unknown keys (a typo should not silently fall back to a default)."""
    from kernelzero.train.cold_start import ColdStartConfig

    sections = {"coder": CAGRPOConfig, "proposer": ProposerConfig, "heldout": HeldOutConfig,
                "reward": RewardConfig, "cold_start": ColdStartConfig}
    top = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = [k for k in data if k not in top]
    for name, cls in sections.items():
        if data.get(name) is not None and not isinstance(data[name], dict):
            raise ValueError(f"{name}: expected a section (a mapping of keys), got {data[name]!r}")
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown += [f"{name}.{k}" for k in (data.get(name) or {}) if k not in allowed]
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(unknown)}")
    _check_types(TrainConfig, {k: v for k, v in data.items() if k not in sections}, "")
    for name, cls in sections.items():
        _check_types(cls, data.get(name) or {}, f"{name}.")
    if isinstance(data.get("eval"), dict):
        _check_eval_types(data["eval"])
    kw = dict(data)
    for name, cls in sections.items():
        if name in kw:
            kw[name] = cls(**(kw[name] or {}))
    return TrainConfig(**kw)


_KIND = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
         dict: "a mapping", list: "a list", tuple: "a list"}


_SCIENTIFIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _check_eval_types(section: dict) -> None:
    """The `eval` section against EvalConfig's fields, its `runtime` section included (`max_workers:
    auto` is TrainConfig.eval_kwargs's to resolve). EvalConfig names the keys it does not know."""
    from kernelzero.eval import EvalConfig

    checked = {k: v for k, v in section.items() if not (k == "max_workers" and v == "auto")}
    _check_types(EvalConfig, checked, "eval.")
    section.update(checked)


def _check_types(cls, data: dict, where: str) -> None:
    """Each value of a config section against its field's type: YAML gives `4.5` for an int
    field, `"abc"` for a seed or `"no"` (a string, so true) for a flag, and none of these should
    run. An int passes where a float is wanted. One conversion: YAML 1.1 (PyYAML) reads `1e-5`,
    with no decimal point, as a string; where a number is wanted it is the number it spells.
    A section given for a dataclass field is checked against that class in turn; keys the class
    lacks are left to the caller or the class to name."""
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        if key not in hints:
            continue
        if isinstance(value, str) and _SCIENTIFIC.match(value) and _fits(0.5, hints[key]):
            data[key] = value = float(value)
        if not _fits(value, hints[key]):
            raise ValueError(f"{where}{key}={value!r}: expected {_describe(hints[key])}")
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            _check_types(hints[key], value, f"{where}{key}.")


def _fits(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args))
    base = origin or hint
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if dataclasses.is_dataclass(base):
        return isinstance(value, (dict, base))
    return isinstance(value, base)


def _describe(hint) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if dataclasses.is_dataclass(hint):
        return "a section (a mapping of keys)"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if typing.get_origin(hint) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list (each {_describe(args[0])})"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    return _KIND.get(typing.get_origin(hint) or hint, getattr(hint, "__name__", str(hint)))
