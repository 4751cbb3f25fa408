import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { bindingBlock, kernelBindings, memoKernel, storageEntries } from "../../src/gpu/kernel-source.ts";
import { noGpu } from "./gpu-env.ts";

/** A kernel's bindings are declared once by name (src/gpu/README.md, "Kernels"): the WGSL block
 * and the dispatch's bind group both come from the declaration. */

const DECL = kernelBindings({
  uniforms: { rows: "u32", eps: "f32" },
  buffers: { ids: "read u32", x: "read f32", y: "read_write f32" },
});

const COPY = kernelBindings({ uniforms: { n: "u32" }, buffers: { src: "read f32", dst: "read_write f32" } });
const COPY_WGSL = `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u) {
  if (g.x < P.n) { dst[g.x] = src[g.x]; }
}
`;

/** GPUBuffer stand-ins: storageEntries only passes them through. */
const buffer = (label: string) => ({ label }) as unknown as GPUBuffer;

describe("kernel bindings", () => {
  it("binds the uniforms at 0 and the buffers at 1..n in declaration order, with their access and element type", () => {
    const block = bindingBlock(DECL);
    const storage = [...block.matchAll(/@group\(0\) @binding\((\d+)\) var<storage, (\w+)> (\w+): array<(\w+)>;/g)];
    expect(storage.map(([, binding, access, name, element]) => [Number(binding), name, `${access} ${element}`])).toEqual(
      Object.entries(DECL.buffers).map(([name, declared], i) => [i + 1, name, declared]),
    );
    expect(block).toContain("@group(0) @binding(0) var<uniform> P: Params;");
    expect(block).toContain("struct Params {\n  rows: u32,\n  eps: f32,\n};");
    expect(block.match(/@binding/g)).toHaveLength(1 + Object.keys(DECL.buffers).length);
  });

  it("prefixes a kernel's WGSL with its binding block, built once per tuning and key", () => {
    const tuning = { elementwise: 64 } as GpuContext["tuning"];
    const kernel = memoKernel(tuning, "copy", COPY, () => COPY_WGSL);
    expect(kernel.code).toBe(bindingBlock(COPY) + COPY_WGSL);
    expect(memoKernel(tuning, "copy", COPY, () => "not rebuilt")).toBe(kernel);
  });

  it("no kernel numbers a binding by hand", () => {
    const root = join(import.meta.dirname, "../..");
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
    const handNumbered = files(join(root, "src/gpu"))
      .filter((f) => f.endsWith(".ts") && !f.endsWith("kernel-source.ts") && readFileSync(f, "utf8").includes("@binding("))
      .map((f) => relative(root, f));
    expect(handNumbered).toEqual([]);
  });

  it("binds a dispatch's buffers by name, whatever order it lists them in", () => {
    const kernel = memoKernel({} as GpuContext["tuning"], "decl", DECL, () => "");
    const [ids, x, y] = [buffer("ids"), buffer("x"), buffer("y")];
    expect(storageEntries(kernel, { y, ids, x })).toEqual([
      { binding: 1, resource: { buffer: ids } },
      { binding: 2, resource: { buffer: x } },
      { binding: 3, resource: { buffer: y } },
    ]);
  });

  it("refuses a dispatch that misses a declared buffer or names another, saying which", () => {
    const kernel = memoKernel({} as GpuContext["tuning"], "decl", DECL, () => "");
    const b = buffer("b");
    expect(() => storageEntries(kernel, { ids: b, x: b })).toThrow("decl: buffers missing y (declared: ids, x, y)");
    expect(() => storageEntries(kernel, { ids: b, x: b, y: b, z: b })).toThrow("decl: buffers not declared z");
    expect(() => storageEntries(kernel, { ids: b, X: b, y: b })).toThrow("decl: buffers missing x; not declared X");
  });
});

describe.skipIf(noGpu)("kernel bindings on a device", () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it("runs a declared kernel with named buffers, and refuses (types and at run time) a wrong buffer list", async () => {
    const kernel = memoKernel(ctx.tuning, "test_copy", COPY, () => COPY_WGSL);
    const src = ctx.upload(new Float32Array([1, 2, 3, 4, 5]));
    const dst = ctx.alloc(5);
    ctx.dispatch(kernel, { n: 5 }, { dst, src }, [1]);
    expect(Array.from(await ctx.read(dst))).toEqual([1, 2, 3, 4, 5]);
    // @ts-expect-error: dst is missing
    expect(() => ctx.dispatch(kernel, { n: 5 }, { src }, [1])).toThrow("test_copy: buffers missing dst");
    // @ts-expect-error: out is not declared
    expect(() => ctx.dispatch(kernel, { n: 5 }, { src, dst, out: dst }, [1])).toThrow("test_copy: buffers not declared out");
    // @ts-expect-error: the uniform n is missing
    expect(() => ctx.dispatch(kernel, {}, { src, dst }, [1])).toThrow("uniform n missing");
    await ctx.drain();
  });
});
