/**
 * Several processes on one libSQL file: claims are atomic across processes, and a SIGKILLed writer
 * loses nothing whose promise had resolved (WAL, synchronous=NORMAL) and leaves an intact file.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { openDriver, parseDbUrl } from "../../src/store/libsql/driver.ts";
import { launchCommand } from "../runtimes.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const childScript = join(root, "test/store/libsql-child.ts");
const dir = mkdtempSync(join(tmpdir(), "libsql-processes-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Child {
  proc: ChildProcessWithoutNullStreams;
  lines: string[];
  /** Resolves when a line satisfying `pred` has arrived (or rejects when the child exits first). */
  until(pred: (line: string, all: string[]) => boolean): Promise<void>;
  exited: Promise<number | null>;
}

function startChild(args: string[]): Child {
  const proc = spawn(...launchCommand("node", childScript, args), { cwd: root, stdio: ["pipe", "pipe", "pipe"] });
  const lines: string[] = [];
  let stderr = "";
  proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const watchers = new Set<() => void>();
  createInterface({ input: proc.stdout }).on("line", (l) => {
    lines.push(l);
    for (const w of [...watchers]) w();
  });
  const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)));
  const until = (pred: (line: string, all: string[]) => boolean) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (lines.length > 0 && pred(lines[lines.length - 1]!, lines)) {
          watchers.delete(check);
          resolve();
        }
      };
      watchers.add(check);
      check();
      void exited.then((code) => {
        if (watchers.has(check)) reject(new Error(`child exited (${code}) early: ${stderr}`));
      });
    });
  return { proc, lines, until, exited };
}

describe("LibsqlLightningStore shared by several processes", () => {
  it("two processes dequeue 2,000 rollouts concurrently: every rollout is claimed exactly once", async () => {
    const url = `file:${join(dir, "dequeue.db")}`;
    const setup = await LibsqlLightningStore.open(url);
    const enqueued = await setup.enqueueManyRollouts(Array.from({ length: 2000 }, (_, i) => ({ input: { i } })));
    await setup.close();

    const children = [startChild(["dequeue", url, "worker-a"]), startChild(["dequeue", url, "worker-b"])];
    await Promise.all(children.map((c) => c.until((l) => l === "ready")));
    for (const c of children) c.proc.stdin.write("go\n");
    await Promise.all(children.map((c) => c.until((l) => l === "done")));
    expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0]);

    const claims = children.map((c) => c.lines.filter((l) => l !== "ready" && l !== "done"));
    const all = claims.flat();
    expect(all).toHaveLength(2000);
    expect(new Set(all).size).toBe(2000);
    expect(new Set(all)).toEqual(new Set(enqueued.map((r) => r.rollout_id)));
    // Both processes really competed for the queue.
    expect(claims[0]!.length).toBeGreaterThan(0);
    expect(claims[1]!.length).toBeGreaterThan(0);

    // The database agrees: one attempt per rollout, made by the process that reported the claim.
    const check = await LibsqlLightningStore.open(url);
    const owner = new Map<string, string>();
    claims[0]!.forEach((id) => owner.set(id, "worker-a"));
    claims[1]!.forEach((id) => owner.set(id, "worker-b"));
    const rollouts = await check.queryRollouts({ limit: -1 });
    expect(rollouts.total).toBe(2000);
    for (const r of rollouts.items) {
      expect(r.status).toBe("preparing");
      const attempts = await check.queryAttempts(r.rollout_id);
      expect(attempts.total).toBe(1);
      expect(attempts.items[0]!.worker_id).toBe(owner.get(r.rollout_id));
    }
    expect(await check.dequeueRollout()).toBeNull();
    await check.close();
  }, 120_000);

  it("a writer killed with SIGKILL mid-stream loses no acknowledged span and leaves an intact file", async () => {
    const url = `file:${join(dir, "kill.db")}`;
    const setup = await LibsqlLightningStore.open(url);
    const ar = await setup.startRollout({ q: "durability" });
    await setup.close();

    const child = startChild(["spans", url, ar.rollout_id, ar.attempt.attempt_id, "8"]);
    await child.until((l) => l === "ready");
    child.proc.stdin.write("go\n");
    await child.until((_l, all) => all.length > 1500);
    child.proc.kill("SIGKILL");
    await child.exited;
    const acked = child.lines.filter((l) => l !== "ready");
    expect(acked.length).toBeGreaterThanOrEqual(1500);

    const reopened = await LibsqlLightningStore.open(url);
    expect(await reopened.integrityCheck()).toEqual(["ok"]);
    const stored = await reopened.querySpans(ar.rollout_id, { limit: -1 });
    const ids = new Set(stored.items.map((s) => s.span_id));
    const missing = acked.filter((id) => !ids.has(id));
    expect(missing).toEqual([]);
    // Nothing half-written either: every stored span reads back whole.
    for (const s of stored.items) expect(s.attributes["gen_ai.prompt.0.content"]).toBe("x".repeat(200));
    // The sequence counter survived with the spans: the next id is past every stored one.
    const maxSeq = Math.max(...stored.items.map((s) => s.sequence_id));
    expect(await reopened.getNextSpanSequenceId(ar.rollout_id, ar.attempt.attempt_id)).toBe(maxSeq + 1);
    await reopened.close();
  }, 120_000);

  it("a writer waiting for another connection's write lock keeps the event loop running, and gives up after busyTimeoutMs", async () => {
    const url = `file:${join(dir, "busy.db")}`;
    const holder = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
    const store = await LibsqlLightningStore.open(url, { busyTimeoutMs: 2000 });
    const impatient = await LibsqlLightningStore.open(url, { busyTimeoutMs: 100 });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holding = holder.tx("w", async () => {
      locked();
      await released;
    });
    await isLocked;
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 10);
    try {
      const t0 = performance.now();
      const waiting = store.enqueueRollout({ q: "after the lock" });
      await expect(impatient.enqueueRollout({ q: "gives up" })).rejects.toMatchObject({ code: "SQLITE_BUSY" });
      expect(performance.now() - t0).toBeGreaterThanOrEqual(90);
      await new Promise((r) => setTimeout(r, 200));
      release();
      await holding;
      const r = await waiting;
      // The event loop ran timers the whole time the write waited for the lock.
      expect(ticks).toBeGreaterThanOrEqual(10);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
      expect((await store.getRolloutById(r.rollout_id))!.input).toEqual({ q: "after the lock" });
      expect((await store.statistics()).total_rollouts).toBe(1);
    } finally {
      clearInterval(ticker);
      await store.close();
      await impatient.close();
      await holder.close();
    }
  });
});
