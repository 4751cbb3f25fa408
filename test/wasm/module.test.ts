import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { compileInMemory } from "./asc-compile.ts";
import { KERNELS_WASM_SHA256 } from "../../src/wasm/kernels.wasm.ts";
import { kernelBytes, loadWasmCoreSync } from "../../src/wasm/index.ts";
import { GROUP_ESTIMATOR, GROUP_OK, KL_KIND_CODE, TRACE_FLAG, TRACE_OPT, WHITEN_STATUS } from "../../src/wasm/exports.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));

describe("the shipped Wasm module", () => {
  it("is exactly what assembly/ compiles to today (run `npm run build:wasm` after editing assembly/)", async () => {
    const config = JSON.parse(readFileSync(`${root}asconfig.json`, "utf8"));
    const fresh = await compileInMemory(["assembly/index.ts", "--config", "asconfig.json", "--target", "release"], "kernels.wasm");
    expect(config.targets.release.optimizeLevel).toBe(3);
    const sha = createHash("sha256").update(fresh).digest("hex");
    expect(sha).toBe(KERNELS_WASM_SHA256);
    expect(createHash("sha256").update(kernelBytes()).digest("hex")).toBe(KERNELS_WASM_SHA256);
  }, 60_000);

  it("uses SIMD instructions and imports nothing", () => {
    const mod = new WebAssembly.Module(kernelBytes());
    expect(WebAssembly.Module.imports(mod)).toEqual([]);
    // 0xfd is the SIMD opcode prefix; v128.load (0xfd 0x00) and f64x2.promote_low_f32x4 (0xfd 0x5f) must be there
    const bytes = kernelBytes();
    let promote = 0;
    for (let i = 0; i + 1 < bytes.length; i++) if (bytes[i] === 0xfd && bytes[i + 1] === 0x5f) promote++;
    expect(promote).toBeGreaterThan(0);
  });

  it("the TS constant tables agree with the module's exported constants", () => {
    const ex = loadWasmCoreSync().exports as unknown as Record<string, WebAssembly.Global>;
    const pairs: [string, number][] = [
      ["WHITEN_OK", WHITEN_STATUS.OK],
      ["WHITEN_EMPTY_MASK", WHITEN_STATUS.EMPTY_MASK],
      ["WHITEN_SINGLE_TOKEN", WHITEN_STATUS.SINGLE_TOKEN],
      ["EST_GRPO", GROUP_ESTIMATOR.GRPO],
      ["EST_GRPO_NO_STD", GROUP_ESTIMATOR.GRPO_NO_STD],
      ["EST_RLOO", GROUP_ESTIMATOR.RLOO],
      ["EST_RPP_BASELINE", GROUP_ESTIMATOR.RPP_BASELINE],
      ["EST_OPO", GROUP_ESTIMATOR.OPO],
      ["EST_GPG", GROUP_ESTIMATOR.GPG],
      ["EST_PASSK", GROUP_ESTIMATOR.PASSK],
      ["EST_PASSK_NO_STD", GROUP_ESTIMATOR.PASSK_NO_STD],
      ["GROUP_OK", GROUP_OK],
      ["KL_K1", KL_KIND_CODE.k1],
      ["KL_ABS", KL_KIND_CODE.abs],
      ["KL_K2", KL_KIND_CODE.k2],
      ["KL_K3", KL_KIND_CODE.k3],
      ["F_LLM", TRACE_FLAG.LLM],
      ["F_REWARD_SPAN", TRACE_FLAG.REWARD_SPAN],
      ["F_HAS_AGENT", TRACE_FLAG.HAS_AGENT],
      ["F_AGENT_OK", TRACE_FLAG.AGENT_OK],
      ["F_EMPTY_TOKENS", TRACE_FLAG.EMPTY_TOKENS],
      ["O_REPAIR", TRACE_OPT.REPAIR],
      ["O_AGENT_FILTER", TRACE_OPT.AGENT_FILTER],
      ["O_EXCLUDE_IN_REWARD", TRACE_OPT.EXCLUDE_IN_REWARD],
      ["O_DEDUP", TRACE_OPT.DEDUP],
      ["O_SKIP_EMPTY", TRACE_OPT.SKIP_EMPTY],
      ["O_FIRST_SIBLING", TRACE_OPT.FIRST_SIBLING],
    ];
    for (const [name, value] of pairs) expect(ex[name].value, name).toBe(value);
  });
});
