"""PyTorch baseline for bench/lora.ts: the same LoRA policy step on the same random checkpoints (SmolLM2-135M and
Qwen2.5-0.5B shapes, r 16, alpha 32, all seven projections): PPO token-mean loss with clip and dual clip plus a
k3 KL term against the base (its log-probs taken once with the adapter switched off, then only the policy
step is timed, as bench/lora.ts does), backward into the adapter only, grad-norm clip 1.0, AdamW on the adapter. Prints `lora_step shape=... backend=torch-... tokens/s=...` lines like bench/lora.ts.

The adapter comes from PEFT (`get_peft_model`) when `peft` is installed, else from a small LoRA layer with
PEFT's math (y = x W^T + (alpha/r) (x A^T) B^T, A Kaiming-uniform, B zero); the line says which.
Runs only where PyTorch and (preferably) a CUDA GPU exist:
    python bench/torch/lora_step.py [--shape smollm2-135m|qwen2.5-0.5b|all] [--n 8 --P 256 --R 256] [--steps 5]
        [--dtype float32|bfloat16] [--layers N]
Shapes mirror SHAPES in bench/lora.ts; keep them in sync.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "smollm2-135m": dict(vocab=49152, d=576, layers=30, heads=9, kv=3, ff=1536, theta=1e5, eps=1e-5, bias=False),
    "qwen2.5-0.5b": dict(vocab=151936, d=896, layers=24, heads=14, kv=2, ff=4864, theta=1e6, eps=1e-6, bias=True),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R_LORA, ALPHA = 16, 32


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.nh, self.nkv = c["d"], c["heads"], c["kv"]
        self.hd = d // self.nh
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d, c["eps"]), RMSNorm(d, c["eps"])
        L = torch.nn.Linear
        self.q_proj = L(d, self.nh * self.hd, bias=c["bias"])
        self.k_proj = L(d, self.nkv * self.hd, bias=c["bias"])
        self.v_proj = L(d, self.nkv * self.hd, bias=c["bias"])
        self.o_proj = L(self.nh * self.hd, d, bias=False)
        self.gate_proj, self.up_proj = L(d, c["ff"], bias=False), L(d, c["ff"], bias=False)
        self.down_proj = L(c["ff"], d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab"], c["d"])
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["d"], c["eps"])  # tied lm head, as both checkpoints

    def forward(self, ids):
        T = ids.shape[1]
        hd = self.c["d"] // self.c["heads"]
        inv = self.c["theta"] ** (-torch.arange(0, hd, 2, device=ids.device, dtype=torch.float32) / hd)
        ang = torch.arange(T, device=ids.device)[None, None, :, None].float() * inv
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().to(self.embed_tokens.weight.dtype), ang.sin().to(self.embed_tokens.weight.dtype)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x) @ self.embed_tokens.weight.T


class LoraLinear(torch.nn.Module):
    """PEFT's LoRA math around a frozen Linear, for hosts without `peft`."""

    def __init__(self, base):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Linear(base.in_features, R_LORA, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        self.lora_B = torch.nn.Linear(R_LORA, base.out_features, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_B.weight)
        self.enabled = True

    def forward(self, x):
        y = self.base(x)
        return y + (ALPHA / R_LORA) * self.lora_B(self.lora_A(x)) if self.enabled else y


def with_adapter(model):
    """(model, set_enabled(bool), kind): PEFT when installed, else LoraLinear swapped in."""
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        from peft import LoraConfig, get_peft_model

        peft_model = get_peft_model(model, LoraConfig(r=R_LORA, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, bias="none"))

        def set_enabled(on):
            (peft_model.enable_adapter_layers if on else peft_model.disable_adapter_layers)()

        return peft_model, set_enabled, "peft"
    except ImportError:
        wrapped = []
        for block in model.layers:
            for name in TARGETS:
                w = LoraLinear(getattr(block, name))
                setattr(block, name, w)
                wrapped.append(w)

        def set_enabled(on):
            for w in wrapped:
                w.enabled = on

        return model, set_enabled, "lora-layer"


def ppo_kl_loss(logp, old, ref, adv, m, tokens, clip=0.2, clip_c=3.0, kl_coef=0.01):
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    c1 = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip))
    pg = torch.where(adv < 0, torch.minimum(-adv * clip_c, c1), c1)
    x = torch.clamp(ref - logp, -20, 20)
    kl = torch.clamp(torch.exp(x) - x - 1, -10, 10)
    return ((pg + kl_coef * kl) * m).sum() / (tokens + 1e-8)


def run(name, layers, n, P, R, steps, dtype, device):
    c = dict(SHAPES[name])
    if layers:
        c["layers"] = layers
    T = P + R
    torch.manual_seed(0)
    model = Model(c).to(device=device, dtype=dtype)
    model, set_enabled, kind = with_adapter(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ids = torch.randint(0, c["vocab"], (n, T), device=device)
    resp_mask = torch.ones(n, R, device=device, dtype=torch.float32)
    adv = torch.tensor([1.0, -1.0], device=device).repeat(n * R // 2).view(n, R)
    tokens = resp_mask.sum()

    def logprobs():
        logits = model(ids)[:, P - 1 : T - 1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, P:T, None]).squeeze(-1)

    # As bench/lora.ts: the reference (base) log-probs once, then timed policy steps (forward, loss, backward, AdamW).
    with torch.no_grad():
        set_enabled(False)
        ref = logprobs()
        set_enabled(True)
    old = ref

    def step():
        opt.zero_grad(set_to_none=True)
        ppo_kl_loss(logprobs(), old, ref, adv, resp_mask, tokens).backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()

    step()  # warm-up
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    backend = f"torch-{kind}-{device.type}-{str(dtype).replace('torch.', '')}"
    print(
        f"lora_step shape={name} layers={c['layers']} backend={backend} n={n} P={P} R={R} "
        f"tokens/s={steps * n * R / seconds:.1f} peak_gpu_bytes={peak}"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="all", choices=[*SHAPES, "all"])
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--P", type=int, default=256)
    ap.add_argument("--R", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the WGSL kernels are plain f32
        print(f"device: {torch.cuda.get_device_name()}")
    else:
        print("device: cpu (no CUDA; this baseline is meant for a GPU host)")
    for s in SHAPES if a.shape == "all" else [a.shape]:
        run(s, a.layers, a.n, a.P, a.R, a.steps, getattr(torch, a.dtype), device)


if __name__ == "__main__":
    main()
