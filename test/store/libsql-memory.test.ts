/** The LightningStore conformance suite against a libSQL in-memory database (`:memory:`). */
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { runStoreConformance } from "./conformance.ts";

runStoreConformance("LibsqlLightningStore(:memory:)", ({ clock }) =>
  LibsqlLightningStore.open(":memory:", { clock, scanDebounceSeconds: 0 }),
);
