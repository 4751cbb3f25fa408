export {
  DEFAULT_CACHE_SIZE_MIB,
  DEFAULT_ROW_CACHE_MIB,
  DEFAULT_STORE_URL,
  LibsqlLightningStore,
  type LibsqlLightningStoreOptions,
} from "./store.ts";
export { openStore, type OpenStoreOptions } from "./open.ts";
export { parseDbUrl, type DbLocation } from "./driver.ts";
