/**
 * bench/_profile.ts: bench/calc-x.ts splits the main thread's time among the pipeline's parts from a V8 CPU
 * profile; the split must add up to the profiled time and give each sample to the first part on its stack.
 */
import { describe, expect, it } from "vitest";
import { type CpuProfile, type Part, splitProfile, startProfile } from "../../bench/_profile.ts";

const file = (path: string) => `file:///repo/${path}`;

/** (root) -> handler (policy server) -> getNext (store) -> stringify (native); (idle); (garbage collector). */
const profile: CpuProfile = {
  nodes: [
    { id: 1, callFrame: { functionName: "(root)", url: "" }, children: [2, 5, 6] },
    { id: 2, callFrame: { functionName: "handler", url: file("src/proxy/policy-server.ts") }, children: [3] },
    { id: 3, callFrame: { functionName: "getNext", url: file("src/store/memory.ts") }, children: [4] },
    { id: 4, callFrame: { functionName: "stringify", url: "" } },
    { id: 5, callFrame: { functionName: "(idle)", url: "" } },
    { id: 6, callFrame: { functionName: "(garbage collector)", url: "" } },
  ],
  startTime: 1000,
  endTime: 1200,
  // at 1010, 1030, 1060, 1100, 1150 µs; each lasts until the next (the first from startTime, the last to endTime)
  samples: [4, 2, 5, 6, 4],
  timeDeltas: [10, 20, 30, 40, 50],
};

const part = (name: string, test: (url: string, fn: string) => boolean): Part => ({
  name,
  matches: (f) => test(f.url, f.functionName),
});
const store = part("store", (url) => url.includes("/src/store/"));
const server = part("server", (url) => url.includes("/src/proxy/"));
const idle = part("idle", (_, fn) => fn === "(idle)");

const micros = (split: { name: string; seconds: number }[]) => Object.fromEntries(split.map((p) => [p.name, Math.round(p.seconds * 1e6)]));

describe("splitProfile", () => {
  it("gives each sample's time to the first part whose code is anywhere on its stack, the rest to `other`", () => {
    expect(micros(splitProfile(profile, [store, server, idle]))).toEqual({ store: 80, server: 30, idle: 40, other: 50 });
  });

  it("follows the parts' order: a part listed first takes the samples of the code it calls", () => {
    expect(micros(splitProfile(profile, [server, store, idle]))).toEqual({ server: 110, store: 0, idle: 40, other: 50 });
  });

  it("adds up to the profile's span whatever the parts", () => {
    for (const parts of [[], [idle], [store, server, idle]]) {
      const sum = splitProfile(profile, parts).reduce((a, p) => a + p.seconds, 0);
      expect(Math.round(sum * 1e6)).toBe(profile.endTime - profile.startTime);
    }
  });

  it("counts only the time inside the windows, a sample cut at a window's edge in part", () => {
    // 1020-1030 of the first store sample, the server sample, 1060-1070 of the idle one; 1150-1160 of the last store sample
    const windows = [
      [1020, 1070],
      [1150, 1160],
    ] as const;
    expect(micros(splitProfile(profile, [store, server, idle], { windows }))).toEqual({ store: 20, server: 30, idle: 10, other: 0 });
  });

  it("finds a function of this file in a real profile of this thread", async () => {
    const stop = await startProfile(200);
    const spinUntil = (t: number) => {
      let x = 0;
      while (performance.now() < t) x += Math.sqrt(x + 1);
      return x;
    };
    spinUntil(performance.now() + 60);
    const { profile: real } = await stop();
    const split = splitProfile(real, [part("spin", (url, fn) => url.endsWith("profile-split.test.ts") && fn === "spinUntil")]);
    expect(split[0]!.seconds).toBeGreaterThan(0);
    expect(Math.round(split.reduce((a, p) => a + p.seconds, 0) * 1e6)).toBe(Math.round(real.endTime - real.startTime));
  });
});
