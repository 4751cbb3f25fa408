/**
 * The demo in one command: the runners' side (runners.ts: store server, policy server, two runners) and
 * the page, served from 127.0.0.1 (a secure context, as WebGPU needs). Open the printed URL.
 *
 *   npx tsx examples/browser-trainer/serve.ts [--port 8080]
 */
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { bundle, here } from "./bundle.ts";
import { LETTER_TASKS, startRunnersSide } from "./runners.ts";

const portArg = process.argv.indexOf("--port");
const port = portArg > 0 ? Number(process.argv[portArg + 1]) : 8080;
const main = await bundle("main.ts");
const files: Record<string, [string, string]> = {
  "/": ["text/html; charset=utf-8", readFileSync(join(here, "index.html"), "utf8")],
  "/main.js": ["text/javascript", main],
  "/tasks.json": ["application/json", JSON.stringify(LETTER_TASKS)],
};
const pages = createServer((req, res) => {
  const file = files[new URL(req.url ?? "/", "http://x").pathname];
  if (!file) return void res.writeHead(404).end();
  res.writeHead(200, { "content-type": file[0] }).end(file[1]);
});
await new Promise<void>((ok) => pages.listen(port, "127.0.0.1", ok));
const origin = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`;
const token = crypto.randomUUID();
const side = await startRunnersSide({ token, corsOrigins: [origin] });
console.log(`store server ${side.storeUrl} (token ${token}), 2 runners, policy server following the store`);
console.log(`open ${origin}/?store=${encodeURIComponent(side.storeUrl)}&token=${token}`);
process.on("SIGINT", () => void side.stop().then(() => process.exit(0)));
