/**
 * The libSQL schema as code (drizzle-orm sqlite-core). drizzle-kit generates the migrations under
 * ./migrations from this file (`npx drizzle-kit generate`, then `npx tsx scripts/embed-migrations.ts`).
 *
 * Layout: the columns the store filters, sorts or joins on are real columns; nested data (input, config,
 * metadata, attributes, events...) is JSON text, read and written whole: `text(name, { mode: "json" })`
 * marks those columns for the converters of tables.ts (the SQL type is TEXT either way). Column names are the wire
 * field names, so a row maps to a model object without renaming. Tables are rowid tables: `rowid`
 * (or the `INTEGER PRIMARY KEY` alias) is the insertion order that unsorted queries return.
 */
import { sql } from "drizzle-orm";
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

export const rollouts = sqliteTable(
  "rollouts",
  {
    rollout_id: text("rollout_id").primaryKey(),
    /** JSON (any value, `null` included). */
    input: text("input", { mode: "json" }).notNull(),
    start_time: real("start_time").notNull(),
    end_time: real("end_time"),
    mode: text("mode"),
    resources_id: text("resources_id"),
    status: text("status").notNull(),
    /** JSON object (RolloutConfig). */
    config: text("config", { mode: "json" }).notNull(),
    /** JSON object or NULL. */
    metadata: text("metadata", { mode: "json" }),
  },
  (t) => [
    // The watchdog lists preparing/running rollouts; queryRollouts filters by status.
    index("rollouts_status_idx").on(t.status),
    // The newest rollouts first (the dashboard's default order: start_time DESC, ties in insertion order)
    // straight from the index, without sorting every rollout (migration 0003).
    index("rollouts_start_time_idx").on(sql`${t.start_time} DESC`),
  ],
);

export const attempts = sqliteTable(
  "attempts",
  {
    rollout_id: text("rollout_id").notNull(),
    attempt_id: text("attempt_id").notNull(),
    sequence_id: integer("sequence_id").notNull(),
    start_time: real("start_time").notNull(),
    end_time: real("end_time"),
    status: text("status").notNull(),
    worker_id: text("worker_id"),
    last_heartbeat_time: real("last_heartbeat_time"),
    metadata: text("metadata", { mode: "json" }),
    /**
     * Not a model field: on a rollout's latest attempt, the rollout's watchdog deadline (decisions.ts
     * `watchdogDeadline`), NULL when it has none and on every other attempt. Kept by the storage on each
     * write (an attempt row is rewritten on every heartbeat anyway, so this costs no extra statement).
     */
    watchdog_deadline: real("watchdog_deadline"),
  },
  (t) => [
    primaryKey({ columns: [t.rollout_id, t.attempt_id] }),
    // Latest attempt (max sequence_id), attempt counts and queryAttempts' default order.
    uniqueIndex("attempts_rollout_sequence_idx").on(t.rollout_id, t.sequence_id),
    // The watchdog's due rollouts in deadline order; only attempts with a deadline are in it (migration 0002).
    index("attempts_watchdog_deadline_idx").on(t.watchdog_deadline, t.rollout_id).where(sql`${t.watchdog_deadline} IS NOT NULL`),
  ],
);

export const spans = sqliteTable(
  "spans",
  {
    /** Insertion order (rowid alias). */
    id: integer("id").primaryKey(),
    rollout_id: text("rollout_id").notNull(),
    attempt_id: text("attempt_id").notNull(),
    sequence_id: integer("sequence_id").notNull(),
    trace_id: text("trace_id").notNull(),
    span_id: text("span_id").notNull(),
    parent_id: text("parent_id"),
    name: text("name").notNull(),
    start_time: real("start_time"),
    end_time: real("end_time"),
    /** JSON object: every other field of the span (status, attributes, events, links, context, parent, resource, extra keys). */
    body: text("body", { mode: "json" }).notNull(),
  },
  (t) => [
    // Duplicate detection (ON CONFLICT DO NOTHING) and span lookups per rollout and attempt.
    uniqueIndex("spans_key_idx").on(t.rollout_id, t.attempt_id, t.span_id),
    // querySpans' default order (sequence_id) within a rollout, without a sort step (migration 0001).
    index("spans_rollout_sequence_idx").on(t.rollout_id, t.sequence_id),
  ],
);

/** The FIFO queue of rollout ids; `id` orders it. */
export const queue = sqliteTable(
  "queue",
  {
    id: integer("id").primaryKey(),
    rollout_id: text("rollout_id").notNull(),
  },
  (t) => [index("queue_rollout_idx").on(t.rollout_id)],
);

/** Per-rollout span sequence counters. */
export const spanSequences = sqliteTable("span_sequences", {
  rollout_id: text("rollout_id").primaryKey(),
  value: integer("value").notNull(),
});

export const resources = sqliteTable(
  "resources",
  {
    resources_id: text("resources_id").primaryKey(),
    create_time: real("create_time").notNull(),
    update_time: real("update_time").notNull(),
    version: integer("version").notNull(),
    /** JSON object (NamedResources). */
    resources: text("resources", { mode: "json" }).notNull(),
    /** Raised on every write: the latest resources are the most recently written ones. */
    write_order: integer("write_order").notNull(),
  },
  (t) => [index("resources_write_order_idx").on(t.write_order)],
);

export const workers = sqliteTable("workers", {
  worker_id: text("worker_id").primaryKey(),
  status: text("status").notNull().default("unknown"),
  /** JSON object or NULL. */
  heartbeat_stats: text("heartbeat_stats", { mode: "json" }),
  last_heartbeat_time: real("last_heartbeat_time"),
  last_dequeue_time: real("last_dequeue_time"),
  last_busy_time: real("last_busy_time"),
  last_idle_time: real("last_idle_time"),
  current_rollout_id: text("current_rollout_id"),
  current_attempt_id: text("current_attempt_id"),
});

/**
 * Row counts, so that a total costs one row read instead of a count over an index that grows with the
 * data: `name` is a table (`rollouts`, `attempts`, `spans`, `resources`, `workers`) or
 * `rollouts.status:<status>`. The storage counts the rows it makes on every rollout's path (rollouts,
 * attempts, spans) and each change of a rollout's status itself: the changes are held back with the rows
 * and written in one statement a commit (row-cache.ts), where a trigger ran a statement or two per row
 * (migration 0004). Triggers count workers and resources (rare writes) and every delete, so rows deleted
 * by hand are counted too (migrations 0003, 0004). Every LightningStore writing the file counts, whichever
 * process it is; rows inserted by other means than a store are not.
 */
export const rowCounts = sqliteTable("row_counts", {
  name: text("name").primaryKey(),
  n: integer("n").notNull(),
});
