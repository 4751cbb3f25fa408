/** The store core, split by concern under core/ (the façade is core/store.ts). */
export { LightningStoreCore, type LightningStoreCoreOptions } from "./core/store.ts";
export type { StoreChange } from "./core/waits.ts";
