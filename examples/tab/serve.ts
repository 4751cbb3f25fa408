/**
 * `npm run demo:tab`: builds the page (build.ts) and serves the folder as static files on 127.0.0.1 (a
 * secure context, as WebGPU needs), printing the URL. The page needs no server beyond static files:
 * the folder works from any static host.
 *
 *   npm run demo:tab [-- --port 8090]
 */
import { serve } from "@hono/node-server";
import { serveStatic } from "@hono/node-server/serve-static";
import { Hono } from "hono";
import { relative } from "node:path";
import { buildTab } from "./build.ts";

const argv = process.argv;
const at = argv.indexOf("--port");
const port = at > 0 ? Number(argv[at + 1]) : 8090;
const out = await buildTab();
const app = new Hono().use("/*", serveStatic({ root: relative(process.cwd(), out) }));
serve({ fetch: app.fetch, hostname: "127.0.0.1", port }, (info) => {
  console.log(`serving ${relative(process.cwd(), out)}/ (static files only)`);
  console.log(`open http://127.0.0.1:${info.port}/`);
});
