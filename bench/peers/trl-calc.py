"""
The peer a user would pick instead of `agl train`: TRL's GRPOTrainer (torch on the CPU, transformers, PEFT)
training the calc task with the settings of `npm run demo:hf` (docs/perf.md, "TRL's GRPOTrainer on the
calc task"): the same Hugging Face model (the calc SFT checkpoint exported by examples/calc/hf.ts), the
same training and held-out problems, a LoRA adapter of the same rank and alpha on all seven projections,
the same batch (tasks x group), learning rate and late decay, clip 0.2, gradient clip 1.0, no KL, float32,
temperature 1 and 6 new tokens, and the same reward (examples/calc/tasks.ts: 1 when the reply's first
integer is the answer). Prints held-out greedy accuracy every --val-every steps, wall time and tokens per
step, and one summary line of JSON. Run by hand, never by `npm test`:

  pip install torch transformers peft trl
  npm run demo:hf -- --out runs/calc-hf            # exports runs/calc-hf/model, train.jsonl, val.jsonl
  python bench/peers/trl-calc.py --dir runs/calc-hf --steps 100
"""

import argparse
import json
import re
import time

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--dir", required=True, help="the folder demo:hf wrote: model/, train.jsonl, val.jsonl")
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--batch", type=int, default=16, help="tasks per step")
ap.add_argument("--group", type=int, default=8, help="rollouts per task (num_generations)")
ap.add_argument("--lr", type=float, default=3e-3)
ap.add_argument("--decay-share", type=float, default=0.5)
ap.add_argument("--lr-final", type=float, default=0.1)
ap.add_argument("--lora-r", type=int, default=32)
ap.add_argument("--lora-alpha", type=float, default=32)
ap.add_argument("--val-every", type=int, default=20)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--max-new-tokens", type=int, default=6, help="examples/calc/agent.ts's MAX_ANSWER_TOKENS")
ap.add_argument("--threads", type=int, default=0, help="torch threads [torch's default]")
ap.add_argument("--out", default="/tmp/trl-calc", help="TRL's output_dir (nothing is saved there)")
args = ap.parse_args()
if args.threads > 0:
    torch.set_num_threads(args.threads)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def parse_answer(reply):
    """examples/calc/tasks.ts's parseAnswer: the reply's first integer, else None."""
    m = re.search(r"-?\d+", reply)
    return int(m.group(0)) if m else None


def calc_reward(completions, answer, **_):
    """examples/calc/tasks.ts's reward: 1 for a correct answer, else 0."""
    return [1.0 if parse_answer(c[0]["content"]) == a else 0.0 for c, a in zip(completions, answer)]


def late_decay(step, steps, share, final):
    """src/algorithm/grpo.ts's lateDecay: constant, then linear down to `final` over the last `share` of the steps."""
    start = steps * (1 - share)
    if step <= start or steps <= start:
        return 1.0
    return 1 - (1 - final) * ((step - start) / (steps - start))


model_dir = f"{args.dir}/model"
tokenizer = AutoTokenizer.from_pretrained(model_dir)
tokenizer.padding_side = "left"
base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
lora = LoraConfig(
    r=args.lora_r,
    lora_alpha=args.lora_alpha,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lora)


def chat(question):
    return [{"role": "user", "content": question}]


train = read_jsonl(f"{args.dir}/train.jsonl")
held_out = read_jsonl(f"{args.dir}/val.jsonl")
dataset = Dataset.from_list([{"prompt": chat(t["question"]), "answer": t["answer"]} for t in train])


@torch.no_grad()
def held_out_accuracy():
    """Greedy, one reply per held-out problem, as the demo's validation."""
    was_training = model.training
    model.eval()
    prompts = [tokenizer.apply_chat_template(chat(t["question"]), add_generation_prompt=True, tokenize=False) for t in held_out]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    replies = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    if was_training:
        model.train()
    return sum(parse_answer(r) == t["answer"] for r, t in zip(replies, held_out)) / len(held_out)


class Measure(TrainerCallback):
    """Wall time and tokens (prompt + completion, TRL's num_input_tokens_seen) of each step; validation outside them."""

    def __init__(self):
        self.step_seconds = []
        self.step_tokens = []
        self.validations = []
        self._t = 0.0
        self._tokens = 0

    def on_train_begin(self, targs, state, control, **kw):
        self.validations.append((0, held_out_accuracy()))
        print(f"validation @ step 0: {self.validations[-1][1] * 100:.0f}%", flush=True)

    def on_step_begin(self, targs, state, control, **kw):
        self._t = time.perf_counter()
        self._tokens = state.num_input_tokens_seen

    def on_step_end(self, targs, state, control, **kw):
        self.step_seconds.append(time.perf_counter() - self._t)
        self.step_tokens.append(state.num_input_tokens_seen - self._tokens)
        s = state.global_step
        if (args.val_every > 0 and s % args.val_every == 0) or s == args.steps:
            self.validations.append((s, held_out_accuracy()))
            print(f"validation @ step {s}: {self.validations[-1][1] * 100:.0f}%", flush=True)


rows = args.batch * args.group
config = GRPOConfig(
    output_dir=args.out,
    max_steps=args.steps,
    # one optimizer step per generation of batch x group completions, one pass over them (ppo epochs 1)
    per_device_train_batch_size=rows,
    gradient_accumulation_steps=1,
    num_generations=args.group,
    num_iterations=1,
    max_completion_length=args.max_new_tokens,
    temperature=1.0,
    top_p=1.0,
    top_k=0,
    learning_rate=args.lr,
    weight_decay=0.0,
    max_grad_norm=1.0,
    epsilon=0.2,
    beta=0.0,
    loss_type="dapo",  # token-mean over the batch's response tokens, verl's and agl train's default
    scale_rewards="group",
    bf16=False,
    use_cpu=True,
    seed=args.seed,
    logging_steps=10,
    save_strategy="no",
    report_to="none",
    remove_unused_columns=False,
    disable_tqdm=True,
)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
# HF schedulers count optimizer steps from 0, the demo's steps from 1
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda i: late_decay(i + 1, args.steps, args.decay_share, args.lr_final)
)
measure = Measure()
trainer = GRPOTrainer(
    model=model,
    reward_funcs=calc_reward,
    args=config,
    train_dataset=dataset,
    processing_class=tokenizer,
    optimizers=(optimizer, scheduler),
    callbacks=[measure],
)
t0 = time.perf_counter()
trainer.train()
wall = time.perf_counter() - t0
n = len(measure.step_seconds)
seconds = sum(measure.step_seconds) / n
tokens = sum(measure.step_tokens) / n
print(f"held-out accuracy by step: {', '.join(f'{s}: {a * 100:.0f}%' for s, a in measure.validations)}")
print(f"per step (mean): {seconds * 1000:.0f} ms, {tokens:.0f} tokens, {tokens / seconds:.0f} tokens/s; {wall:.0f} s in all (validation included)")
print(
    json.dumps(
        {
            "peer": "trl",
            "trl_steps": n,
            "held_out": dict((s, a) for s, a in measure.validations),
            "gain_points": (measure.validations[-1][1] - measure.validations[0][1]) * 100,
            "ms_per_step": seconds * 1000,
            "tokens_per_step": tokens,
            "tokens_per_second": tokens / seconds,
            "wall_s": wall,
            "threads": torch.get_num_threads(),
        }
    )
)
