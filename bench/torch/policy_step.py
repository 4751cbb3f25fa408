"""PyTorch eager baseline for bench/gpu.ts: the same policy step (Llama-style decoder, PPO token-mean loss
with clip and dual clip, backward, global grad-norm clip 1.0, AdamW) on the same shapes, printing the same
`policy_step preset=... tokens/s=...` line so the two runs compare directly.

Runs only where PyTorch and (preferably) a CUDA GPU exist:
    python bench/torch/policy_step.py [--preset tiny|small|base|all] [--steps 10] [--dtype float32]
Presets and batch shapes mirror src/model/presets.ts and SHAPES in bench/gpu.ts; keep them in sync.
Also prints the step's achieved FLOP/s (6 * params * tokens + attention) for the share-of-peak figure.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

VOCAB = 264  # src/model/tokenizer.ts TOKENIZER_VOCAB_SIZE
PRESETS = {
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=384, max_seq_len=256),
    "small": dict(d_model=384, n_layers=6, n_heads=6, n_kv_heads=2, d_ff=1024, max_seq_len=512),
    "base": dict(d_model=768, n_layers=16, n_heads=12, n_kv_heads=4, d_ff=2048, max_seq_len=1024),
}
SHAPES = {  # bench/gpu.ts SHAPES: rows n, prompt P, response R, micro-batch rows
    "tiny": dict(n=8, P=32, R=96, micro=8),
    "small": dict(n=8, P=64, R=192, micro=4),
    "base": dict(n=4, P=128, R=384, micro=2),
}
ROPE_THETA = 10000.0
NORM_EPS = 1e-5


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.nh, self.nkv = c["d_model"], c["n_heads"], c["n_kv_heads"]
        self.hd = d // self.nh
        self.attn_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wq = torch.nn.Linear(d, self.nh * self.hd, bias=False)
        self.wk = torch.nn.Linear(d, self.nkv * self.hd, bias=False)
        self.wv = torch.nn.Linear(d, self.nkv * self.hd, bias=False)
        self.wo = torch.nn.Linear(self.nh * self.hd, d, bias=False)
        self.w_gate = torch.nn.Linear(d, c["d_ff"], bias=False)
        self.w_up = torch.nn.Linear(d, c["d_ff"], bias=False)
        self.w_down = torch.nn.Linear(c["d_ff"], d, bias=False)

    def forward(self, x, cos, sin, bias):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = torch.nn.Embedding(VOCAB, c["d_model"])
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.norm = RMSNorm(c["d_model"])  # tied lm head, as the presets

    def forward(self, ids, mask, pos):
        B, T = ids.shape
        hd = self.c["d_model"] // self.c["n_heads"]
        inv = ROPE_THETA ** (-torch.arange(0, hd, 2, device=ids.device, dtype=torch.float32) / hd)
        ang = pos[:, None, :, None].float() * inv
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos(), ang.sin()
        # key j visible to query i iff j == i or (j < i and mask[j] == 1)  (src/model/config.ts)
        i = torch.arange(T, device=ids.device)
        visible = (i[None, :] < i[:, None])[None] & mask[:, None, :].bool() | (i[None, :] == i[:, None])[None]
        bias = torch.zeros(B, 1, T, T, device=ids.device).masked_fill(~visible[:, None], float("-inf"))
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        return self.norm(x) @ self.tok_embeddings.weight.T


def ppo_loss(logp, old, adv, m, tokens, clip=0.2, clip_c=3.0):
    delta = torch.clamp(logp - old, -20, 20)
    ratio = torch.exp(delta)
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)
    c1 = torch.maximum(l1, l2)
    loss = torch.where(adv < 0, torch.minimum(-adv * clip_c, c1), c1)
    return (loss * m).sum() / (tokens + 1e-8)


def run(preset, steps, dtype, device):
    c, s = PRESETS[preset], SHAPES[preset]
    n, P, R, micro = s["n"], s["P"], s["R"], s["micro"]
    T = P + R
    torch.manual_seed(0)
    model = Model(c).to(device=device, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ids = torch.randint(0, VOCAB, (n, T), device=device)
    mask = torch.ones(n, T, dtype=torch.long, device=device)
    pos = torch.arange(T, device=device).expand(n, T)
    resp_mask = torch.ones(n, R, device=device, dtype=dtype)
    adv = torch.tensor([1.0, -1.0], device=device, dtype=dtype).repeat(n * R // 2).view(n, R)
    tokens = resp_mask.sum()

    def logprobs(rows):
        logits = model(ids[rows], mask[rows], pos[rows])[:, P - 1 : T - 1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[rows, P:T, None]).squeeze(-1)

    with torch.no_grad():
        old = torch.cat([logprobs(slice(r, r + micro)) for r in range(0, n, micro)])

    def step():
        opt.zero_grad(set_to_none=True)
        for r in range(0, n, micro):
            rows = slice(r, r + micro)
            loss = ppo_loss(logprobs(rows), old[rows], adv[rows], resp_mask[rows], tokens)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = time.perf_counter() - t0
    tps = steps * n * R / seconds
    d, L = c["d_model"], c["n_layers"]
    flops = steps * (6 * params * n * T + 12 * L * n * T * T * d)  # matmuls + attention, fwd+bwd (logprob fwd included in 6x)
    name = f"torch-eager-{device.type}-{str(dtype).replace('torch.', '')}"
    print(f"policy_step preset={preset} params={params} n={n} P={P} R={R} micro={micro} backend={name} tokens/s={tps:.1f}")
    print(f"  achieved {flops / seconds / 1e12:.2f} TFLOP/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="all", choices=["tiny", "small", "base", "all"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the WGSL kernels are plain f32
        print(f"device: {torch.cuda.get_device_name()}")
    else:
        print("device: cpu (no CUDA; this baseline is meant for a GPU host)")
    for p in ["tiny", "small", "base"] if a.preset == "all" else [a.preset]:
        run(p, a.steps, getattr(torch, a.dtype), device)


if __name__ == "__main__":
    main()
