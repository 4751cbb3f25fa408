/**
 * Headless Chromium for the dashboard's browser tests: Debian's `chromium` (.ci/install-chromium.sh)
 * driven by playwright-core, one browser per test file. Screenshots go to test-artifacts/dashboard/
 * (gitignored).
 */
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM = process.env.AGL_CHROMIUM ?? "/usr/bin/chromium";
export const ARTIFACTS = fileURLToPath(new URL("../../test-artifacts/dashboard/", import.meta.url));

export async function launchBrowser(): Promise<Browser> {
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
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  return { page, errors };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true });
}
