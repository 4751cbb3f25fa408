// Run by test/packaging/pack.test.ts under Node, Deno and Bun inside a clean folder where the packed
// tarball is installed as node_modules/lightning-ts. Imports the root and every subpath by package
// name, uses the store (an embedded libSQL file: the native binding and the embedded migrations) and
// the Wasm core and the dashboard's embedded files, and prints one JSON line.
import { readFile } from "node:fs/promises";

const runtime = globalThis.Deno !== undefined ? "deno" : globalThis.Bun !== undefined ? "bun" : "node";
const pkg = JSON.parse(await readFile(new URL("./node_modules/lightning-ts/package.json", import.meta.url), "utf8"));

const exports = {};
for (const key of Object.keys(pkg.exports)) {
  if (key.endsWith(".json")) continue;
  const spec = key === "." ? "lightning-ts" : `lightning-ts${key.slice(1)}`;
  exports[spec] = Object.keys(await import(spec)).sort();
}

const { openStore } = await import("lightning-ts");
const url = `file:store-${runtime}.db`;
let store = await openStore(url);
const queued = await store.enqueueRollout({ question: "2 + 2?" });
const claimed = await store.dequeueRollout({ worker_id: "w1" });
await store.close();
store = await openStore(url);
const reopened = await store.getRolloutById(queued.rollout_id);
await store.close();

const { loadWasmCoreSync, wasmKernels } = await import("lightning-ts/wasm");
const grpo = wasmKernels(loadWasmCoreSync()).grpo(
  { rewards: new Float32Array([1, 0]), mask: new Float32Array([1, 1]), B: 2, T: 1, groups: new Int32Array([0, 0]) },
  true,
);

// The dashboard's files ship inside the package's JavaScript: the store app serves them with no file path.
const { createStoreApp } = await import("lightning-ts/server");
const { InMemoryLightningStore } = await import("lightning-ts/store");
const dashboardStore = new InMemoryLightningStore();
const app = createStoreApp(dashboardStore);
const page = await app.request("/");
const uplot = await app.request("/dashboard/vendor/uplot.mjs");
const dashboard = { page: page.status, type: page.headers.get("content-type"), uplot: (await uplot.text()).includes("uPlot") };
await dashboardStore.close();

console.log(
  JSON.stringify({
    dashboard,
    runtime,
    exports,
    store: { claimed: claimed?.rollout_id === queued.rollout_id, input: reopened?.input },
    grpoAdvantages: Array.from(grpo.advantages),
  }),
);
