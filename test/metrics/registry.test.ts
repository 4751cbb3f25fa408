/**
 * The metrics API: registration as upstream's backends do it, the Prometheus text (read back by a strict
 * parser), what a push carries and how a server adds it, and the console backend's lines.
 */
import { describe, expect, it } from "vitest";
import {
  ConsoleMetricsBackend,
  MetricsRegistry,
  MultiMetricsBackend,
  PrometheusMetricsBackend,
  processMetrics,
} from "../../src/metrics/index.ts";
import { ConflictError, ValidationError } from "../../src/types/index.ts";
import { parsePrometheusText, sampleValue } from "./prometheus-text.ts";

describe("the Prometheus text", () => {
  it("exposes counters, gauges and histograms under upstream's names, with their labels", () => {
    const r = new MetricsRegistry();
    r.registerCounter("agent.tool.calls", ["tool", "status"], { help: "Tool calls.\nBy tool." });
    r.registerCounter("minimal_requests_total", ["operation"]);
    r.registerGauge("queue.size");
    r.registerHistogram("minimal_latency_seconds", ["operation"], [0.01, 0.05, 0.1]);
    r.incCounter("agent.tool.calls", 1, { tool: 'say "hi"\\now', status: "ok" });
    r.incCounter("agent.tool.calls", 2.5, { tool: 'say "hi"\\now', status: "ok" });
    r.incCounter("agent.tool.calls", undefined, { tool: "calc", status: "error\nline" });
    r.incCounter("minimal_requests_total", 3, { operation: "search" });
    r.setGauge("queue.size", 7);
    r.setGauge("queue.size", 4);
    for (const v of [0.005, 0.01, 0.07, 0.2]) r.observeHistogram("minimal_latency_seconds", v, { operation: "search" });

    const text = r.render();
    const f = parsePrometheusText(text);
    expect(f.get("agent_tool_calls_total")?.type).toBe("counter");
    expect(f.get("agent_tool_calls_total")?.help).toBe("Tool calls.\nBy tool.");
    expect(sampleValue(f, "agent_tool_calls_total", { tool: 'say "hi"\\now', status: "ok" })).toBe(3.5);
    expect(sampleValue(f, "agent_tool_calls_total", { tool: "calc", status: "error\nline" })).toBe(1);
    // A name that already ends in _total is not given a second one (prometheus_client's rule).
    expect(sampleValue(f, "minimal_requests_total", { operation: "search" })).toBe(3);
    expect(f.get("queue_size")?.type).toBe("gauge");
    expect(sampleValue(f, "queue_size")).toBe(4);
    const le = (b: string) => sampleValue(f, "minimal_latency_seconds_bucket", { operation: "search", le: b });
    expect([le("0.01"), le("0.05"), le("0.1"), le("+Inf")]).toEqual([2, 2, 3, 4]);
    expect(sampleValue(f, "minimal_latency_seconds_count", { operation: "search" })).toBe(4);
    expect(sampleValue(f, "minimal_latency_seconds_sum", { operation: "search" })).toBeCloseTo(0.285);
  });

  it("has prometheus_client's default buckets when none are given", () => {
    const r = new MetricsRegistry();
    r.registerHistogram("h");
    r.observeHistogram("h", 3);
    const f = parsePrometheusText(r.render());
    expect(
      f
        .get("h")!
        .samples.filter((s) => s.name === "h_bucket")
        .map((s) => s.labels.le),
    ).toEqual(["0.005", "0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1", "2.5", "5", "7.5", "10", "+Inf"]);
  });

  it("the test's parser refuses what Prometheus would", () => {
    expect(() => parsePrometheusText('# TYPE a counter\na{x="1"} 1\na{x="1"} 2\n')).toThrow(/twice/);
    expect(() => parsePrometheusText("b 1\n")).toThrow(/before any TYPE/);
    expect(() => parsePrometheusText('# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n')).toThrow(
      /cumulative/,
    );
    expect(() => parsePrometheusText('# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n')).toThrow(/\+Inf/);
    expect(() => parsePrometheusText("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n")).toThrow(/again/);
    expect(() => parsePrometheusText('# TYPE a gauge\na{x="1} 1\n')).toThrow(/unterminated|expected/);
  });
});

describe("registration and writes, as upstream's backends check them", () => {
  it("registering again with the same definition is a no-op; with another one, a conflict", () => {
    const r = new MetricsRegistry();
    r.registerCounter("c", ["a"]);
    r.incCounter("c", 1, { a: "x" });
    r.registerCounter("c", ["a"]);
    expect(r.read("c")).toEqual([{ labels: { a: "x" }, value: 1, count: null }]);
    expect(() => r.registerCounter("c", ["b"])).toThrow(ConflictError);
    expect(() => r.registerHistogram("c", ["a"])).toThrow(ConflictError);
    r.registerHistogram("h", [], [1, 2]);
    expect(() => r.registerHistogram("h", [], [1, 3])).toThrow(/buckets \[1, 2\]/);
  });

  it("two names that Prometheus would write alike are refused", () => {
    const r = new MetricsRegistry();
    r.registerGauge("a.b");
    expect(() => r.registerGauge("a_b")).toThrow(/'a_b' would write 'a_b', which 'a.b' already writes/);
    r.registerCounter("jobs");
    expect(() => r.registerGauge("jobs_total")).toThrow(ConflictError);
    r.registerHistogram("lat");
    expect(() => r.registerGauge("lat_count")).toThrow(ConflictError);
  });

  it("bad names, labels and values are ValidationErrors that name the field", () => {
    const r = new MetricsRegistry();
    expect(() => r.registerCounter("1x")).toThrow(ValidationError);
    expect(() => r.registerCounter("x", ["__reserved"])).toThrow(/not a Prometheus label name/);
    expect(() => r.registerHistogram("h", ["le"])).toThrow(/'le'/);
    expect(() => r.registerHistogram("h2", [], [2, 1])).toThrow(/increasing/);
    r.registerCounter("c", ["tool"]);
    const issue = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        expect(e).toBeInstanceOf(ValidationError);
        return [(e as ValidationError).message, (e as ValidationError).issues[0]?.path];
      }
      throw new Error("did not throw");
    };
    expect(issue(() => r.incCounter("c"))).toEqual(["counter 'c' needs label 'tool'", ["labels", "tool"]]);
    expect(issue(() => r.incCounter("c", 1, { tool: "x", extra: "y" }))).toEqual([
      "counter 'c' has no label 'extra' (its labels: [tool])",
      ["labels", "extra"],
    ]);
    expect(issue(() => r.incCounter("c", 1, { tool: 3 as unknown as string }))[0]).toMatch(/must be a string, got number/);
    expect(issue(() => r.incCounter("c", -1, { tool: "x" }))[0]).toMatch(/only go up/);
    expect(issue(() => r.incCounter("nope"))[0]).toMatch(/not registered: call registerCounter first/);
    expect(issue(() => r.setGauge("c", 1))[0]).toMatch(/is a counter, not a gauge/);
    r.registerGauge("g");
    expect(issue(() => r.setGauge("g", Number.NaN))[0]).toMatch(/finite/);
    // Nothing was written by the refused calls.
    expect(r.read("c")).toEqual([]);
  });

  it("the process registry keeps agl_ names for the store server", () => {
    expect(() => processMetrics.registerCounter("agl.http.total", ["path"])).toThrow(/store server's own/);
  });

  it("PrometheusMetricsBackend writes to the process registry; MultiMetricsBackend to each of its backends", () => {
    const other = new MetricsRegistry();
    const multi = new MultiMetricsBackend([new PrometheusMetricsBackend(), other]);
    expect(multi.hasPrometheus()).toBe(true);
    multi.registerCounter("test.multi.calls", ["k"]);
    multi.incCounter("test.multi.calls", 2, { k: "v" });
    for (const r of [processMetrics, other])
      expect(sampleValue(parsePrometheusText(r.render()), "test_multi_calls_total", { k: "v" })).toBe(2);
  });
});

describe("pushes: what one registry changed, added to another", () => {
  function written(): MetricsRegistry {
    const r = new MetricsRegistry();
    r.registerCounter("c", ["k"]);
    r.registerGauge("g");
    r.registerHistogram("h", [], [1, 2]);
    r.incCounter("c", 2, { k: "a" });
    r.setGauge("g", 5);
    r.observeHistogram("h", 0.5);
    r.observeHistogram("h", 3);
    return r;
  }

  it("carries increments since the last push, gauges' latest values; nothing when nothing changed", () => {
    const r = written();
    const first = r.takePending()!;
    expect(first.source).toBe(r.source);
    expect(first.metrics).toEqual([
      { name: "c", help: "Counter c", label_names: ["k"], type: "counter", samples: [{ labels: { k: "a" }, value: 2 }] },
      { name: "g", help: "Gauge g", label_names: [], type: "gauge", samples: [{ labels: {}, value: 5 }] },
      {
        name: "h",
        help: "Histogram h",
        label_names: [],
        type: "histogram",
        buckets: [1, 2],
        samples: [{ labels: {}, bucket_counts: [1, 0, 1], sum: 3.5 }],
      },
    ]);
    expect(r.takePending()).toBeNull();
    r.incCounter("c", 1, { k: "a" });
    expect(r.takePending()!.metrics).toEqual([
      { name: "c", help: "Counter c", label_names: ["k"], type: "counter", samples: [{ labels: { k: "a" }, value: 1 }] },
    ]);
  });

  it("a server's registry adds pushes from two processes: the sums of counters and histograms", () => {
    const server = new MetricsRegistry();
    const a = written();
    const b = written();
    server.applyPush(a.takePending()!);
    server.applyPush(b.takePending()!);
    a.incCounter("c", 1, { k: "a" });
    server.applyPush(a.takePending()!);
    const f = parsePrometheusText(server.render());
    expect(sampleValue(f, "c_total", { k: "a" })).toBe(5);
    expect(sampleValue(f, "g")).toBe(5);
    expect(sampleValue(f, "h_bucket", { le: "1" })).toBe(2);
    expect(sampleValue(f, "h_bucket", { le: "+Inf" })).toBe(4);
    expect(sampleValue(f, "h_sum")).toBe(7);
  });

  it("a snapshot holds every series whole and leaves what is pending; two snapshots added up render as one registry", () => {
    const a = written();
    a.takePending();
    a.incCounter("c", 1, { k: "a" });
    a.registerGauge("unset");
    const snap = a.snapshot();
    expect(snap.metrics.map((m) => [m.name, m.samples])).toEqual([
      ["c", [{ labels: { k: "a" }, value: 3 }]],
      ["g", [{ labels: {}, value: 5 }]],
      ["h", [{ labels: {}, bucket_counts: [1, 0, 1], sum: 3.5 }]],
      ["unset", []],
    ]);
    expect(a.takePending()!.metrics).toEqual([expect.objectContaining({ name: "c", samples: [{ labels: { k: "a" }, value: 1 }] })]);
    const sum = new MetricsRegistry();
    sum.applyPush(snap);
    sum.applyPush(written().snapshot());
    const f = parsePrometheusText(sum.render());
    expect([sampleValue(f, "c_total", { k: "a" }), sampleValue(f, "h_count"), f.get("unset")?.type]).toEqual([5, 4, "gauge"]);
  });

  it("a push not sent is put back and goes with the next one", () => {
    const r = written();
    const lost = r.takePending()!;
    r.incCounter("c", 1, { k: "a" });
    r.returnPending(lost);
    const server = new MetricsRegistry();
    server.applyPush(r.takePending()!);
    expect(server.read("c")).toEqual([{ labels: { k: "a" }, value: 3, count: null }]);
    expect(server.read("h")).toEqual([{ labels: {}, value: 3.5, count: 2 }]);
  });

  it("a push with one wrong part changes nothing", () => {
    const server = new MetricsRegistry();
    server.registerCounter("c", ["other"]);
    const before = server.render();
    const push = written().takePending()!;
    expect(() => server.applyPush(push)).toThrow(ConflictError);
    const badLabels = {
      ...push,
      metrics: [push.metrics[1]!, { ...push.metrics[0]!, name: "d", samples: [{ labels: { x: "1" }, value: 1 }] }],
    };
    expect(() => server.applyPush(badLabels as never)).toThrow(/needs label 'k'/);
    const badBuckets = {
      ...push,
      metrics: [push.metrics[1]!, { ...push.metrics[2]!, samples: [{ labels: {}, bucket_counts: [1], sum: 1 }] }],
    };
    expect(() => server.applyPush(badBuckets as never)).toThrow(/3 bucket counts/);
    expect(server.render()).toBe(before);
    expect(server.definitions().map((d) => d.name)).toEqual(["c"]);
  });

  it("a server keeps at most maxSeries series", () => {
    const server = new MetricsRegistry();
    const r = new MetricsRegistry();
    r.registerCounter("c", ["k"]);
    for (let i = 0; i < 5; i++) r.incCounter("c", 1, { k: String(i) });
    expect(() => server.applyPush(r.takePending()!, 4)).toThrow(/at most 4/);
    expect(server.definitions()).toEqual([]);
  });
});

describe("ConsoleMetricsBackend", () => {
  it("logs rates, percentiles and gauges at most once per interval, grouped by the leading labels", () => {
    const lines: string[] = [];
    let now = 1000;
    const log = { info: (m: string) => lines.push(m), debug() {}, warning() {}, error() {} };
    const c = new ConsoleMetricsBackend({ windowSeconds: 10, logIntervalSeconds: 5, groupLevel: 1, log, now: () => now });
    expect(c.hasPrometheus()).toBe(false);
    c.registerCounter("req", ["method", "status"]);
    c.registerHistogram("lat", ["method"]);
    c.registerGauge("depth");
    c.incCounter("req", 1, { method: "GET", status: "200" }); // the first write logs
    expect(lines).toEqual(["req{method=GET}=0.20/s"]);
    now += 1;
    c.incCounter("req", 1, { method: "GET", status: "500" });
    for (const v of [0.001, 0.002, 0.003, 0.004, 1.5]) c.observeHistogram("lat", v, { method: "GET" });
    c.setGauge("depth", 3);
    expect(lines).toHaveLength(1);
    now += 4;
    c.setGauge("depth", 2);
    expect(lines[1]).toBe("depth=2  lat{method=GET}=3.00ms,1.20s,1.44s  req{method=GET}=0.40/s");
    expect(() => c.incCounter("req", 1, { method: "GET" })).toThrow(/needs label 'status'/);
  });
});
