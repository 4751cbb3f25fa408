/**
 * The store conformance suite through `LightningStoreClient` against a live server: createStoreApp over
 * an InMemoryLightningStore that reads the test's ManualClock, served by @hono/node-server on a loopback
 * port, one server per test.
 */
import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import { LightningStoreClient } from "../../src/client/index.ts";
import { createStoreApp } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { runStoreConformance } from "../store/conformance.ts";

runStoreConformance(
  "LightningStoreClient -> Node server (in-process)",
  async ({ clock }) => {
    const store = new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 });
    const app = createStoreApp(store);
    const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
      const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
    });
    const { port } = server.address() as AddressInfo;
    const client = new LightningStoreClient(`http://127.0.0.1:${port}`, { retryDelays: [], healthRetryDelays: [] });
    let closed = false;
    const close = client.close.bind(client);
    client.close = async () => {
      await close();
      if (closed) return;
      closed = true;
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
    };
    return client;
  },
  { timingSlackMs: 100 },
);
