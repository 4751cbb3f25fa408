/** A store server in this process: createStoreApp served by @hono/node-server on a loopback port. */
import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import { createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import type { LightningStore } from "../../src/store/base.ts";

export interface InProcessServer {
  url: string;
  close(): Promise<void>;
}

export async function startInProcess(store: LightningStore, options: StoreAppOptions = {}): Promise<InProcessServer> {
  const app = createStoreApp(store, options);
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | null = null;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => (closed ??= new Promise<void>((resolve) => server.close(() => resolve()))),
  };
}
