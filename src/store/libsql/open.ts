/**
 * `openStore(url)`: one entry point for every store location. `"memory"` is the plain in-memory store
 * (`InMemoryLightningStore`, no persistence, span eviction); every other value is a libSQL URL
 * (`file:path.db`, `:memory:`, `libsql://...`, `http(s)://...`) opened as a `LibsqlLightningStore`.
 */
import type { LightningStore } from "../base.ts";
import { InMemoryLightningStore, type InMemoryLightningStoreOptions } from "../memory.ts";
import { DEFAULT_STORE_URL, LibsqlLightningStore, type LibsqlLightningStoreOptions } from "./store.ts";

export type OpenStoreOptions = LibsqlLightningStoreOptions & InMemoryLightningStoreOptions;

export async function openStore(url: string = DEFAULT_STORE_URL, options: OpenStoreOptions = {}): Promise<LightningStore> {
  if (url === "memory") return new InMemoryLightningStore(options);
  return LibsqlLightningStore.open(url, options);
}
