"""PyTorch eager baseline for bench/hf.ts: prefill and KV-cached greedy decode of random models shaped
like SmolLM2-135M and Qwen2.5-0.5B, printing `hf shape=... prefill_tok/s=... decode_tok/s=...` lines so
the WebGPU figures of the same run compare directly.

Runs only where PyTorch exists (a CUDA GPU preferred):
    python bench/torch/hf_generate.py [--shape smollm2-135m|qwen2.5-0.5b|all] [--prompt 512] [--decode 64]
        [--dtype float32|bfloat16]
Shapes mirror SHAPES in bench/hf.ts; keep them in sync. The forward is written here in plain torch ops
(the modeling semantics of Hugging Face's Llama/Qwen2: RMSNorm, rotate-half RoPE, GQA, SwiGLU, q/k/v bias
for Qwen2, tied embeddings), so no `transformers` install is needed.
"""
import argparse
import time

import torch

SHAPES = {
    "smollm2-135m": dict(vocab=49152, d=576, layers=30, heads=9, kv=3, ff=1536, theta=100000.0, bias=False),
    "qwen2.5-0.5b": dict(vocab=151936, d=896, layers=24, heads=14, kv=2, ff=4864, theta=1000000.0, bias=True),
}
EPS = 1e-6


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Model:
    def __init__(self, c, dtype, device):
        g = torch.Generator(device="cpu").manual_seed(0)
        self.c, self.hd = c, c["d"] // c["heads"]

        def w(*shape, std=0.02):
            return (torch.randn(*shape, generator=g) * std).to(dtype).to(device)

        d, hd = c["d"], self.hd
        self.embed = w(c["vocab"], d)
        self.layers = []
        for _ in range(c["layers"]):
            L = dict(
                n1=torch.ones(d, dtype=dtype, device=device), n2=torch.ones(d, dtype=dtype, device=device),
                q=w(c["heads"] * hd, d), k=w(c["kv"] * hd, d), v=w(c["kv"] * hd, d), o=w(d, c["heads"] * hd),
                gate=w(c["ff"], d), up=w(c["ff"], d), down=w(d, c["ff"]),
            )
            if c["bias"]:
                L.update(bq=w(c["heads"] * hd), bk=w(c["kv"] * hd), bv=w(c["kv"] * hd))
            self.layers.append(L)
        self.norm = torch.ones(d, dtype=dtype, device=device)
        inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.inv = inv.to(device)

    def forward(self, ids, pos0, cache):
        c, hd = self.c, self.hd
        B, T = ids.shape
        x = self.embed[ids]
        pos = torch.arange(pos0, pos0 + T, device=ids.device, dtype=torch.float32)
        ang = torch.outer(pos, self.inv)
        emb = torch.cat((ang, ang), -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for i, L in enumerate(self.layers):
            h = rms(x, L["n1"])
            q, k, v = h @ L["q"].T, h @ L["k"].T, h @ L["v"].T
            if c["bias"]:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.view(B, T, c["heads"], hd).transpose(1, 2)
            k = k.view(B, T, c["kv"], hd).transpose(1, 2)
            v = v.view(B, T, c["kv"], hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if cache[i] is not None:
                k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
            cache[i] = (k, v)
            rep = c["heads"] // c["kv"]
            kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            a = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=T > 1)
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ L["o"].T
            h = rms(x, L["n2"])
            x = x + (torch.nn.functional.silu(h @ L["gate"].T) * (h @ L["up"].T)) @ L["down"].T
        return rms(x[:, -1:], self.norm) @ self.embed.T


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(name, prompt, decode, dtype, device):
    c = SHAPES[name]
    m = Model(c, dtype, device)
    ids = torch.randint(0, c["vocab"], (1, prompt), device=device)
    with torch.no_grad():
        for _ in range(2):  # warm-up
            m.forward(ids, 0, [None] * c["layers"])
        sync(device)
        t0 = time.perf_counter()
        cache = [None] * c["layers"]
        logits = m.forward(ids, 0, cache)
        sync(device)
        t1 = time.perf_counter()
        tok = logits.argmax(-1)
        for i in range(decode):
            logits = m.forward(tok, prompt + i, cache)
            tok = logits.argmax(-1)
        sync(device)
        t2 = time.perf_counter()
    print(f"hf shape={name} device={device.type} dtype={str(dtype).split('.')[-1]} prompt={prompt} "
          f"prefill_tok/s={prompt / (t1 - t0):.1f} decode_tok/s={decode / (t2 - t1):.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="all")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, a.dtype)
    for name in SHAPES if a.shape == "all" else [a.shape]:
        run(name, a.prompt, a.decode, dtype, device)


if __name__ == "__main__":
    main()
