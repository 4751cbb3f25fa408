/** `coalesced`: calls made in one tick are issued together in one later macrotask, each with its own outcome. */
import { describe, expect, it } from "vitest";
import { coalesced, coalescedStore } from "../../src/server/coalesce.ts";

describe("coalesced", () => {
  it("issues the calls of one tick together, in order, in a later macrotask", async () => {
    const issued: { arg: number; tick: number }[] = [];
    let tick = 0;
    const f = coalesced(async (x: number) => (issued.push({ arg: x, tick }), x * 2));
    const a = [f(1), f(2), f(3)];
    expect(issued).toEqual([]); // nothing before the macrotask
    tick = 1;
    expect(await Promise.all(a)).toEqual([2, 4, 6]);
    expect(issued).toEqual([1, 2, 3].map((arg) => ({ arg, tick: 1 })));
    tick = 2;
    expect(await f(4)).toBe(8);
    expect(issued.at(-1)).toEqual({ arg: 4, tick: 2 });
  });

  it("gives each caller its own error, whether thrown or rejected", async () => {
    const f = coalesced((x: number) => {
      if (x === 1) throw new Error("sync one");
      return x === 2 ? Promise.reject(new Error("async two")) : Promise.resolve(x);
    });
    const out = await Promise.allSettled([f(1), f(2), f(3)]);
    expect(out.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as Error).message))).toEqual(["sync one", "async two", 3]);
  });
});

describe("coalescedStore", () => {
  it("issues every method call of one tick together, in arrival order, keeping results and properties", async () => {
    const log: string[] = [];
    const store = {
      name: "s",
      async a(x: number) {
        log.push(`a${x}`);
        return x;
      },
      async b(x: number) {
        log.push(`b${x}`);
        if (x < 0) throw new Error("negative");
        return -x;
      },
    };
    const c = coalescedStore(store);
    expect(c.name).toBe("s");
    const calls = [c.a(1), c.b(2), c.a(3), c.b(-1)];
    expect(log).toEqual([]);
    const out = await Promise.allSettled(calls);
    expect(log).toEqual(["a1", "b2", "a3", "b-1"]);
    expect(out.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as Error).message))).toEqual([1, -2, 3, "negative"]);
  });
});
