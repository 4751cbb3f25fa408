/**
 * The dashboard on a store started with a token (Chromium): the page loads without it, asks for it,
 * refuses a wrong one, then sends it as a bearer header on every API call, never in a URL, a served
 * file or the console.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { launchBrowser, openPage, screenshot } from "./browser.ts";
import { seedStore } from "./seed.ts";

const TOKEN = "tok-9f2c41d7e8a6b3";
let dir: string;
let server: ServerProcess;
let browser: Browser;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agl-dashboard-token-"));
  writeFileSync(join(dir, "token"), `${TOKEN}\n`);
  server = await startServerProcess("node", [
    "--port",
    "0",
    "--db",
    `file:${join(dir, "store.db")}`,
    "--token-file",
    join(dir, "token"),
    "--log-level",
    "warning",
  ]);
  await seedStore(server.url, TOKEN);
  browser = await launchBrowser();
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("dashboard with --token-file", () => {
  it("asks for the token, refuses a wrong one, and sends the right one only as a bearer header", async () => {
    const { page, errors } = await openPage(browser);
    const requests: { url: string; authorization: string | undefined }[] = [];
    const bodies: Promise<string>[] = [];
    const consoleLines: string[] = [];
    page.on("request", (r) => requests.push({ url: r.url(), authorization: r.headers().authorization }));
    page.on("response", (r) => {
      if (!r.url().includes("/v1/agl/")) bodies.push(r.text().catch(() => ""));
    });
    page.on("console", (m) => consoleLines.push(m.text()));

    await page.goto(`${server.url}/`);
    const form = page.locator("form", { hasText: "This store needs a token" });
    await form.waitFor();
    expect(await page.locator("[data-testid=rollouts-table]").count()).toBe(0);
    await screenshot(page, "token-prompt");

    await page.getByLabel("Token").fill("not-the-token");
    await page.getByRole("button", { name: "Open the dashboard" }).click();
    await page.getByText("The server refused this token.").waitFor();

    await page.getByLabel("Token").fill(TOKEN);
    await page.getByRole("button", { name: "Open the dashboard" }).click();
    await page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]").first().waitFor();

    // Kept for this tab: a reload stays signed in.
    await page.reload();
    await page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]").first().waitFor();

    const apiCalls = requests.filter((r) => r.url.includes("/v1/agl/"));
    const withToken = apiCalls.filter((r) => r.authorization === `Bearer ${TOKEN}`);
    expect(withToken.length).toBeGreaterThan(2);
    expect(apiCalls.every((r) => r.authorization === undefined || r.authorization.startsWith("Bearer "))).toBe(true);
    expect(requests.filter((r) => r.url.includes(TOKEN))).toEqual([]);
    expect((await Promise.all(bodies)).filter((b) => b.includes(TOKEN))).toEqual([]);
    expect(consoleLines.filter((l) => l.includes(TOKEN))).toEqual([]);

    // Forgetting it asks again.
    await page.getByRole("button", { name: "Forget token" }).click();
    await form.waitFor();
    expect(errors).toEqual([]);
    await page.context().close();
  });
});
