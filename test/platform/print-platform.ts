// Run by test/platform/platform.test.ts on each runtime: prints what the platform detected and reads.
import { nextTurn, platform } from "../../src/platform/index.ts";

let turned = false;
const waited = nextTurn().then(() => (turned = true));
await waited;
const snapshot = platform.systemSnapshot();
console.log(
  JSON.stringify({
    runtime: platform.runtime,
    args: platform.args(),
    env: platform.env("AGL_PLATFORM_PROBE") ?? null,
    memory: platform.systemMemoryBytes(-1) > 0,
    hostKnown: typeof snapshot.host === "string",
    turned,
  }),
);
platform.exit(3);
