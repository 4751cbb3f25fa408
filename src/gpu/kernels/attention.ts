import { groupsFor, type GpuContext } from "../context.ts";
import { kernelBindings, memoKernel, type UniformValues } from "../kernel-source.ts";
import type { GpuTuning } from "../tuning.ts";

/**
 * Causal grouped-query attention, flash style: one thread per query (forward, dQ) or per key (dK/dV),
 * a workgroup shares tiles of the other side through workgroup memory, and the softmax runs online so no
 * [T, T] score matrix exists. The forward keeps only the row log-sum-exp for the backward.
 * Visibility (src/model/config.ts): key j is visible to query i iff j == i or (j < i and mask[j] == 1).
 * q/out/dq: [B*T, H*hd]; k/v/dk/dv: [B*T, KV*hd]; mask, positions: [B*T] u32; lse, D: [B, H, T].
 */

export interface AttentionShape {
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

const UNIFORMS = { T: "u32", H: "u32", KV: "u32", scale: "f32" } as const;

const FWD = kernelBindings({
  uniforms: UNIFORMS,
  buffers: { q: "read f32", k: "read f32", v: "read f32", mask: "read u32", out: "read_write f32", lse: "read_write f32" },
});
const BWD_Q = kernelBindings({
  uniforms: UNIFORMS,
  buffers: {
    q: "read f32",
    k: "read f32",
    v: "read f32",
    mask: "read u32",
    out: "read f32",
    dout: "read f32",
    lse: "read f32",
    dq: "read_write f32",
    D: "read_write f32",
  },
});
const BWD_KV = kernelBindings({
  uniforms: UNIFORMS,
  buffers: {
    q: "read f32",
    k: "read f32",
    v: "read f32",
    mask: "read u32",
    dout: "read f32",
    lse: "read f32",
    D: "read f32",
    dk: "read_write f32",
    dv: "read_write f32",
  },
});

/** Rows of the shared side per tile, sized so `perRowFloats * rows` f32 fit in workgroup memory. */
function tileRows(t: GpuTuning, perRowFloats: number): number {
  return Math.max(1, Math.min(t.attentionQueries, Math.floor(t.workgroupStorageBytes / (perRowFloats * 4))));
}

function params(s: AttentionShape): UniformValues<typeof UNIFORMS> {
  return { T: s.seq, H: s.heads, KV: s.kvHeads, scale: 1 / Math.sqrt(s.headDim) };
}

const VISIBLE = `fn visible(maskBase: u32, i: u32, j: u32) -> bool { return j == i || (j < i && mask[maskBase + j] != 0u); }`;

/**
 * WGSL of a pass with one thread per query that walks the keys it sees (the forward and the dQ pass): a
 * workgroup of Q queries of one head loads tiles of KT keys of its kv head into workgroup memory (Ks, Vs).
 * `start` runs once with the query's indices (b, h, i, kvh, valid, qo), `perKey` for each key j visible
 * to a valid query (its K and V rows at Ks[base..], Vs[base..]), `finish` once at the end.
 */
function queryPassWgsl(Q: number, HD: number, KT: number, start: string, perKey: string, finish: string): string {
  return `
const Q = ${Q}u; const HD = ${HD}u; const KT = ${KT}u;
var<workgroup> Ks: array<f32, ${KT * HD}>;
var<workgroup> Vs: array<f32, ${KT * HD}>;
fn loadKeyTile(b: u32, kvh: u32, j0: u32, lid: u32) {
  for (var e = lid; e < KT * HD; e += Q) {
    let jj = j0 + e / HD;
    if (jj < P.T) {
      let ko = ((b * P.T + jj) * P.KV + kvh) * HD + e % HD;
      Ks[e] = k[ko];
      Vs[e] = v[ko];
    }
  }
}
${VISIBLE}
@compute @workgroup_size(${Q})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let b = wg.z; let h = wg.y; let i = wg.x * Q + lid;
  let kvh = h / (P.H / P.KV);
  let valid = i < P.T;
  let qo = ((b * P.T + i) * P.H + h) * HD;
${start}
  let lastKey = min(wg.x * Q + Q, P.T);
  for (var j0 = 0u; j0 < lastKey; j0 += KT) {
    loadKeyTile(b, kvh, j0, lid);
    workgroupBarrier();
    if (valid) {
      let jEnd = min(j0 + KT, i + 1u);
      for (var j = j0; j < jEnd; j++) {
        if (!visible(b * P.T, i, j)) { continue; }
        let base = (j - j0) * HD;
${perKey}
      }
    }
    workgroupBarrier();
  }
${finish}
}
`;
}

export function attention(
  ctx: GpuContext,
  q: GPUBuffer,
  k: GPUBuffer,
  v: GPUBuffer,
  mask: GPUBuffer,
  out: GPUBuffer,
  lse: GPUBuffer,
  s: AttentionShape,
): void {
  const Q = ctx.tuning.attentionQueries;
  const HD = s.headDim;
  const KT = tileRows(ctx.tuning, 2 * HD);
  const kernel = memoKernel(ctx.tuning, `attn_fwd_${HD}`, FWD, () =>
    queryPassWgsl(
      Q,
      HD,
      KT,
      `  var qv: array<f32, ${HD}>;
  var acc: array<f32, ${HD}>;
  if (valid) { for (var d = 0u; d < HD; d++) { qv[d] = q[qo + d]; } }
  var m = -3.0e38;
  var l = 0.0;`,
      `        var sc = 0.0;
        for (var d = 0u; d < HD; d++) { sc = fma(qv[d], Ks[base + d], sc); }
        sc *= P.scale;
        let mNew = max(m, sc);
        let corr = exp(m - mNew);
        let p = exp(sc - mNew);
        l = l * corr + p;
        for (var d = 0u; d < HD; d++) { acc[d] = fma(p, Vs[base + d], acc[d] * corr); }
        m = mNew;`,
      `  if (valid) {
    for (var d = 0u; d < HD; d++) { out[qo + d] = acc[d] / l; }
    lse[(b * P.H + h) * P.T + i] = m + log(l);
  }`,
    ),
  );
  ctx.dispatch(kernel, params(s), { q, k, v, mask, out, lse }, [groupsFor(s.seq, Q), s.heads, s.batch]);
}

/** dq for each query, and D_i = dot(dO_i, O_i) that the dK/dV pass needs. */
function attentionBackwardQuery(ctx: GpuContext, b: AttentionBuffers, s: AttentionShape): void {
  const Q = ctx.tuning.attentionQueries;
  const HD = s.headDim;
  const KT = tileRows(ctx.tuning, 2 * HD);
  const kernel = memoKernel(ctx.tuning, `attn_bwd_q_${HD}`, BWD_Q, () =>
    queryPassWgsl(
      Q,
      HD,
      KT,
      `  let li = (b * P.H + h) * P.T + i;
  var qv: array<f32, ${HD}>;
  var dov: array<f32, ${HD}>;
  var acc: array<f32, ${HD}>;
  var Di = 0.0;
  var L = 0.0;
  if (valid) {
    for (var d = 0u; d < HD; d++) { qv[d] = q[qo + d]; dov[d] = dout[qo + d]; Di = fma(dov[d], out[qo + d], Di); }
    L = lse[li];
  }`,
      `        var sc = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < HD; d++) { sc = fma(qv[d], Ks[base + d], sc); dp = fma(dov[d], Vs[base + d], dp); }
        let p = exp(sc * P.scale - L);
        let ds = p * (dp - Di);
        for (var d = 0u; d < HD; d++) { acc[d] = fma(ds, Ks[base + d], acc[d]); }`,
      `  if (valid) {
    for (var d = 0u; d < HD; d++) { dq[qo + d] = acc[d] * P.scale; }
    D[li] = Di;
  }`,
    ),
  );
  ctx.dispatch(kernel, params(s), { q: b.q, k: b.k, v: b.v, mask: b.mask, out: b.out, dout: b.dout, lse: b.lse, dq: b.dq, D: b.D }, [
    groupsFor(s.seq, Q),
    s.heads,
    s.batch,
  ]);
}

/** dk, dv for each key: sums over the query heads of its group and the queries that see it. */
function attentionBackwardKeyValue(ctx: GpuContext, b: AttentionBuffers, s: AttentionShape): void {
  const Q = ctx.tuning.attentionQueries;
  const HD = s.headDim;
  const QT = tileRows(ctx.tuning, 2 * HD + 2);
  const kernel = memoKernel(
    ctx.tuning,
    `attn_bwd_kv_${HD}`,
    BWD_KV,
    () => `
const Q = ${Q}u; const HD = ${HD}u; const QT = ${QT}u;
var<workgroup> Qs: array<f32, ${QT * HD}>;
var<workgroup> dOs: array<f32, ${QT * HD}>;
var<workgroup> Ls: array<f32, ${QT}>;
var<workgroup> Ds: array<f32, ${QT}>;
${VISIBLE}
@compute @workgroup_size(${Q})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let b = wg.z; let kvh = wg.y; let j = wg.x * Q + lid;
  let grp = P.H / P.KV;
  let valid = j < P.T;
  let ko = ((b * P.T + j) * P.KV + kvh) * HD;
  var kv: array<f32, ${HD}>;
  var vv: array<f32, ${HD}>;
  var dkAcc: array<f32, ${HD}>;
  var dvAcc: array<f32, ${HD}>;
  if (valid) { for (var d = 0u; d < HD; d++) { kv[d] = k[ko + d]; vv[d] = v[ko + d]; } }
  let firstQuery = wg.x * Q;
  for (var hh = 0u; hh < grp; hh++) {
    let h = kvh * grp + hh;
    for (var i0 = firstQuery; i0 < P.T; i0 += QT) {
      for (var e = lid; e < QT * HD; e += Q) {
        let ii = i0 + e / HD;
        if (ii < P.T) {
          let qo = ((b * P.T + ii) * P.H + h) * HD + e % HD;
          Qs[e] = q[qo];
          dOs[e] = dout[qo];
        }
      }
      for (var e = lid; e < QT; e += Q) {
        if (i0 + e < P.T) { Ls[e] = lse[(b * P.H + h) * P.T + i0 + e]; Ds[e] = D[(b * P.H + h) * P.T + i0 + e]; }
      }
      workgroupBarrier();
      if (valid) {
        let iEnd = min(i0 + QT, P.T);
        for (var i = max(i0, j); i < iEnd; i++) {
          if (!visible(b * P.T, i, j)) { continue; }
          let base = (i - i0) * HD;
          var sc = 0.0;
          var dp = 0.0;
          for (var d = 0u; d < HD; d++) { sc = fma(Qs[base + d], kv[d], sc); dp = fma(dOs[base + d], vv[d], dp); }
          let p = exp(sc * P.scale - Ls[i - i0]);
          let ds = p * (dp - Ds[i - i0]);
          for (var d = 0u; d < HD; d++) {
            dvAcc[d] = fma(p, dOs[base + d], dvAcc[d]);
            dkAcc[d] = fma(ds, Qs[base + d], dkAcc[d]);
          }
        }
      }
      workgroupBarrier();
    }
  }
  if (valid) {
    for (var d = 0u; d < HD; d++) { dk[ko + d] = dkAcc[d] * P.scale; dv[ko + d] = dvAcc[d]; }
  }
}
`,
  );
  ctx.dispatch(kernel, params(s), { q: b.q, k: b.k, v: b.v, mask: b.mask, dout: b.dout, lse: b.lse, D: b.D, dk: b.dk, dv: b.dv }, [
    groupsFor(s.seq, Q),
    s.kvHeads,
    s.batch,
  ]);
}

/** Forward inputs/outputs, the upstream gradient, the gradient outputs, and a [B,H,T] scratch for D. */
export interface AttentionBuffers {
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  mask: GPUBuffer;
  out: GPUBuffer;
  lse: GPUBuffer;
  dout: GPUBuffer;
  dq: GPUBuffer;
  dk: GPUBuffer;
  dv: GPUBuffer;
  D: GPUBuffer;
}

/** Writes (not accumulates) dq, dk, dv. */
export function attentionBackward(ctx: GpuContext, b: AttentionBuffers, s: AttentionShape): void {
  attentionBackwardQuery(ctx, b, s);
  attentionBackwardKeyValue(ctx, b, s);
}
