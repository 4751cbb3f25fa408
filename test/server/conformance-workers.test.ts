/**
 * The store conformance suite through the HTTP client against `agl store --workers 2` on each runtime:
 * two processes serving one libSQL file, each request going to either.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { RUNTIMES } from "../runtimes.ts";
import { runRemoteConformance } from "./remote-conformance.ts";

const dir = mkdtempSync(join(tmpdir(), "conformance-workers-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

for (const runtime of RUNTIMES) runRemoteConformance(runtime, ["--workers", "2", "--db", `file:${join(dir, `${runtime}.db`)}`]);
