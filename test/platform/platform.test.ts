/**
 * The platform port (src/platform/): each runtime is detected as itself and reads its arguments,
 * environment, memory and system snapshot; and the one logger accepts both spellings of "warning".
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { captureLogs, consoleLogger, getLogger, parseLogLevel, setLogLevel } from "../../src/platform/log.ts";
import { lastJsonLine, RUNTIMES, runOnRuntime } from "../runtimes.ts";

describe.each(RUNTIMES)("the platform on %s", (runtime) => {
  it("is detected once as this runtime and reads arguments, environment, memory and the snapshot", async () => {
    const r = await runOnRuntime(runtime, "test/platform/print-platform.ts", {
      args: ["--flag", "x"],
      env: { AGL_PLATFORM_PROBE: "yes" },
      timeout: 120_000,
    });
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.code).toBe(3);
    expect(lastJsonLine(r.stdout)).toEqual({
      runtime,
      args: ["--flag", "x"],
      env: "yes",
      memory: true,
      hostKnown: true,
      turned: true,
    });
  }, 150_000);
});

describe("the one logger (src/platform/log.ts)", () => {
  afterEach(() => {
    setLogLevel("warning");
    vi.restoreAllMocks();
  });

  it("accepts warn and warning in any case, and rejects other levels naming the option", () => {
    expect(["warn", "WARN", "warning", "WARNING"].map((l) => parseLogLevel(l))).toEqual(["warning", "warning", "warning", "warning"]);
    expect(parseLogLevel(" Debug ")).toBe("debug");
    expect(() => parseLogLevel("loud")).toThrow(/--log-level must be one of debug, info, warning, error/);
  });

  it("sends warn() and warning() of a named logger as one level, and keeps upstream's console line", () => {
    const logs = captureLogs();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const log = getLogger("agentlightning.test");
    log.warn("first");
    log.warning("second");
    setLogLevel("error");
    log.warn("hidden from the console");
    logs.stop();
    expect(logs.records.map((r) => [r.level, r.message])).toEqual([
      ["warning", "first"],
      ["warning", "second"],
      ["warning", "hidden from the console"],
    ]);
    expect(warn.mock.calls).toEqual([["[WARN] agentlightning.test: first"], ["[WARN] agentlightning.test: second"]]);
  });

  it("writes the store server's lines from its own level, not to the named loggers' sinks", () => {
    const logs = captureLogs();
    const out = vi.spyOn(console, "log").mockImplementation(() => {});
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const log = consoleLogger("warn");
    log.info("not shown");
    log.warning("shown");
    logs.stop();
    expect(out).not.toHaveBeenCalled();
    expect(warn.mock.calls).toEqual([["[agl store] WARNING shown"]]);
    expect(logs.records).toEqual([]);
  });
});
