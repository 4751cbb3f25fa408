/** The LightningStore conformance suite against the in-memory store. */
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { runStoreConformance } from "./conformance.ts";

runStoreConformance("InMemoryLightningStore", ({ clock }) => new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 }));
