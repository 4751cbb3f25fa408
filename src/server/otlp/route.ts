/**
 * `POST /v1/traces`: OTLP/HTTP with protobuf or JSON bodies (docs/departures.md#12), gzip either way.
 * Responses use the request's encoding: an `ExportTraceServiceResponse` on success (with partial
 * success when spans lacked rollout/attempt ids), a `google.rpc.Status` on failure.
 */
import { create, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf";
import type { DescMessage, JsonValue } from "@bufbuild/protobuf";
import { Hono, type Context } from "hono";
import type { LightningStore } from "../../store/base.ts";
import { LightningError } from "../../types/index.ts";
import { parseJsonBody } from "../json-body.ts";
import type { LogWriter } from "../../platform/log.ts";
import { addSpansAssigningSequence } from "../spans.ts";
import { spansFromOtlp, type TraceRequestMsg } from "./mapping.ts";
import { ExportTraceServiceRequestSchema, ExportTraceServiceResponseSchema, RpcStatusSchema } from "./schema.ts";

type Encoding = "protobuf" | "json";

/** An OTLP failure with its HTTP status and google.rpc code. */
class OtlpFailure extends Error {
  constructor(
    readonly httpStatus: number,
    readonly rpcCode: number,
    message: string,
  ) {
    super(message);
  }
}

// google.rpc.Code values.
const INVALID_ARGUMENT = 3;
const NOT_FOUND = 5;
const INTERNAL = 13;

/** Media type without parameters, lowercased. */
const mediaType = (ct: string | undefined): string => (ct ?? "").split(";")[0]!.trim().toLowerCase();

const acceptsGzip = (header: string | undefined): boolean =>
  (header ?? "").split(",").some((part) => part.split(";")[0]!.trim().toLowerCase() === "gzip");

/** Reads a whole stream, failing once more than `limit` bytes arrive (a gzip bomb stops early). */
async function readLimited(stream: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw new OtlpFailure(413, INVALID_ARGUMENT, `OTLP payload exceeds ${limit} bytes once decompressed`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

async function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  return readLimited(new Blob([bytes as BlobPart]).stream().pipeThrough(new CompressionStream("gzip")), Number.MAX_SAFE_INTEGER);
}

const hexToBase64 = (hex: unknown): unknown => {
  if (typeof hex !== "string" || !/^[0-9a-fA-F]*$/.test(hex) || hex.length % 2 !== 0) return hex;
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
};

const ID_KEYS = new Set(["traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"]);

/** OTLP/JSON writes trace and span ids as hex, where protobuf JSON expects base64: convert them in place. */
function otlpJsonIdsToBase64(v: unknown): void {
  if (Array.isArray(v)) {
    for (const x of v) otlpJsonIdsToBase64(x);
  } else if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) {
      if (ID_KEYS.has(k)) o[k] = hexToBase64(o[k]);
      else otlpJsonIdsToBase64(o[k]);
    }
  }
}

function decode(bytes: Uint8Array, encoding: Encoding): TraceRequestMsg {
  try {
    if (bytes.byteLength === 0) return { resourceSpans: [] };
    if (encoding === "protobuf") return fromBinary(ExportTraceServiceRequestSchema, bytes) as unknown as TraceRequestMsg;
    const json = parseJsonBody(new TextDecoder().decode(bytes), "OTLP/JSON body");
    otlpJsonIdsToBase64(json);
    return fromJson(ExportTraceServiceRequestSchema, json as JsonValue, { ignoreUnknownFields: true }) as unknown as TraceRequestMsg;
  } catch (e) {
    throw new OtlpFailure(400, INVALID_ARGUMENT, `Unable to parse OTLP traces payload: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function encode(schema: DescMessage, value: Record<string, unknown>, encoding: Encoding): Uint8Array {
  const msg = create(schema, value as never);
  return encoding === "protobuf" ? toBinary(schema, msg) : new TextEncoder().encode(JSON.stringify(toJson(schema, msg)));
}

export interface OtlpOptions {
  /** Largest body accepted after decompression, in bytes. */
  maxBytes: number;
  log: LogWriter;
}

export function otlpTracesHandler(store: LightningStore, options: OtlpOptions) {
  return async (c: Context): Promise<Response> => {
    const type = mediaType(c.req.header("content-type"));
    const encoding: Encoding = type === "application/json" ? "json" : "protobuf";
    const reply = async (status: number, schema: DescMessage, value: Record<string, unknown>): Promise<Response> => {
      let body = encode(schema, value, encoding);
      const headers: Record<string, string> = { "content-type": encoding === "json" ? "application/json" : "application/x-protobuf" };
      if (acceptsGzip(c.req.header("accept-encoding"))) {
        body = await gzip(body);
        headers["content-encoding"] = "gzip";
      }
      return new Response(body as BodyInit, { status, headers });
    };
    try {
      if (type !== "application/x-protobuf" && type !== "application/json") {
        throw new OtlpFailure(
          415,
          INVALID_ARGUMENT,
          `Unsupported Content-Type '${c.req.header("content-type") ?? ""}', expected 'application/x-protobuf' or 'application/json'`,
        );
      }
      const contentEncoding = (c.req.header("content-encoding") ?? "identity").trim().toLowerCase();
      if (contentEncoding !== "gzip" && contentEncoding !== "identity") {
        throw new OtlpFailure(415, INVALID_ARGUMENT, `Unsupported Content-Encoding '${contentEncoding}', expected gzip or none`);
      }
      let stream = c.req.raw.body ?? new Blob([]).stream();
      if (contentEncoding === "gzip") stream = stream.pipeThrough(new DecompressionStream("gzip"));
      let bytes: Uint8Array;
      try {
        bytes = await readLimited(stream, options.maxBytes);
      } catch (e) {
        if (e instanceof OtlpFailure) throw e;
        throw new OtlpFailure(400, INVALID_ARGUMENT, `Unable to read OTLP traces payload: ${e instanceof Error ? e.message : String(e)}`);
      }
      const { spans, rejected } = spansFromOtlp(decode(bytes, encoding));
      if (rejected > 0) options.log.warning(`OTLP: ${rejected} span(s) without ${"agentlightning.rollout_id"}/attempt_id were skipped`);
      if (spans.length > 0) await addSpansAssigningSequence(store, spans);
      const partial =
        rejected > 0
          ? {
              partialSuccess: {
                rejectedSpans: BigInt(rejected),
                errorMessage: "spans need agentlightning.rollout_id and agentlightning.attempt_id attributes",
              },
            }
          : {};
      return await reply(200, ExportTraceServiceResponseSchema, partial);
    } catch (e) {
      const failure =
        e instanceof OtlpFailure
          ? e
          : e instanceof LightningError
            ? new OtlpFailure(e.status, e.status === 404 ? NOT_FOUND : e.status === 400 ? INVALID_ARGUMENT : INTERNAL, e.message)
            : null;
      if (!failure) throw e;
      return reply(failure.httpStatus, RpcStatusSchema, { code: failure.rpcCode, message: failure.message });
    }
  };
}

/** `POST /v1/traces`; the OTLP signals this server does not take (metrics, logs, profiles) answer 501. */
export function otlpRoutes(store: LightningStore, options: OtlpOptions): Hono {
  const routes = new Hono();
  routes.post("/v1/traces", otlpTracesHandler(store, options));
  for (const p of ["/v1/metrics", "/v1/logs", "/v1/development/profiles"]) routes.post(p, (c) => c.body(null, 501));
  return routes;
}
