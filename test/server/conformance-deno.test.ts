/** The store conformance suite through the HTTP client against a deno server process on loopback. */
import { runRemoteConformance } from "./remote-conformance.ts";

runRemoteConformance("deno");
