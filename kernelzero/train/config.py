"""Training configuration: every knob of distillation, CA-GRPO, the Proposer update and the loop,
documented once here, validated whole when built.

Covers the dataclasses; loading them from a preset under `kernelzero/train/presets/` (`tiny-cpu`,
`single-h200`) or a YAML file is kernelzero/train/config_file.py. Does not cover the evaluator's own knobs (`kernelzero.eval.EvalConfig`; the `eval`
section of a YAML file is passed to it verbatim), how a judging pool is built from the `reward`
section (kernelzero/train/judging.py), nor how a multi-GPU job is launched (that is
`accelerate launch --config_file kernelzero/train/accelerate/*.yaml`, see docs/training.md).

Defaults are the paper's where it states them (alpha = 0.5, beta = 0.1, rounds R = 4, N_P = N_C
= 20, rho = -1, atol = rtol = 1e-2, 2- or 3-operator API sets). Where the paper is silent we say
so: the learning rate (1e-6) is TRL's GRPO default, the loss type is `grpo` (the paper builds on
"standard GRPO"), the group size (8) and s_max (10) are ours.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kernelzero.train.rewards import SPEED_TRANSFORMS

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo")  # TRL 1.16 names we allow


@dataclass
class CAGRPOConfig:
    """The Coder's CA-GRPO update.

    alpha: gate threshold; the speed term is added only when a group's correct rate >= alpha.
    beta: weight of the speed score in r_i = c_i * (1 + T(G) * beta * S_i).
    s_max: cap of the speed score (speedups above it score s_max).
    speed_transform: `clip` (speedup clipped to [0, s_max], the paper's), `log` or `excess`.
    group_size: G, completions sampled per prompt (TRL's num_generations).
    prompts_per_step: tasks per optimizer step (global batch = prompts_per_step * G; repeated
        when the phase has fewer tasks).
    loss_type: TRL loss aggregation (`grpo`, `dr_grpo`, `dapo`, ...).
    learning_rate: AdamW learning rate.
    updates_per_rollout: optimizer steps on each batch of judged rollouts (GRPO's mu, TRL's
        num_iterations; > 1 trains more per generated and judged kernel, the costly part on a
        CPU). coder_steps counts optimizer steps, so a phase samples coder_steps / mu batches.
    kl_coef: KL penalty to the reference model (TRL's `beta`; 0 loads no reference model).
    max_prompt_tokens: tasks whose prompt is longer are left out of the phase (TRL 1.16 does not
        truncate prompts, and a cut reference module would be a different task).
    max_completion_tokens: completions are cut at this many tokens.
    temperature: sampling temperature for rollouts.
    backend: kernel language asked for in the prompt (`triton` or `cuda`).
    prompt_example: include the Coder prompt's worked example (costs ~800 tokens per prompt).
    prompt_style: the Coder prompt (kernelzero.coder.prompts): `kernelbench`, `principles`, or
        `compact` (the module alone, in canonical form: the from-scratch Coders' prompt).
    """

    alpha: float = 0.5
    beta: float = 0.1
    s_max: float = 10.0
    speed_transform: str = "clip"
    group_size: int = 8
    prompts_per_step: int = 4
    loss_type: str = "grpo"
    learning_rate: float = 1e-6
    updates_per_rollout: int = 1
    kl_coef: float = 0.0
    max_prompt_tokens: int = 2048
    max_completion_tokens: int = 2048
    temperature: float = 1.0
    backend: str = "triton"
    prompt_example: bool = True
    prompt_style: str = "kernelbench"

    def __post_init__(self) -> None:
        from kernelzero.coder.prompts import STYLES

        if self.prompt_style not in STYLES:
            raise ValueError(f"coder.prompt_style={self.prompt_style!r}: choose one of {', '.join(STYLES)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"coder.alpha={self.alpha}: a correct rate, must lie in [0, 1]")
        if self.beta < 0:
            raise ValueError(f"coder.beta={self.beta}: must be >= 0")
        if self.s_max <= 0:
            raise ValueError(f"coder.s_max={self.s_max}: must be positive")
        if self.speed_transform not in SPEED_TRANSFORMS:
            raise ValueError(f"coder.speed_transform={self.speed_transform!r}: choose one of {SPEED_TRANSFORMS}")
        if self.group_size < 2:
            raise ValueError(f"coder.group_size={self.group_size}: GRPO needs at least 2 samples per group")
        if self.updates_per_rollout < 1:
            raise ValueError(f"coder.updates_per_rollout={self.updates_per_rollout}: at least 1 optimizer "
                             "step per batch of rollouts")
        _check_common(self, "coder")
        if self.backend not in ("triton", "cuda"):
            raise ValueError(f"coder.backend={self.backend!r}: choose triton or cuda")

    def prompt_config(self):
        """The Coder prompt these settings ask for (rollouts, held-out evaluation, attempts)."""
        from kernelzero.coder.prompts import PromptConfig

        return PromptConfig(backend=self.backend, style=self.prompt_style, example=self.prompt_example)


@dataclass
class ProposerConfig:
    """The Proposer's GRPO update.

    rho: reward of an invalid module.
    group_size: modules sampled per API-set prompt (TRL's num_generations).
    prompts_per_step: API sets per optimizer step.
    coder_attempts: G, times the current Coder attempts each valid module (p = mean correctness).
    band: modules with band[0] < p < band[1] (open interval) go to the task pool.
    api_set_sizes: sizes of the operator sets in the prompts.
    target: machine model the modules are sized and validated for (`cpu`, `h100`, `h200`).
    prompt_examples: example modules shown in the Proposer's prompt.
    loss_type / learning_rate / kl_coef / max_*_tokens / temperature: as for the Coder (prompts
        over max_prompt_tokens are left out).
    frozen: sample, validate and measure modules as usual but never update the Proposer
        (learning rate 0): the ablation of the Proposer's own learning.
    kind: `catalog` (API sets from the operator catalog, the catalog Proposer's prompt and
        validation) or `family` (op sets of the op family the Coder learns; the module must be
        one the teacher compiles: kernelzero.train.family_proposer).
    sft_modules: with proposer_model `scratch` (family only): generator modules the Proposer is
        distilled from before its first phase.
    """

    rho: float = -1.0
    group_size: int = 4
    prompts_per_step: int = 2
    coder_attempts: int = 8
    band: tuple[float, float] = (0.0, 1.0)
    api_set_sizes: tuple[int, ...] = (2, 3)
    target: str = "h100"
    prompt_examples: int = 2
    loss_type: str = "grpo"
    learning_rate: float = 1e-6
    kl_coef: float = 0.0
    max_prompt_tokens: int = 2048
    max_completion_tokens: int = 1024
    temperature: float = 1.0
    frozen: bool = False
    kind: str = "catalog"
    sft_modules: int = 8000

    def __post_init__(self) -> None:
        self.band = tuple(float(b) for b in self.band)
        self.api_set_sizes = tuple(int(s) for s in self.api_set_sizes)
        if self.group_size < 2:
            raise ValueError(f"proposer.group_size={self.group_size}: GRPO needs at least 2 samples per group")
        if self.coder_attempts < 1:
            raise ValueError(f"proposer.coder_attempts={self.coder_attempts}: must be >= 1")
        if len(self.band) != 2 or not 0.0 <= self.band[0] < self.band[1] <= 1.0:
            raise ValueError(f"proposer.band={self.band}: want [low, high] with 0 <= low < high <= 1")
        if self.prompt_examples < 0:
            raise ValueError(f"proposer.prompt_examples={self.prompt_examples}: must be >= 0")
        if self.kind not in ("catalog", "family"):
            raise ValueError(f"proposer.kind={self.kind!r}: choose catalog or family")
        if self.sft_modules < 1:
            raise ValueError("proposer.sft_modules must be >= 1")
        if not self.api_set_sizes or min(self.api_set_sizes) < 1:
            raise ValueError(f"proposer.api_set_sizes={self.api_set_sizes}: sizes must be >= 1")
        _check_common(self, "proposer")


@dataclass
class HeldOutConfig:
    """The Coder's held-out evaluation: before RL (round 0, after any cold start) and after
    every round. Each set is reported on its own; `pass@1` of the first set is the headline.

    family: in-family held-out modules (kernelzero.family.holdout: op combinations, pairs and
        texts no training module has), at the trained lengths; 0 for none.
    ood_long: modules with 4-6 ops (longer than trained); 0 for none.
    ood_pairs: modules with an adjacent op pair no training module has; 0 for none.
    handwritten: the package's modules of the family written by hand in people's own styles
        (kernelzero/examples/handwritten: no generator wrote them).
    family_target: sizes of the generated modules' inputs (`cpu` or `gpu`).
    seed: the held-out modules' stream (any seed: the held-out rule does not depend on it).
    tasks: a directory of KernelBench-format tasks, evaluated as the set `tasks` (None with no
        family sets: the package's example tasks).
    limit: use at most this many tasks of `tasks` (None: all).
    greedy: pass@1 from one greedy completion per task (else from the samples).
    samples: completions per task at the Coder's temperature, for pass@k (0: none).
    ks: the k of pass@k to report (each <= samples).
    """

    family: int = 0
    ood_long: int = 0
    ood_pairs: int = 0
    handwritten: bool = False
    family_target: str = "cpu"
    seed: int = 7
    tasks: str | None = None
    limit: int | None = None
    greedy: bool = True
    samples: int = 4
    ks: tuple[int, ...] = (1, 4)

    def __post_init__(self) -> None:
        self.ks = tuple(int(k) for k in self.ks)
        if self.samples < 0 or any(k < 1 or k > max(self.samples, 1) for k in self.ks):
            raise ValueError(f"heldout: need 1 <= k <= samples for every k, got ks={self.ks}, "
                             f"samples={self.samples}")
        if not self.greedy and self.samples < 1:
            raise ValueError("heldout: with greedy false, samples must be >= 1")
        if min(self.family, self.ood_long, self.ood_pairs) < 0:
            raise ValueError("heldout.family, ood_long and ood_pairs must be >= 0")
        if self.family_target not in ("cpu", "gpu"):
            raise ValueError(f"heldout.family_target={self.family_target!r}: choose cpu or gpu")


@dataclass
class RewardConfig:
    """Where the loop's candidates are judged: the Coder's rollouts, the Proposer phase's attempts
    and the held-out evaluation. Three ways, one interface (`judge_many`), the same verdicts under
    the same evaluator settings.

    pool: `local` (an Evaluator in this process, sandboxed workers on this machine) or `ray`
        (kernelzero.eval.pools.ray_pool.RayPool: one judge per GPU on every node of a Ray cluster).
    ray_address: the Ray cluster to join with pool=ray: None starts a private one on this machine
        (or joins $RAY_ADDRESS), `auto` joins the one `ray start` began here, `HOST:PORT` that head.
        With several training processes each opens its own pool; prefer `url` then.
    url: base URL of a reward service (`kernelzero serve`, e.g. http://10.0.0.5:8000). When set,
        candidates are judged there over HTTP (kernelzero.serve.client.RewardClient) under the
        server's own evaluator settings, and pool / ray_address must stay unset (the server's
        `--pool` decides). Checked at start: an unreachable service stops the run at once.
    token: bearer token for the service; None reads $KERNELZERO_REWARD_TOKEN. Prefer the
        variable (a secret in a config file travels with the file); the run directory's copy
        of the config leaves it out either way.

    Whatever judges the candidates, the Proposer's validation check (probing reference modules)
    runs in a local evaluator under the `eval` section.
    """

    pool: str = "local"
    ray_address: str | None = None
    url: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        from kernelzero.eval.pools import POOL_KINDS

        if self.pool not in POOL_KINDS:
            raise ValueError(f"reward.pool={self.pool!r}: choose one of {', '.join(POOL_KINDS)}")
        if self.ray_address is not None and self.pool != "ray":
            raise ValueError("reward.ray_address needs reward.pool: ray")
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"reward.url={self.url!r}: must start with http:// or https://")
            if self.pool != "local" or self.ray_address is not None:
                raise ValueError("reward.url judges on the reward service, whose own --pool decides "
                                 "where; leave reward.pool and reward.ray_address unset with it")

    @property
    def where(self) -> str:
        """`service`, `ray` or `local`: what judges the candidates."""
        return "service" if self.url else self.pool


@dataclass
class TrainConfig:
    """The alternating loop.

    name: label of the run (the output directory defaults to runs/<name>).
    coder_model: a local checkpoint path; `shipped`, the Coder that ships inside the package
        (kernelzero/models/shipped.py, trained from zero by the project's own recipe); `scratch`, a
        Coder made from zero at the start of the run (the `cold_start` section: distill the
        teacher compiler, build a model, fine-tune); or `tiny`, a tiny random model (plumbing
        tests only: it writes no kernels).
    proposer_model: a local checkpoint path, `tiny`, `shipped` (the package's family Proposer) or
        `scratch` (with proposer.kind `family`: a Proposer distilled from the family generator at
        the start of the run).
    tiny_size: (hidden size, layers) of the `tiny` models.
    rounds: R, Proposer phase then Coder phase, R times (0: only the cold start, if any, and the
        held-out evaluation of round 0).
    proposer_steps / coder_steps: N_P / N_C optimizer steps per phase.
    seed_tasks: tasks the Coder trains on besides the pool: a task directory, `family:N` (N
        training modules of the op family as cold_start.family draws them, never a held-out one),
        `family:N:ops=A-B` (the same with chains of A to B ops), several of those joined by
        commas (e.g. `family:200:ops=4-4,family:100:ops=1-3`: the frontier plus modules the Coder
        already solves, which GRPO trains on only once its samples of them start failing), or None
        (the package's example tasks); keeps the Coder phase fed while the pool is still empty.
    seed: seed of every RNG (torch, numpy, python); restored from checkpoints on resume.
    device: `cpu`, `cuda` or `auto` (cuda when there is one) for the policy models (the
        evaluator's device is eval.device).
    bf16: train in bfloat16 (GPU).
    gradient_checkpointing: trade compute for memory (7B models).
    use_vllm / vllm_mode: generate rollouts with vLLM (`colocate` or `server`), where installed.
    sample_backend: backend that samples the Coder outside GRPO (the Proposer phase's G attempts
        per module, the held-out evaluation): `hf` (transformers) or `vllm` (offline engine).
    torch_threads: intra-op threads of the training process (None: torch's default). Tiny models
        run several times faster on 1 thread than on 2 contended ones.
    reward: where candidates are judged (RewardConfig: the local pool, a Ray cluster, or a reward
        service at a URL).
    cold_start: how a `scratch` Coder is made (kernelzero.train.cold_start.ColdStartConfig).
    eval: keyword arguments of kernelzero.eval.EvalConfig (`max_workers: auto`: all cores but two);
        its `runtime` section holds those of kernelzero.eval.RuntimeConfig.
    """

    name: str = "run"
    coder_model: str = "tiny"
    proposer_model: str = "tiny"
    tiny_size: tuple[int, int] = (128, 4)
    rounds: int = 4
    proposer_steps: int = 20
    coder_steps: int = 20
    seed_tasks: str | None = None
    seed: int = 0
    device: str = "cpu"
    bf16: bool = False
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    sample_backend: str = "hf"
    torch_threads: int | None = None
    coder: CAGRPOConfig = field(default_factory=CAGRPOConfig)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    heldout: HeldOutConfig = field(default_factory=HeldOutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    cold_start: Any = None
    eval: dict[str, Any] = field(default_factory=lambda: {"device": "cpu", "tolerance": "paper"})

    def __post_init__(self) -> None:
        if isinstance(self.coder, dict):
            self.coder = CAGRPOConfig(**self.coder)
        if isinstance(self.proposer, dict):
            self.proposer = ProposerConfig(**self.proposer)
        if isinstance(self.heldout, dict):
            self.heldout = HeldOutConfig(**self.heldout)
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        from kernelzero.train.cold_start import ColdStartConfig
        if self.cold_start is None:
            self.cold_start = ColdStartConfig()
        elif isinstance(self.cold_start, dict):
            self.cold_start = ColdStartConfig(**self.cold_start)
        self.tiny_size = tuple(int(x) for x in self.tiny_size)
        if len(self.tiny_size) != 2 or self.tiny_size[0] % 32 or self.tiny_size[1] < 1:
            raise ValueError(f"tiny_size={self.tiny_size}: want [hidden size (multiple of 32), layers]")
        if self.rounds < 0 or self.proposer_steps < 0 or self.coder_steps < 0:
            raise ValueError("rounds, proposer_steps and coder_steps must be >= 0 (rounds: 0 runs "
                             "only the cold start and the held-out evaluation)")
        if self.seed_tasks is not None:
            from kernelzero.train.seed_tasks import seed_task_specs
            seed_task_specs(self.seed_tasks)  # a malformed spec fails here, not mid-run
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"torch_threads={self.torch_threads}: must be >= 1 (or null for torch's default)")
        if self.device == "auto":
            import torch
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device={self.device!r}: choose cpu, cuda or auto")
        if self.sample_backend not in ("hf", "vllm"):
            raise ValueError(f"sample_backend={self.sample_backend!r}: choose hf or vllm")
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode={self.vllm_mode!r}: choose colocate or server")
        from kernelzero.eval import EvalConfig, RuntimeConfig
        moved = sorted(set(self.eval) & {f.name for f in dataclasses.fields(RuntimeConfig)})
        if moved:
            raise ValueError(f"eval section: {', '.join(moved)} belong under eval.runtime "
                             f"(e.g. eval: {{runtime: {{{moved[0]}: ...}}}})")
        try:
            EvalConfig(**self.eval_kwargs())
        except TypeError as e:
            raise ValueError(f"eval section: {e}") from None

    def eval_config(self):
        """The `eval` section as an EvalConfig. On cuda, unless the section sets `runtime.spares`,
        the spare pool holds one worker per candidate and task of a Coder step, started ahead so
        that process starts stay out of the batch (on the H200 a 30-worker batch judged in 9.3-9.5 s
        with 30 spares and 14.4-16.1 s with 18: docs/history/perf-log.md); each spare holds a
        CUDA context and library handles (729 MiB on an H100), so the judge keeps the pool to a
        third of the card's memory (EvalConfig.spares_on)."""
        from kernelzero.eval import EvalConfig
        cfg = EvalConfig(**self.eval_kwargs())
        runtime = self.eval.get("runtime") or {}
        spares_set = "spares" in runtime if isinstance(runtime, dict) else runtime.spares is not None
        if cfg.device == "cuda" and not spares_set:
            c = self.coder
            cfg.runtime.spares = max(cfg.spare_pool_size, (c.group_size + 1) * c.prompts_per_step)
        return cfg

    def eval_kwargs(self) -> dict:
        """The `eval` section with `max_workers: auto` resolved to all cores but two (judging
        small modules in the Triton interpreter is CPU work)."""
        import os
        kw = dict(self.eval)
        if kw.get("max_workers") == "auto":
            kw["max_workers"] = max(1, (os.cpu_count() or 2) - 2)
        return kw

    def to_dict(self) -> dict:
        """The config as plain data, without the reward token: this is what the run directory's
        config.yaml holds, and a secret should not sit in a file that gets copied around."""
        d = dataclasses.asdict(self)
        d["reward"]["token"] = None
        return d


def _check_common(cfg, section: str) -> None:
    if cfg.loss_type not in LOSS_TYPES:
        raise ValueError(f"{section}.loss_type={cfg.loss_type!r}: choose one of {LOSS_TYPES}")
    if cfg.learning_rate <= 0:
        raise ValueError(f"{section}.learning_rate must be positive")
    if cfg.kl_coef < 0:
        raise ValueError(f"{section}.kl_coef must be >= 0")
    if cfg.prompts_per_step < 1:
        raise ValueError(f"{section}.prompts_per_step must be >= 1")
    if cfg.max_prompt_tokens < 1 or cfg.max_completion_tokens < 1:
        raise ValueError(f"{section}: token limits must be >= 1")
    if cfg.temperature <= 0:
        raise ValueError(f"{section}.temperature must be positive")
