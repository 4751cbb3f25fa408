/**
 * Drives examples/tab's static page in Chromium: builds it into a folder, serves that folder as static
 * files (nothing else) from 127.0.0.1, opens it with the run's settings in the URL and Start pressed, waits
 * for a number of steps, presses Stop and waits for the run to end. Shared by test/browser/tab.test.ts and
 * bench/tab.ts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { buildTab } from "../../examples/tab/build.ts";
import type { TabSettings, TabState } from "../../examples/tab/messages.ts";
import { type MainThreadTasks, openPage, type PageServer, recordMainThreadTasks, servePages } from "./chromium.ts";

/** `window.tab` of the page (examples/tab/main.ts). */
export type TabPageState = TabState;

export interface StaticTab {
  url: string;
  folder: string;
  close(): Promise<void>;
}

/** The page built once into a temporary folder and served as static files. */
export async function serveStaticTab(): Promise<StaticTab> {
  const folder = await buildTab(mkdtempSync(join(tmpdir(), "agl-tab-")));
  const server: PageServer = await servePages({}, { "/": `${folder}/` });
  return {
    url: `${server.url}/index.html`,
    folder,
    async close() {
      await server.close();
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

export const readState = (page: Page): Promise<TabPageState> => page.evaluate(() => (window as unknown as { tab: TabPageState }).tab);

export interface DriveOptions {
  settings: Partial<TabSettings>;
  /** Press Stop once this many steps are done (else the run ends at `settings.steps`). */
  stopAfter?: number;
  /** A screenshot of the page once this many steps are done. */
  screenshot?: { afterSteps: number; path: string };
  timeoutMs: number;
}

/** Opens the page, trains, stops; the page stays open for downloads. */
export async function driveTab(
  browser: Browser,
  tab: StaticTab,
  o: DriveOptions,
): Promise<{ page: Page; state: TabPageState; seconds: number; stoppedAt: number | null; mainThread: MainThreadTasks }> {
  const query = new URLSearchParams({ ...Object.fromEntries(Object.entries(o.settings).map(([k, v]) => [k, String(v)])), autostart: "1" });
  const t0 = performance.now();
  const page = await openPage(browser, `${tab.url}?${query}`);
  // from the loaded page on: the main thread's tasks while it trains
  const recording = await recordMainThreadTasks(browser);
  const stepsDone = (n: number) =>
    page.waitForFunction(
      (k) => {
        const t = (window as unknown as { tab: TabPageState }).tab;
        return t.steps.length >= k || t.error !== null || t.done;
      },
      n,
      { timeout: o.timeoutMs, polling: 500 },
    );
  if (o.screenshot) {
    await stepsDone(o.screenshot.afterSteps);
    await page.screenshot({ path: o.screenshot.path, fullPage: true });
  }
  let stoppedAt: number | null = null;
  if (o.stopAfter !== undefined) {
    await stepsDone(o.stopAfter);
    const now = await readState(page);
    // a run that failed or ended has nothing to stop (its state says why)
    if (now.error === null && !now.done) await page.click("#stop");
  }
  await page.waitForFunction(
    () => {
      const t = (window as unknown as { tab: TabPageState }).tab;
      return t.done || t.error !== null;
    },
    null,
    { timeout: o.timeoutMs, polling: 500 },
  );
  const seconds = (performance.now() - t0) / 1000;
  const state = await readState(page);
  // the steps done when the page handled the click, as it counted them
  if (o.stopAfter !== undefined) stoppedAt = state.stepsAtStop;
  return { page, state, seconds, stoppedAt, mainThread: await recording.stop() };
}

/** Clicks `selector` and returns the bytes of the download it starts. */
export async function downloadOf(page: Page, selector: string): Promise<Uint8Array> {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click(selector)]);
  const { readFileSync } = await import("node:fs");
  return new Uint8Array(readFileSync((await download.path())!));
}

/** The `q` quantile of `xs` (0 for none). */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return 0;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}
