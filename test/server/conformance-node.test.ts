/** The store conformance suite through the HTTP client against a node server process on loopback. */
import { runRemoteConformance } from "./remote-conformance.ts";

runRemoteConformance("node");
