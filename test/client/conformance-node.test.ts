/**
 * The store conformance suite through `LightningStoreClient` against a live server: createStoreApp over
 * an InMemoryLightningStore that reads the test's ManualClock, served by @hono/node-server on a loopback
 * port in this process, one server per test.
 */
import { LightningStoreClient } from "../../src/client/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { httpWire, runStoreConformance } from "../store/conformance.ts";
import { startInProcess } from "../server/in-process.ts";

runStoreConformance(
  "LightningStoreClient -> Node server (in-process)",
  async ({ clock }) => {
    const store = new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 });
    const server = await startInProcess(store);
    const client = new LightningStoreClient(server.url, { retryDelays: [], healthRetryDelays: [] });
    const closeClient = client.close.bind(client);
    client.close = async () => {
      await closeClient();
      await server.close();
      await store.close();
    };
    return client;
  },
  { timingSlackMs: 300, wire: (client) => httpWire((client as LightningStoreClient).serverAddress) },
);
