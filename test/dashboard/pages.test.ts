/**
 * The dashboard in a real headless Chromium against `agl store` (Node, a libSQL file) seeded through the
 * HTTP API: what a person sees on each page, the click from a rollout to its spans, a `<script>` in a
 * span attribute shown as text, live refresh, and the size of the first load.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { launchBrowser, openPage, poll, screenshot } from "./browser.ts";
import { APO_ROUNDS, STEPS, TOOL_RESULTS, VALIDATIONS, XSS, seedStore, type Seeded } from "./seed.ts";

let dir: string;
let server: ServerProcess;
let seeded: Seeded;
let browser: Browser;
let page: Page;
let errors: string[];

const api = async (path: string, init?: RequestInit): Promise<any> => (await fetch(`${server.url}/v1/agl/${path}`, init)).json();
const go = async (hash: string): Promise<void> => {
  await page.goto(`${server.url}/#/${hash}`);
};
const texts = (selector: string): Promise<string[]> => page.locator(selector).allInnerTexts();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agl-dashboard-"));
  server = await startServerProcess("node", ["--port", "0", "--db", `file:${join(dir, "store.db")}`, "--log-level", "warning"]);
  seeded = await seedStore(server.url);
  browser = await launchBrowser();
  ({ page, errors } = await openPage(browser));
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("dashboard pages (Chromium, Node server, libSQL file)", () => {
  it("loads in at most 300 KB on a first visit", async () => {
    // Live refresh slowed down, so the network goes idle once the page has loaded.
    const { page: fresh } = await openPage(browser, { refreshMs: 60_000 });
    const responses: Promise<number>[] = [];
    fresh.on("requestfinished", (request) => responses.push(request.sizes().then((s) => s.responseBodySize + s.responseHeadersSize)));
    await fresh.goto(`${server.url}/`);
    await fresh.locator("[data-testid=rollouts-table] tbody tr[data-rollout]").first().waitFor();
    await fresh.waitForLoadState("networkidle");
    const bytes = (await Promise.all(responses)).reduce((a, b) => a + b, 0);
    console.log(`[dashboard] first load: ${responses.length} responses, ${(bytes / 1024).toFixed(1)} KB`);
    expect(bytes).toBeGreaterThan(10_000);
    expect(bytes).toBeLessThanOrEqual(300 * 1024);
    await fresh.context().close();
  });

  it("Rollouts: every rollout, counts per status, filters by status, mode and id, sorts", async () => {
    await go("rollouts");
    const counts = await api("statistics/rollouts");
    await poll(() => page.getByTestId("rollouts-total").innerText()).toBe(`${counts.total} in all`);
    expect(counts.total).toBe(seeded.rollouts);
    for (const [status, n] of Object.entries(counts.by_status as Record<string, number>))
      expect(await page.locator(`[data-status=${status}] b`).innerText()).toBe(String(n));
    const rows = page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]");
    await poll(() => rows.count()).toBe(Math.min(50, counts.total));
    await screenshot(page, "rollouts");

    await page.locator("[data-status=failed]").click();
    await poll(() => rows.count()).toBe(counts.by_status.failed);
    expect(new Set(await texts("[data-testid=rollouts-table] tbody tr td:nth-child(2)"))).toEqual(new Set(["failed"]));
    // The filter lives in the address: back from a rollout, it is still on.
    expect(new URL(page.url()).hash).toBe("#/rollouts?status=failed");
    await rows.first().locator("a").click();
    await page.getByTestId("rollout-id").waitFor();
    await page.goBack();
    await poll(() => rows.count()).toBe(counts.by_status.failed);
    expect(await page.locator("[data-status=failed]").getAttribute("aria-pressed")).toBe("true");
    // The Rollouts link in the bar is the address without filters: it clears them.
    await page.locator("header nav a", { hasText: "Rollouts" }).click();
    await poll(() => rows.count()).toBe(Math.min(50, counts.total));
    expect(await page.locator("[data-status=failed]").getAttribute("aria-pressed")).toBe("false");

    await page.getByLabel("Mode").selectOption("val");
    const val = await api("rollouts?mode_in=val&limit=0");
    await poll(() => rows.count()).toBe(val.total);
    expect(new Set(await texts("[data-testid=rollouts-table] tbody tr td:nth-child(3)"))).toEqual(new Set(["val"]));
    await page.getByLabel("Mode").selectOption("");

    await page.getByLabel("Search rollout id").fill(seeded.showcase);
    await poll(() => rows.count()).toBe(1);
    expect(await rows.first().getAttribute("data-rollout")).toBe(seeded.showcase);
    await page.getByLabel("Search rollout id").fill("");

    await page.locator("th", { hasText: "Rollout" }).click();
    const ids = () => rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-rollout")!));
    const sortedIds = (await api(`rollouts?sort_by=rollout_id&sort_order=asc&limit=50`)).items.map(
      (r: { rollout_id: string }) => r.rollout_id,
    );
    await poll(ids).toEqual(sortedIds);
    expect(sortedIds).toEqual([...sortedIds].sort());
  });

  it("Rollouts: a reward column with each row's final reward", async () => {
    await go(`rollouts?q=${seeded.showcase}`);
    const row = page.locator(`[data-testid=rollouts-table] tbody tr[data-rollout="${seeded.showcase}"]`);
    expect(await page.locator("[data-testid=rollouts-table] th").allInnerTexts()).toContain("Reward");
    await poll(() => row.locator("[data-reward]").innerText()).toBe("1");
    expect(await api(`statistics/rewards?rollout_id_in=${seeded.showcase}&rollout_id_in=ro-unknown`)).toEqual({
      rewards: { [seeded.showcase]: 1, "ro-unknown": null },
    });
    // A rollout whose attempt has no reward says so.
    await go("rollouts?status=failed");
    await poll(() => page.locator("[data-testid=rollouts-table] tbody tr[data-rollout] [data-reward]").first().innerText()).toBe("none");
  });

  it("Rollouts refresh live: a rollout enqueued now shows up without a reload", async () => {
    await go("rollouts");
    const rows = page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]");
    await rows.first().waitFor();
    const before = (await api("statistics/rollouts")).total;
    const [added] = await api("queues/rollouts/enqueue", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ rollouts: [{ input: { live: true }, mode: "test" }] }),
    });
    seeded.rollouts++;
    await page.locator(`tr[data-rollout="${added.rollout_id}"]`).waitFor();
    await poll(() => page.getByTestId("rollouts-total").innerText()).toBe(`${before + 1} in all`);
  });

  it("Rollout detail: click through to the waterfall, a span's attributes, rewards; <script> shows as text", async () => {
    await go("rollouts");
    await page.getByLabel("Search rollout id").fill(seeded.showcase);
    await page.locator(`a[href="#/rollouts/${seeded.showcase}"]`).click();
    await poll(() => page.getByTestId("rollout-id").innerText()).toBe(seeded.showcase);
    const bars = page.locator("[data-testid=waterfall] .wf-row");
    await poll(() => bars.count()).toBe(5);
    expect(
      await bars.evaluateAll((rows) => rows.map((r) => [r.querySelector(".wf-label")!.textContent, r.getAttribute("data-depth")])),
    ).toEqual([
      ["agent.run", "0"],
      ["openai.chat.completion", "1"],
      ["tool.check", "1"],
      ["agentlightning.annotation", "1"],
      ["agentlightning.reward", "1"],
    ]);
    expect(await page.locator(".wf-row.reward").count()).toBe(1);
    expect(await page.locator(".wf-row.annotation").count()).toBe(1);
    expect(await page.locator(".wf-row.err .wf-label").innerText()).toBe("tool.check");
    expect(await page.getByTestId("rewards").innerText()).toContain("correct: 1");
    expect(await page.getByTestId("annotations").innerText()).toBe("agentlightning.tag.0: arithmetic");
    expect(await page.getByTestId("attempts-table").locator("tbody tr").count()).toBe(1);

    await bars.filter({ hasText: "tool.check" }).click();
    const detail = page.getByTestId("span-detail");
    await detail.getByText("tool.input").waitFor();
    expect(await detail.locator("tr", { hasText: "tool.input" }).locator("td pre").innerText()).toBe(XSS);
    expect(await detail.innerText()).toContain("the checker failed");
    expect(await detail.locator("script, img").count()).toBe(0);
    expect(await page.evaluate(() => (window as { __xss?: number }).__xss)).toBeUndefined();
    await screenshot(page, "rollout-trace");
    await bars.filter({ hasText: "openai.chat.completion" }).click();
    await detail.getByTestId("llm-call").waitFor();
    await screenshot(page, "rollout-llm-span");

    // Collapsing the root hides its children.
    await bars.first().locator("button.twisty").click();
    await poll(() => bars.count()).toBe(1);
    await bars.first().locator("button.twisty").click();
    await poll(() => bars.count()).toBe(5);
  });

  it("Rollout detail: LLM calls with messages and token counts, and the adapter's triplets", async () => {
    await go(`rollouts/${seeded.showcase}`);
    await page.getByRole("tab", { name: /LLM calls/ }).click();
    await page.locator("details.card summary").first().click();
    const call = page.getByTestId("llm-call").first();
    expect(await call.innerText()).toContain("prompt 17 tokens · completion 1 tokens");
    expect(await call.locator(".msg pre").allInnerTexts()).toEqual(["You add numbers.", "What is 2 plus 3?", "5"]);
    await screenshot(page, "rollout-llm-calls");

    await page.getByRole("tab", { name: "Triplets" }).click();
    const triplets = page.getByTestId("triplets");
    await poll(() => triplets.innerText()).toContain("1 triplets from 5 spans");
    expect(await triplets.locator(".triplet").count()).toBe(1);
    expect(await triplets.locator(".triplet .reward-pill").innerText()).toBe("reward: 1");
    // Token ids read as a list that wraps, not one id per line.
    expect(await triplets.locator(".triplet pre").first().innerText()).toMatch(/"token_ids": \[11, 12(, \d+)*\]/);
  });

  it("Rollout detail: a tool-using rollout shows its turns, the model's tool calls and the tool results", async () => {
    await go(`rollouts/${seeded.toolRollout}`);
    await poll(() => page.locator(".summary").innerText()).toContain("3 LLM calls · 2 tool calls");
    await page.getByRole("tab", { name: /LLM calls \(3\)/ }).click();
    const summaries = page.locator("details.card summary");
    await poll(() => summaries.count()).toBe(3);
    const heads = await summaries.allInnerTexts();
    expect(heads.map((h) => h.split(" ").slice(0, 2).join(" "))).toEqual(["Turn 1", "Turn 2", "Turn 3"]);
    expect(heads[0]).toContain('calculator({"expression":"23*148"})');
    expect(heads[2]).toContain("### ANSWER: 2887 ###");
    await summaries.nth(2).click();
    const last = page.locator("details.card").nth(2).getByTestId("llm-call");
    // the last call's prompt: system, user, then each call the model made and the result sent back
    const messages = last.locator(".msg");
    expect(await messages.locator(".role").allInnerTexts()).toEqual([
      "SYSTEM",
      "USER",
      "ASSISTANT",
      "TOOL result of call_1",
      "ASSISTANT",
      "TOOL result of call_2",
      "ASSISTANT",
    ]);
    const calls = last.getByTestId("tool-call");
    expect(await calls.count()).toBe(2);
    expect(await calls.nth(0).innerText()).toMatch(/tool call\s+calculator\s+call_1\s+\{"expression":"23\*148"\}/);
    expect(await calls.nth(1).locator("pre").innerText()).toBe('{"expression":"3404-517"}');
    expect(await messages.nth(3).locator("pre").innerText()).toBe(TOOL_RESULTS[0]);
    expect(await messages.nth(5).locator("pre").innerText()).toBe(TOOL_RESULTS[1]);
    expect(await messages.nth(6).locator("pre").innerText()).toBe("### ANSWER: 2887 ###");
    await screenshot(page, "rollout-tool-calls");
  });

  it("Rollout detail refreshes live while the rollout runs: new spans join the waterfall", async () => {
    await go(`rollouts/${seeded.busyRollout}`);
    const bars = page.locator("[data-testid=waterfall] .wf-row");
    await page.getByText("No spans for this attempt.").waitFor();
    const attempt = (await api(`rollouts/${seeded.busyRollout}`)).attempt;
    const add = async (n: number) =>
      api("spans/batch", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          spans: Array.from({ length: n }, (_, i) => ({
            rollout_id: seeded.busyRollout,
            attempt_id: attempt.attempt_id,
            trace_id: "d".repeat(32),
            span_id: `live-${Date.now()}-${i}`,
            parent_id: null,
            name: `live step ${i}`,
            status: { status_code: "OK", description: null },
            attributes: {},
            events: [],
            links: [],
            start_time: attempt.start_time + i,
            end_time: attempt.start_time + i + 0.5,
            context: null,
            parent: null,
            resource: { attributes: {}, schema_url: "" },
          })),
        }),
      });
    await add(2);
    await poll(() => bars.count()).toBe(2);
    // From now on a refresh asks only for the spans after the two it has.
    const offsets: string[] = [];
    const onRequest = (r: { url(): string }) => {
      const url = new URL(r.url());
      if (url.pathname === "/v1/agl/spans") offsets.push(url.searchParams.get("offset") ?? "");
    };
    page.on("request", onRequest);
    await add(3);
    await poll(() => bars.count()).toBe(5);
    page.off("request", onRequest);
    expect(offsets).toContain("2");
    expect(offsets).not.toContain("0");
  });

  it("Rollout detail: a retried rollout lists both attempts", async () => {
    await go(`rollouts/${seeded.retried}`);
    const attempts = page.getByTestId("attempts-table").locator("tbody tr");
    await poll(() => attempts.count()).toBe(2);
    expect(await attempts.nth(0).innerText()).toContain("failed");
    expect(await attempts.nth(1).innerText()).toMatch(/retry 1[\s\S]*succeeded[\s\S]*worker-2/);
  });

  it("Resources: each version with its templates and endpoints, and a diff", async () => {
    await go("resources");
    const cards = page.locator("[data-testid=resources-list] .version");
    await poll(() => cards.count()).toBe(2);
    const newest = cards.first();
    expect(await newest.getAttribute("data-resources")).toBe(seeded.resourceIds[1]);
    expect(await newest.innerText()).toMatch(/version 2[\s\S]*Answer with a number only\.[\s\S]*policy-v3/);
    const diff = page.getByTestId("resources-diff");
    expect(await diff.locator(".del").allInnerTexts()).toEqual(
      expect.arrayContaining([
        expect.stringContaining('"model": "policy-v1"'),
        expect.stringContaining('"template": "Compute {a} + {b}."'),
      ]),
    );
    expect(await diff.locator(".add").allInnerTexts()).toEqual(expect.arrayContaining([expect.stringContaining('"model": "policy-v3"')]));
    await screenshot(page, "resources");
  });

  it("Workers: status, current rollout, heartbeat stats, and offline detection", async () => {
    await go("workers");
    const row = (id: string) => page.locator(`[data-testid=workers-table] tr[data-worker="${id}"]`);
    await row("worker-4").waitFor();
    expect(await row("worker-4").locator("a").innerText()).toBe(seeded.busyRollout);
    expect(await row("worker-4").innerText()).toMatch(/busy[\s\S]*cpu_percent 55/);
    expect(await row("worker-1").innerText()).toContain("rollouts_done 10");
    // worker-3 only ran a rollout started for it and never sent a heartbeat.
    expect(await row("worker-3").locator(".s-offline").count()).toBe(1);
    expect(await row("worker-1").locator(".s-offline").count()).toBe(0);
    expect(await page.getByTestId("workers-summary").innerText()).toBe("4 workers, 3 online");
    await screenshot(page, "workers");
  });

  it("Training: a chart per numeric attribute of grpo.step, grpo.validation and apo.* spans, with every point", async () => {
    await go("training");
    const group = (name: string) => page.locator(`.chart-group[data-span-name="${name}"]`);
    // The newest run first: APO's rounds against apo.round, its candidates (two a round) against their rank.
    await group("apo.round").waitFor();
    const apoRound = group("apo.round").getByTestId("chart");
    expect(await apoRound.evaluateAll((cs) => cs.map((c) => [c.getAttribute("data-title"), c.getAttribute("data-points")]))).toEqual([
      ["apo.best_score", String(APO_ROUNDS)],
      ["apo.leader_score", String(APO_ROUNDS)],
    ]);
    expect(await group("apo.candidate").getByTestId("chart").first().getAttribute("data-points")).toBe(String(APO_ROUNDS * 2));
    expect(await apoRound.first().getAttribute("data-x")).toBe("apo.round");
    expect(await group("apo.candidate").getByTestId("chart").first().getAttribute("data-x")).toBe("index");
    await screenshot(page, "training-apo");

    await page.getByLabel("Run").selectOption(seeded.metricsRollout);
    await group("grpo.step").waitFor();
    const stepCharts = group("grpo.step").getByTestId("chart");
    expect(await stepCharts.evaluateAll((cs) => cs.map((c) => [c.getAttribute("data-title"), c.getAttribute("data-points")]))).toEqual([
      ["grpo.reward", String(STEPS)],
      ["grpo.accuracy", String(STEPS)],
      ["grpo.kl", String(STEPS)],
      ["grpo.clip_frac", String(STEPS)],
      ["grpo.train_tokens_per_second", String(STEPS)],
      ["grpo.version", String(STEPS)],
    ]);
    await poll(() => stepCharts.locator("canvas").count()).toBe(6);
    expect(await group("grpo.validation").getByTestId("chart").first().getAttribute("data-points")).toBe(String(VALIDATIONS));
    await screenshot(page, "training");

    // A step written now joins the curves without a reload.
    const run = await api(`rollouts/${seeded.metricsRollout}`);
    const spans = await api(`spans?rollout_id=${seeded.metricsRollout}&limit=0`);
    await api("spans/batch", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        spans: [
          {
            rollout_id: seeded.metricsRollout,
            attempt_id: run.attempt.attempt_id,
            sequence_id: spans.total + 1,
            trace_id: "f".repeat(32),
            span_id: "step-13",
            parent_id: null,
            name: "grpo.step",
            status: { status_code: "OK", description: null },
            attributes: {
              "grpo.step": STEPS + 1,
              "grpo.reward": 0.9,
              "grpo.accuracy": 0.7,
              "grpo.kl": 0.1,
              "grpo.clip_frac": 0.1,
              "grpo.train_tokens_per_second": 1,
              "grpo.version": STEPS + 1,
            },
            events: [],
            links: [],
            start_time: run.start_time + 100,
            end_time: run.start_time + 100,
            context: null,
            parent: null,
            resource: { attributes: {}, schema_url: "" },
          },
        ],
      }),
    });
    await poll(() => stepCharts.first().getAttribute("data-points")).toBe(String(STEPS + 1));

    // The span names are a configurable list: only grpo.step now.
    await page.getByLabel("Span names").fill("grpo.step");
    await page.getByLabel("Span names").press("Enter");
    await poll(() => page.locator(".chart-group").count()).toBe(1);
    await page.getByLabel("Span names").fill("grpo.step, grpo.validation, apo.*, sft.*");
    await page.getByLabel("Span names").press("Enter");
  });

  it("Store: statistics and the server's health", async () => {
    await go("store");
    const stats = page.getByTestId("store-statistics");
    await poll(() => stats.innerText()).toContain(`total rollouts\t${seeded.rollouts}`);
    const health = page.getByTestId("server-health");
    await poll(() => health.innerText()).toMatch(/ok[\s\S]*runtime\tnode v[\s\S]*requests answered\t[\d,]+ \([\d,]+ 4xx, 0 5xx\)/);
    // The machine's memory and disk in GB as the snapshot gives them (not read as bytes: "2 B"), usage in %.
    const system = (await api("server")).system as Record<string, number | null>;
    const text = await health.innerText();
    expect(system.mem_total_gb).toBeGreaterThan(0);
    expect(text).toContain(`mem total gb\t${system.mem_total_gb!.toLocaleString("en-US", { maximumFractionDigits: 4 })} GB`);
    expect(text).toMatch(/mem used gb\t[\d.,]+ GB/);
    expect(text).toMatch(/mem pct\t[\d.,]+ %/);
    expect(text).not.toMatch(/mem \w+ gb\t[\d.]+ B\b/);
    await screenshot(page, "store");
  });

  it("Rollout detail: span attribute keys named __proto__ show as data, and the server keeps answering", async () => {
    const post = (path: string, body: string) => api(path, { method: "POST", headers: { "content-type": "application/json" }, body });
    const r = await post("rollouts", '{"input":{"__proto__":{"polluted":true}}}');
    // JSON text: an object literal cannot carry an own "__proto__" key.
    const attributes =
      '{"gen_ai.prompt.0.role":"user","gen_ai.prompt.0.content":"hi","gen_ai.prompt.0.__proto__":["evil"],' +
      '"gen_ai.prompt.__proto__.x.y":1,"gen_ai.completion.0.role":"assistant","gen_ai.completion.0.content":"ok"}';
    const spanText = JSON.stringify({
      rollout_id: r.rollout_id,
      attempt_id: r.attempt.attempt_id,
      trace_id: "b".repeat(32),
      span_id: "c".repeat(16),
      parent_id: null,
      name: "openai.chat.completion",
      status: { status_code: "OK", description: null },
      attributes: "ATTRIBUTES",
      events: [],
      links: [],
      start_time: 1,
      end_time: 2,
      context: null,
      parent: null,
      resource: { attributes: {}, schema_url: "" },
    }).replace('"ATTRIBUTES"', attributes);
    expect(await post("spans/batch", `{"spans":[${spanText}]}`)).toHaveLength(1);

    await go(`rollouts/${r.rollout_id}`);
    await page.getByRole("tab", { name: /LLM calls/ }).click();
    await page.locator("details.card summary").first().click();
    expect(await page.getByTestId("llm-call").first().locator(".msg pre").allInnerTexts()).toEqual(["hi", "ok"]);
    await page.getByRole("tab", { name: "Triplets" }).click();
    const triplets = page.getByTestId("triplets");
    await poll(() => triplets.innerText()).toContain("1 triplets from 1 spans");
    expect(await triplets.locator(".triplet pre").first().innerText()).toContain('"__proto__": {\n      "x": {\n        "y": 1');
    expect(await page.evaluate(() => "x" in {} || "polluted" in {})).toBe(false);
    expect(await api("health")).toEqual({ status: "ok" });
    expect((await api("rollouts?limit=1")).items).toHaveLength(1);
  });

  it("has a dark look too, and raised no page errors", async () => {
    const { page: dark, errors: darkErrors } = await openPage(browser, { dark: true });
    await dark.goto(`${server.url}/#/rollouts/${seeded.showcase}`);
    await dark.locator("[data-testid=waterfall] .wf-row").first().waitFor();
    const bg = await dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
    expect(bg).toBe("rgb(17, 20, 26)");
    await screenshot(dark, "rollout-trace-dark");
    await dark.context().close();
    expect([...errors, ...darkErrors]).toEqual([]);
  });
});
