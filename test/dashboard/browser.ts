/**
 * Headless Chromium for the dashboard's browser tests: Debian's `chromium` (.ci/install-chromium.sh)
 * driven by playwright-core, one browser per test file. Screenshots go to test-artifacts/dashboard/
 * (gitignored).
 */
import { existsSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { expect } from "vitest";

export const CHROMIUM = process.env.AGL_CHROMIUM ?? "/usr/bin/chromium";
export const ARTIFACTS = fileURLToPath(new URL("../../test-artifacts/dashboard/", import.meta.url));

/** How long a page may take to show what a test waits for (the whole suite may be running beside it). */
export const WAIT_MS = 15_000;

/** `expect.poll` with the page's patience rather than vitest's 1 s default. */
export const poll = <T>(fn: () => Promise<T> | T) => expect.poll(fn, { timeout: WAIT_MS, interval: 50 });

export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(`Chromium not found at ${CHROMIUM}: run .ci/install-chromium.sh, or set AGL_CHROMIUM to a Chromium or Chrome binary`);
  // No sandbox: CI runs as root in a container, where Chromium's sandbox cannot start; the page is our own.
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
}

/** A page in a fresh context (no cache, no storage) that refreshes live pages every `refreshMs` (250) and records page errors. */
export async function openPage(
  browser: Browser,
  options: { dark?: boolean; refreshMs?: number } = {},
): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 }, colorScheme: options.dark ? "dark" : "light" });
  await context.addInitScript((ms) => localStorage.setItem("agl.dashboard.refreshMs", String(ms)), options.refreshMs ?? 250);
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  return { page, errors };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true });
}
