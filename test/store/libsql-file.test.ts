/**
 * The LightningStore conformance suite against libSQL file databases (one fresh file per test, WAL mode),
 * through the native binding (the default) and through `@libsql/client` (the driver that also serves
 * libSQL server URLs).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { runStoreConformance } from "./conformance.ts";

const dir = mkdtempSync(join(tmpdir(), "lightning-libsql-"));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

runStoreConformance("LibsqlLightningStore(file:)", ({ clock }) =>
  LibsqlLightningStore.open(`file:${join(dir, `native-${n++}.db`)}`, { clock, scanDebounceSeconds: 0 }),
);

runStoreConformance("LibsqlLightningStore(file:, @libsql/client)", ({ clock }) =>
  LibsqlLightningStore.open(`file:${join(dir, `client-${n++}.db`)}`, { clock, scanDebounceSeconds: 0, driver: "client" }),
);
