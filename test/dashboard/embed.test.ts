/** The committed asset module is what scripts/embed-dashboard.mjs makes from web/ and the vendored files today. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs build script without type declarations
import { generate } from "../../scripts/embed-dashboard.mjs";

describe("src/server/dashboard/assets.generated.ts", () => {
  it("is up to date with src/server/dashboard/web/ and node_modules (run: node scripts/embed-dashboard.mjs)", () => {
    const committed = readFileSync(new URL("../../src/server/dashboard/assets.generated.ts", import.meta.url), "utf8");
    expect(committed === (generate() as string), "stale: run `node scripts/embed-dashboard.mjs` and commit the result").toBe(true);
  });
});
