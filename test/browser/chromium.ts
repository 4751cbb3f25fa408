/**
 * Shared by the browser tests: headless Chromium (Debian's, /usr/bin/chromium, installed by
 * .ci/install-chromium.sh) driven by playwright-core, and a loopback server for the pages.
 *
 * Flags: `--enable-unsafe-webgpu` alone gives WebGPU on Linux headless; with no GPU Chromium falls back to
 * its SwiftShader adapter (vendor "google", architecture "swiftshader", isFallbackAdapter true). The
 * Vulkan/ANGLE flags change nothing here (checked: same adapter, slower start).
 * Pages come from http://127.0.0.1 so they are a secure context (WebGPU needs one).
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, normalize } from "node:path";
import { build } from "esbuild";
import { type Browser, chromium, type Page } from "playwright-core";

export const CHROMIUM = process.env.AGL_CHROMIUM ?? "/usr/bin/chromium";
export const CHROMIUM_FLAGS = ["--enable-unsafe-webgpu"];

/** Why the browser tests cannot run here, or null when they can. */
export const noChromium: string | null = existsSync(CHROMIUM) ? null : `no Chromium at ${CHROMIUM} (run .ci/install-chromium.sh)`;
if (noChromium) console.warn(`[browser tests] SKIPPED: ${noChromium}`);

/** `extraFlags` add to CHROMIUM_FLAGS (e.g. `--host-resolver-rules` to give a test name an address). */
export function launchChromium(extraFlags: readonly string[] = []): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_FLAGS, ...extraFlags] });
}

/** A page that fails the test on an uncaught error, and echoes the page's console to the test's. */
export async function openPage(browser: Browser, url: string): Promise<Page> {
  const page = await browser.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" || process.env.AGL_BROWSER_LOG) console.log(`[page ${m.type()}] ${m.text()}`);
  });
  page.on("pageerror", (e) => console.log(`[page error] ${e.message}`));
  await page.goto(url);
  return page;
}

/** The tasks renderer main threads ran while recording: how many, and the longest by wall time and by the thread's CPU time. */
export interface MainThreadTasks {
  tasks: number;
  longestWallMs: number;
  /** CPU time excludes the time the OS had the thread stopped: the page's own work, however busy the machine. */
  longestCpuMs: number;
}

/**
 * Records every task of the pages' renderer main threads through Chrome's tracing ("toplevel" category,
 * thread CPU time per task), reducing the events as they stream in so that a run of many minutes keeps
 * nothing but the maxima. Chrome's own WebUI renderer (a process of another name) is left out.
 */
export async function recordMainThreadTasks(browser: Browser): Promise<{ stop(): Promise<MainThreadTasks> }> {
  const cdp = await browser.newBrowserCDPSession();
  type TraceEvent = { ph: string; name: string; pid: number; tid: number; dur?: number; tdur?: number; args?: { name?: string } };
  const mainThreads = new Set<string>();
  const pageProcesses = new Set<number>();
  // per thread: tasks, longest wall and CPU time (µs); which threads are main threads is known once their metadata comes
  const perThread = new Map<string, { tasks: number; wall: number; cpu: number }>();
  cdp.on("Tracing.dataCollected", ({ value }) => {
    for (const e of value as unknown as TraceEvent[]) {
      const thread = `${e.pid}:${e.tid}`;
      if (e.ph === "M" && e.name === "process_name" && e.args?.name === "Renderer") pageProcesses.add(e.pid);
      else if (e.ph === "M" && e.name === "thread_name" && e.args?.name === "CrRendererMain") mainThreads.add(thread);
      else if (e.ph === "X" && e.name === "ThreadControllerImpl::RunTask") {
        const t = perThread.get(thread) ?? { tasks: 0, wall: 0, cpu: 0 };
        t.tasks++;
        t.wall = Math.max(t.wall, e.dur ?? 0);
        t.cpu = Math.max(t.cpu, e.tdur ?? Number.POSITIVE_INFINITY);
        perThread.set(thread, t);
      }
    }
  });
  await cdp.send("Tracing.start", { traceConfig: { includedCategories: ["toplevel"] }, transferMode: "ReportEvents" });
  return {
    async stop() {
      const complete = new Promise((resolve) => cdp.once("Tracing.tracingComplete", resolve));
      await cdp.send("Tracing.end");
      await complete;
      await cdp.detach();
      const pageThreads = [...mainThreads].filter((thread) => pageProcesses.has(Number(thread.split(":")[0])));
      if (pageThreads.length === 0) throw new Error("the trace named no main thread of a page's renderer");
      const out: MainThreadTasks = { tasks: 0, longestWallMs: 0, longestCpuMs: 0 };
      for (const thread of pageThreads) {
        const t = perThread.get(thread);
        if (!t) continue;
        out.tasks += t.tasks;
        out.longestWallMs = Math.max(out.longestWallMs, t.wall / 1000);
        out.longestCpuMs = Math.max(out.longestCpuMs, t.cpu / 1000);
      }
      return out;
    },
  };
}

/** `entry` (TypeScript, imports relative to `resolveDir`) bundled for a page or worker: one ES module. */
export async function bundleForPage(entry: string, resolveDir: string): Promise<string> {
  const out = await build({
    stdin: { contents: entry, resolveDir, loader: "ts" },
    bundle: true,
    platform: "browser",
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "silent",
  });
  return out.outputFiles[0]!.text;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".cjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".css": "text/css",
  ".wasm": "application/wasm",
};

export interface PageServer {
  url: string;
  close(): Promise<void>;
}

/**
 * Serves `routes` (path → body, for generated pages and bundles) and files under `mounts` (URL prefix →
 * folder) on 127.0.0.1, every response with `headers` added (e.g. the cross-origin isolation ones).
 */
export type Body = string | Uint8Array;

export async function servePages(
  routes: Record<string, Body | (() => Body)>,
  mounts: Record<string, string> = {},
  headers: Record<string, string> = {},
): Promise<PageServer> {
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    const route = path === "/favicon.ico" ? "" : routes[path];
    if (route !== undefined) {
      const type = TYPES[extname(path)] ?? (path.endsWith("/") ? TYPES[".html"] : "application/octet-stream");
      res.writeHead(200, { ...headers, "content-type": type, "cache-control": "no-store" });
      res.end(typeof route === "function" ? route() : route);
      return;
    }
    for (const [prefix, dir] of Object.entries(mounts)) {
      if (!path.startsWith(prefix)) continue;
      const file = normalize(join(dir, path.slice(prefix.length)));
      if (!file.startsWith(dir) || !existsSync(file) || !statSync(file).isFile()) break;
      res.writeHead(200, { ...headers, "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
      res.end(readFileSync(file));
      return;
    }
    res.writeHead(404, headers).end(`not found: ${path}`);
  };
  const server = createServer(handle);
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}
