import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { compileInMemory } from "../wasm/asc-compile.ts";
import { CPU_KERNELS_SHARED_WASM_SHA256, CPU_KERNELS_WASM_SHA256 } from "../../src/cpu/kernels/kernels.wasm.ts";
import { cpuKernelBytes, GEMM_FORM, instantiateCpuCore } from "../../src/cpu/kernels/index.ts";

/** The variants assembly/cpu/build.mjs builds (VARIANTS there): asc arguments and the committed sha256. */
const VARIANTS: [string, string[], string][] = [
  ["single", [], CPU_KERNELS_WASM_SHA256],
  ["shared", ["--sharedMemory", "--maximumMemory", "65536", "--enable", "threads"], CPU_KERNELS_SHARED_WASM_SHA256],
];

const root = fileURLToPath(new URL("../../", import.meta.url));

describe("the shipped CPU kernels module", () => {
  it.each(VARIANTS)(
    "%s: is exactly what assembly/cpu/ compiles to today (run `node assembly/cpu/build.mjs` after editing it)",
    async (name, extra, committed) => {
      const config = JSON.parse(readFileSync(`${root}assembly/cpu/asconfig.json`, "utf8"));
      const fresh = await compileInMemory(
        ["assembly/cpu/index.ts", "--config", "assembly/cpu/asconfig.json", "--target", "release", ...extra],
        "cpu-kernels.wasm",
      );
      expect(config.targets.release.optimizeLevel).toBe(3);
      const sha = createHash("sha256").update(fresh).digest("hex");
      expect(sha).toBe(committed);
      expect(
        createHash("sha256")
          .update(cpuKernelBytes(name === "shared"))
          .digest("hex"),
      ).toBe(committed);
    },
    60_000,
  );

  it("imports only its memory (shared in the threads variant) and uses SIMD", () => {
    for (const shared of [false, true]) {
      const mod = new WebAssembly.Module(cpuKernelBytes(shared));
      expect(WebAssembly.Module.imports(mod)).toEqual([{ module: "env", name: "memory", kind: "memory" }]);
    }
    const single = new WebAssembly.Memory({ initial: 1 });
    expect(() => new WebAssembly.Instance(new WebAssembly.Module(cpuKernelBytes(true)), { env: { memory: single } })).toThrow();
    // f32x4.mul is 0xfd 0xe6 0x01 (LEB128 opcode 230)
    const bytes = cpuKernelBytes();
    let mul = 0;
    for (let i = 0; i + 2 < bytes.length; i++) if (bytes[i] === 0xfd && bytes[i + 1] === 0xe6 && bytes[i + 2] === 0x01) mul++;
    expect(mul).toBeGreaterThan(8);
  });

  it("the TS GEMM form codes agree with the module's exported constants", () => {
    const ex = instantiateCpuCore().exports;
    expect([ex.FORM_AB.value, ex.FORM_ABT.value, ex.FORM_ATB.value]).toEqual([GEMM_FORM.AB, GEMM_FORM.ABT, GEMM_FORM.ATB]);
  });
});
