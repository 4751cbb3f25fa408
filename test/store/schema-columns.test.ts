/**
 * A model field is its zod schema (src/types/) plus a column of the libSQL schema
 * (src/store/libsql/schema.ts) of the same name: the store's field lists come from the zod objects and
 * its converters from the drizzle tables (src/store/libsql/tables.ts), so the two must agree. Every
 * field has a column and every column holds a field, but for the deliberate exceptions listed here; and
 * every field, set to a value other than its default, comes back from the file after a reopen.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getTableColumns } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import { afterAll, describe, expect, it } from "vitest";
import type { z } from "zod";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import * as schema from "../../src/store/libsql/schema.ts";
import { SPECS } from "../../src/store/libsql/tables.ts";
import { Attempt, ResourcesUpdate, Rollout, Span, Worker } from "../../src/types/index.ts";

interface Collection {
  model: z.ZodObject;
  table: SQLiteTable;
  /** Fields with no column of their own, and why. */
  notColumns?: Record<string, string>;
  /** Columns that hold no field, and why. */
  notFields?: Record<string, string>;
}

const inBody = "kept in the span's JSON body column";

const COLLECTIONS: Record<keyof typeof SPECS, Collection> = {
  rollouts: { model: Rollout, table: schema.rollouts },
  attempts: {
    model: Attempt,
    table: schema.attempts,
    notFields: { watchdog_deadline: "the rollout's watchdog deadline, kept on its latest attempt" },
  },
  resources: { model: ResourcesUpdate, table: schema.resources, notFields: { write_order: "finds the latest resources" } },
  workers: { model: Worker, table: schema.workers },
  spans: {
    model: Span,
    table: schema.spans,
    notColumns: { status: inBody, attributes: inBody, events: inBody, links: inBody, context: inBody, parent: inBody, resource: inBody },
    notFields: { id: "insertion order (rowid)", body: "every field without a column, as JSON" },
  },
};

describe("the libSQL tables and the zod schemas", () => {
  for (const [name, c] of Object.entries(COLLECTIONS)) {
    const fields = Object.keys(c.model.shape);
    const columns = Object.values(getTableColumns(c.table)).map((col) => col.name);
    const notColumns = Object.keys(c.notColumns ?? {});
    const notFields = Object.keys(c.notFields ?? {});

    it(`${name}: every field has a column and every column holds a field, but for the listed exceptions`, () => {
      expect(
        fields.filter((f) => !columns.includes(f) && !notColumns.includes(f)),
        "fields without a column",
      ).toEqual([]);
      expect(
        columns.filter((col) => !fields.includes(col) && !notFields.includes(col)),
        "columns without a field",
      ).toEqual([]);
      // An exception that no longer applies is a stale entry: the list stays a decision.
      expect(
        notColumns.filter((f) => !fields.includes(f) || columns.includes(f)),
        "stale field exceptions",
      ).toEqual([]);
      expect(
        notFields.filter((col) => !columns.includes(col) || fields.includes(col)),
        "stale column exceptions",
      ).toEqual([]);
    });

    it(`${name}: the store reads and writes the columns that hold fields, in the order of the schema's keys`, () => {
      const stored = SPECS[name as keyof typeof SPECS].columns;
      // A span's columns lead its row and `body` holds the rest; every other row is its fields, in order,
      // so its JSON keys come out in the same order from every store.
      if (name === "spans") expect(stored).toEqual(columns.filter((col) => col !== "id"));
      else expect(stored).toEqual(fields);
    });
  }
});

describe("every field of a rollout, attempt, resources snapshot and worker", () => {
  const dir = mkdtempSync(join(tmpdir(), "lightning-schema-columns-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("comes back from the file as written (read from SQL: the reopened store has no cached rows)", async () => {
    const url = `file:${join(dir, "fields.db")}`;
    const store = await LibsqlLightningStore.open(url);
    const resources = await store.addResources({ p: { resource_type: "prompt_template", template: "{x}", engine: "f-string" } });
    const enqueued = await store.enqueueRollout(
      { task: [1, "two", null] },
      {
        mode: "val",
        resources_id: resources.resources_id,
        config: { timeout_seconds: 60, unresponsive_seconds: 30, max_attempts: 3, retry_condition: ["failed"] },
        metadata: { tag: "x", nested: { n: 1 } },
      },
    );
    const claimed = await store.dequeueRollout({ worker_id: "w1" });
    const attempt = await store.updateAttempt(enqueued.rollout_id, claimed!.attempt.attempt_id, {
      status: "succeeded",
      last_heartbeat_time: 1_700_000_000.5,
      metadata: { a: 1 },
    });
    await store.updateWorker("w1", { gpu: 0.5 });
    const before = {
      rollout: await store.getRolloutById(enqueued.rollout_id),
      attempt: await store.getLatestAttempt(enqueued.rollout_id),
      resources: await store.getResourcesById(resources.resources_id),
      worker: await store.getWorkerById("w1"),
    };
    await store.close();

    // Each field is set, so a field that did not come back is not mistaken for its default; a worker
    // that finished its attempt is idle and holds no current rollout.
    const nulls = Object.fromEntries(
      Object.entries(before).map(([k, row]) => [k, Object.keys(row!).filter((f) => row![f as never] === null)]),
    );
    expect(nulls).toEqual({ rollout: [], attempt: [], resources: [], worker: ["current_rollout_id", "current_attempt_id"] });
    expect(before.attempt).toEqual(attempt);

    const reopened = await LibsqlLightningStore.open(url);
    try {
      expect({
        rollout: await reopened.getRolloutById(enqueued.rollout_id),
        attempt: await reopened.getLatestAttempt(enqueued.rollout_id),
        resources: await reopened.getResourcesById(resources.resources_id),
        worker: await reopened.getWorkerById("w1"),
      }).toEqual(before);
    } finally {
      await reopened.close();
    }
  });
});
