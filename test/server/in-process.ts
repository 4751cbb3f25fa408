/**
 * A store server in this process: createStoreApp served on a loopback port by the platform's server
 * (what `agl store` serves with), stopped gracefully: requests in flight are answered, and connections
 * waiting for a request (a browser's spare one, idle keep-alive ones) do not hold the stop.
 */
import { serveFetch } from "../../src/platform/index.ts";
import { createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import type { LightningStore } from "../../src/store/base.ts";

export interface InProcessServer {
  url: string;
  close(): Promise<void>;
}

export async function startInProcess(store: LightningStore, options: StoreAppOptions = {}): Promise<InProcessServer> {
  const app = createStoreApp(store, options);
  const served = await serveFetch(app.fetch, { hostname: "127.0.0.1", port: 0 });
  let closed: Promise<void> | null = null;
  return {
    url: `http://127.0.0.1:${served.port}`,
    close: () => (closed ??= served.stop(true)),
  };
}
