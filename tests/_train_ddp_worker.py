"""Worker for the 1- vs 2-process CA-GRPO test: run under `torchrun --nproc_per_node N`.

The reward source is a fixed table indexed by (task, position of the sample in its group); the
position is recovered from the rank and the local index (TRL lays the global batch out rank by
rank), so the raw verdicts are the same whatever the number of processes, and any difference in
the final rewards can only come from where the gate is applied.
usage: python _train_ddp_worker.py MODEL_DIR OUT_JSON [STEPS [COMPLETION_TOKENS [BF16]]]
(also launched by bench/train_scaling.py through `accelerate launch`, for step times per GPU count)
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelerate import PartialState  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from kernelzero.train.ca_grpo import CAGRPOTrainer, RawRewardSource, grpo_args  # noqa: E402
from kernelzero.train.config import CAGRPOConfig  # noqa: E402

G, PROMPTS, STEPS = 4, 3, 2
# task -> (correct flags by position, speed scores by position). Group b is [1, 0, 0, 0]: rate
# 0.25, gate shut; a per-process gate would see [1, 0] on one rank (rate 0.5) and open it.
TABLE = {"a": ([1, 1, 0, 1], [2.0, 0.5, 3.0, 1.0]), "b": ([1, 0, 0, 0], [4.0, 1.0, 1.0, 1.0]),
         "c": ([1, 1, 0, 0], [1.5, 2.5, 0.0, 0.0]), "d": ([0, 0, 0, 0], [9.0, 9.0, 9.0, 9.0]),
         "e": ([1, 1, 1, 1], [0.0, 1.0, 2.0, 3.0]), "f": ([0, 1, 0, 1], [1.0, 1.0, 1.0, 1.0])}


class TableReward(RawRewardSource):
    def score(self, prompts, completions, task_id=None, **_):
        rank, n = PartialState().process_index, len(completions)
        out = []
        for i, t in enumerate(task_id):
            pos = (rank * n + i) % G
            flags, speeds = TABLE[t]
            out.append((float(flags[pos]), speeds[pos]))
        return out


def main(model_dir: str, out_json: str, steps: int = STEPS, tokens: int = 8, bf16: bool = False) -> None:
    import time
    world = int(os.environ.get("WORLD_SIZE", "1"))  # read before TrainingArguments sets up the state
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"write kernel {t}"}], "task_id": t}
                            for t in TABLE])
    ca = CAGRPOConfig(group_size=G, prompts_per_step=PROMPTS)
    args = grpo_args(str(Path(out_json).parent / "trl"), group_size=G, prompts_per_step=PROMPTS,
                     max_steps=steps, learning_rate=1e-3, loss_type="grpo", kl_coef=0.0,
                     max_completion_tokens=tokens, temperature=1.0, seed=0,
                     num_processes=world, bf16=bf16)
    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = CAGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward=TableReward(),
                            ca=ca, args=args, train_dataset=ds, processing_class=tok)
    t0 = time.perf_counter()
    out = trainer.train()
    wall = time.perf_counter() - t0
    if trainer.accelerator.is_main_process:
        Path(out_json).write_text(json.dumps({
            "num_processes": trainer.accelerator.num_processes, "history": trainer.reward_history,
            "train_wall_s": wall, "train_runtime_s": out.metrics.get("train_runtime"),
            "distributed_type": str(trainer.accelerator.distributed_type),
            "step_times_s": [e.get("step_time") for e in trainer.state.log_history if "step_time" in e]}))
    _shutdown()


def _shutdown() -> None:
    """Every rank leaves together, then exits at once: a rank that exits while another still uses
    the process group, or C++ teardown of gloo's threads at interpreter exit, can abort the run
    ("terminate called without an active exception"), and destroy_process_group can hang."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], *(int(x) for x in a[2:4]), *(x == "bf16" for x in a[4:5]))
