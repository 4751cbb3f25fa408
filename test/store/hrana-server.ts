/**
 * A small libSQL server for tests: the Hrana v2 protocol over HTTP (`POST /v2/pipeline`, JSON), what
 * `@libsql/client` speaks to `libsql://` / `http(s)://` URLs (sqld, Turso), backed by SQLite files through
 * the `libsql` binding. sqld itself is not on npm, and the store's remote path must be tested end to end.
 *
 * Each bearer token names its own database file (an unknown token gets 401), so tests can hand every store
 * a fresh database on one server. Each stream (baton) holds its own connection, so a transaction spans
 * the HTTP requests of its stream, as on sqld. Values follow the protocol: the client sends JavaScript
 * numbers as floats, integers come back as decimal strings.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";

interface Statement {
  reader: boolean;
  raw(on: boolean): Statement;
  columns(): { name: string; type: string | null }[];
  all(args: unknown[]): unknown[][];
  run(args: unknown[]): { changes: number; lastInsertRowid: number | bigint };
}
interface Database {
  prepare(sql: string): Statement;
  exec(sql: string): void;
  close(): void;
  inTransaction: boolean;
}
const Database = createRequire(import.meta.url)("libsql") as new (path: string, o?: { timeout?: number }) => Database;

type HranaValue =
  | { type: "null" }
  | { type: "integer"; value: string }
  | { type: "float"; value: number }
  | { type: "text"; value: string }
  | { type: "blob"; base64: string };
interface HranaStmt {
  sql?: string;
  sql_id?: number;
  args?: HranaValue[];
  named_args?: { name: string; value: HranaValue }[];
  want_rows?: boolean;
}
type HranaCond =
  | { type: "ok" | "error"; step: number }
  | { type: "not"; cond: HranaCond }
  | { type: "and" | "or"; conds: HranaCond[] }
  | { type: "is_autocommit" };
interface HranaRequest {
  type: string;
  stmt?: HranaStmt;
  batch?: { steps: { condition?: HranaCond; stmt: HranaStmt }[] };
  sql?: string;
  sql_id?: number;
}

interface Stream {
  db: Database;
  sqls: Map<number, string>;
  /**
   * Prepared statements by SQL. A statement that got SQLITE_BUSY stays active until it runs again (the
   * binding resets it then); a new one per retry would leave the old ones active, and COMMIT would then
   * fail with "SQL statements in progress".
   */
  prepared: Map<string, Statement>;
}

export interface HranaServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** Pipeline requests served so far. */
  readonly requests: number;
  close(): Promise<void>;
}

class HranaError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

/** A binding error as the protocol reports it: SQLite's message and code. */
function sqliteError(e: unknown): HranaError {
  const err = e as { message?: string; code?: string };
  return new HranaError(err.message ?? String(e), err.code ?? "SQLITE_ERROR");
}

function fromHrana(v: HranaValue): unknown {
  switch (v.type) {
    case "null":
      return null;
    case "integer": {
      const n = BigInt(v.value);
      return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
    }
    case "float":
      return v.value;
    case "text":
      return v.value;
    case "blob":
      return Buffer.from(v.base64, "base64");
  }
}

function toHrana(v: unknown): HranaValue {
  if (v === null || v === undefined) return { type: "null" };
  if (typeof v === "bigint") return { type: "integer", value: v.toString() };
  // The binding gives REAL and INTEGER columns alike as numbers; an integral one past 2^53 can only be a
  // REAL (a huge start_time), and a real server answers it as a float.
  if (typeof v === "number") return Number.isSafeInteger(v) ? { type: "integer", value: String(v) } : { type: "float", value: v };
  if (typeof v === "string") return { type: "text", value: v };
  if (v instanceof Uint8Array) return { type: "blob", base64: Buffer.from(v).toString("base64") };
  throw new Error(`unexpected value from SQLite: ${String(v)}`);
}

/** How long a statement keeps retrying while another connection holds the lock (as a busy timeout would). */
const BUSY_TIMEOUT_MS = 10_000;

/**
 * Runs a statement; on SQLITE_BUSY it retries after a pause. The binding would otherwise wait for the lock
 * synchronously and block this process's event loop, and with it the request that would release the lock.
 */
async function execute(s: Stream, stmt: HranaStmt) {
  const deadline = Date.now() + BUSY_TIMEOUT_MS;
  for (;;) {
    try {
      return executeOnce(s, stmt);
    } catch (e) {
      if (!(e instanceof HranaError) || e.code !== "SQLITE_BUSY" || Date.now() > deadline) throw e;
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function executeOnce(s: Stream, stmt: HranaStmt) {
  const sql = stmt.sql ?? (stmt.sql_id !== undefined ? s.sqls.get(stmt.sql_id) : undefined);
  if (sql === undefined) throw new HranaError("statement has neither sql nor a stored sql_id", "PROTOCOL");
  if (stmt.named_args && stmt.named_args.length > 0) throw new HranaError("named arguments are not supported here", "PROTOCOL");
  const args = (stmt.args ?? []).map(fromHrana);
  let st: Statement;
  try {
    let cached = s.prepared.get(sql);
    if (cached === undefined) {
      cached = s.db.prepare(sql);
      s.prepared.set(sql, cached);
    }
    st = cached;
    if (st.reader) {
      const rows = st.raw(true).all(args);
      return {
        cols: st.columns().map((c) => ({ name: c.name, decltype: c.type })),
        rows: stmt.want_rows === false ? [] : rows.map((r) => r.map(toHrana)),
        affected_row_count: 0,
        last_insert_rowid: null,
      };
    }
    const r = st.run(args);
    return { cols: [], rows: [], affected_row_count: r.changes, last_insert_rowid: String(r.lastInsertRowid) };
  } catch (e) {
    throw sqliteError(e);
  }
}

function holds(c: HranaCond, s: Stream, results: unknown[], errors: unknown[]): boolean {
  switch (c.type) {
    case "ok":
      return results[c.step] !== null && results[c.step] !== undefined;
    case "error":
      return errors[c.step] !== null && errors[c.step] !== undefined;
    case "not":
      return !holds(c.cond, s, results, errors);
    case "and":
      return c.conds.every((x) => holds(x, s, results, errors));
    case "or":
      return c.conds.some((x) => holds(x, s, results, errors));
    case "is_autocommit":
      return !s.db.inTransaction;
  }
}

const errorOf = (e: unknown) =>
  e instanceof HranaError ? { message: e.message, code: e.code } : { message: String(e), code: "SERVER_ERROR" };

async function serve(s: Stream, req: HranaRequest): Promise<unknown> {
  switch (req.type) {
    case "execute":
      return { type: "execute", result: await execute(s, req.stmt!) };
    case "batch": {
      const results: unknown[] = [];
      const errors: unknown[] = [];
      for (const step of req.batch!.steps) {
        if (step.condition && !holds(step.condition, s, results, errors)) {
          results.push(null);
          errors.push(null);
          continue;
        }
        try {
          results.push(await execute(s, step.stmt));
          errors.push(null);
        } catch (e) {
          results.push(null);
          errors.push(errorOf(e));
        }
      }
      return { type: "batch", result: { step_results: results, step_errors: errors } };
    }
    case "sequence": {
      const sql = req.sql ?? (req.sql_id !== undefined ? s.sqls.get(req.sql_id) : undefined);
      try {
        s.db.exec(sql ?? "");
      } catch (e) {
        throw sqliteError(e);
      }
      return { type: "sequence" };
    }
    case "store_sql":
      s.sqls.set(req.sql_id!, req.sql!);
      return { type: "store_sql" };
    case "close_sql":
      s.sqls.delete(req.sql_id!);
      return { type: "close_sql" };
    case "get_autocommit":
      return { type: "get_autocommit", is_autocommit: !s.db.inTransaction };
    default:
      throw new HranaError(`request type ${req.type} is not supported here`, "PROTOCOL");
  }
}

/**
 * Starts a server on an ephemeral port. `databases(token)` gives the file for a bearer token, or
 * undefined to refuse it (401).
 */
export async function startHranaServer(databases: (token: string) => string | undefined): Promise<HranaServer> {
  const streams = new Map<string, Stream>();
  /** Files already switched to WAL, as sqld runs them (in rollback-journal mode a COMMIT waits for every reader). */
  const inWal = new Set<string>();
  let batons = 0;
  let requests = 0;
  const reply = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === "GET" && req.url === "/v2") return reply(res, 200, {});
    if (req.method !== "POST" || req.url !== "/v2/pipeline") return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const path = token === undefined ? undefined : databases(token);
    if (path === undefined) return reply(res, 401, { error: "Unauthorized: unknown or missing token" });
    requests++;
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { baton?: string | null; requests: HranaRequest[] };
    let baton = body.baton ?? null;
    let stream: Stream | undefined;
    if (baton === null) {
      // (Almost) no busy wait inside the binding: `execute` retries without blocking the event loop.
      stream = { db: new Database(path, { timeout: 1 }), sqls: new Map(), prepared: new Map() };
      if (!inWal.has(path)) {
        stream.db.exec("PRAGMA journal_mode = WAL");
        inWal.add(path);
      }
      baton = `b${++batons}`;
      streams.set(baton, stream);
    } else {
      stream = streams.get(baton);
      if (stream === undefined) return reply(res, 400, { error: `unknown baton ${baton}` });
    }
    const results: unknown[] = [];
    for (const r of body.requests) {
      if (r.type === "close") {
        if (stream.db.inTransaction) stream.db.exec("ROLLBACK");
        stream.db.close();
        streams.delete(baton!);
        baton = null;
        results.push({ type: "ok", response: { type: "close" } });
        continue;
      }
      try {
        results.push({ type: "ok", response: await serve(stream, r) });
      } catch (e) {
        results.push({ type: "error", error: errorOf(e) });
      }
    }
    // A closed stream gets no new baton; an open one keeps its own.
    return reply(res, 200, { baton, base_url: null, results });
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => reply(res, 500, { error: String(e) }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return requests;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const s of streams.values()) s.db.close();
        streams.clear();
        server.closeAllConnections();
        server.close((e) => (e ? reject(e) : resolve()));
      }),
  };
}
