/** The same dashboard served by `agl store` under Deno and Bun loads and shows the store (Chromium). */
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServerProcess } from "../server/processes.ts";
import type { Runtime } from "../runtimes.ts";
import { launchBrowser, openPage, poll, screenshot } from "./browser.ts";
import { seedStore } from "./seed.ts";

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});

describe.each(["deno", "bun"] as Runtime[])("dashboard served by %s", (runtime) => {
  it("loads, lists the rollouts and opens one's waterfall", async () => {
    const server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--log-level", "warning"]);
    try {
      const seeded = await seedStore(server.url);
      const { page, errors } = await openPage(browser);
      await page.goto(`${server.url}/`);
      const rows = page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]");
      await poll(() => rows.count()).toBe(seeded.rollouts);
      await page.locator(`a[href="#/rollouts/${seeded.showcase}"]`).click();
      await poll(() => page.locator("[data-testid=waterfall] .wf-row").count()).toBe(5);
      await page.goto(`${server.url}/#/store`);
      await poll(() => page.getByTestId("server-health").innerText()).toContain(`runtime\t${runtime}`);
      await screenshot(page, `store-${runtime}`);
      expect(errors).toEqual([]);
      await page.context().close();
    } finally {
      await server.stop();
    }
  }, 90_000);
});
