/**
 * A scripted upstream for the LLM proxy's tests and bench: each POST to `/v1/chat/completions`,
 * `/v1/completions` or Anthropic's `/v1/messages` (and `/v1/messages/count_tokens`) plays the next step of
 * its script (or the default step), and the upstream keeps every request it got (path, query, body and
 * headers) so tests can count and inspect them.
 */
import { Hono } from "hono";
import { serve } from "@hono/node-server";

export type Step =
  | { kind: "json"; status?: number; body: unknown; headers?: Record<string, string> }
  /** A body that is not JSON (e.g. a gateway's error page). */
  | { kind: "text"; status: number; body: string }
  /**
   * SSE events (objects are sent as `data: <json>`), then `[DONE]`; `named`: Anthropic's, each event's
   * `type` as its `event:` line and no `[DONE]`. `breakAfter` errors the stream after that many events,
   * `stallAfter` stops sending.
   */
  | { kind: "sse"; events: unknown[]; named?: boolean; breakAfter?: number; stallAfter?: number }
  /** Never answers (until the request is aborted). */
  | { kind: "stall" };

export interface Received {
  path: string;
  /** The query string (`?…`, or empty). */
  search: string;
  body: Record<string, unknown>;
  headers: Record<string, string>;
}

export interface ScriptedUpstream {
  /** `http://127.0.0.1:port/v1` */
  url: string;
  received: Received[];
  /** Steps played in order by the next requests. */
  script: Step[];
  /** Awaited on each request, once recorded and before its step plays (a test acts at that moment). */
  onRequest?: (received: Received) => void | Promise<void>;
  stop(): Promise<void>;
}

export const chatAnswer = (content: string, extra: Record<string, unknown> = {}) => ({
  id: `chatcmpl-${Math.random().toString(36).slice(2)}`,
  object: "chat.completion",
  created: 0,
  model: "scripted",
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  ...extra,
});

export const chatChunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) => ({
  id: "chatcmpl-stream",
  object: "chat.completion.chunk",
  created: 0,
  model: "scripted",
  choices: [{ index: 0, delta, finish_reason: finish }],
  ...extra,
});

export async function startScriptedUpstream(defaultStep: Step = { kind: "json", body: chatAnswer("ok") }): Promise<ScriptedUpstream> {
  const received: Received[] = [];
  const script: Step[] = [];
  const upstream: ScriptedUpstream = { url: "", received, script, stop: async () => undefined };
  const enc = new TextEncoder();
  const app = new Hono();
  const play = async (c: import("hono").Context) => {
    const got: Received = {
      path: c.req.path,
      search: new URL(c.req.url).search,
      body: await c.req.json(),
      headers: Object.fromEntries(c.req.raw.headers as unknown as Iterable<[string, string]>),
    };
    received.push(got);
    await upstream.onRequest?.(got);
    const step = script.shift() ?? defaultStep;
    if (step.kind === "json") return c.json(step.body as object, (step.status ?? 200) as 200, step.headers);
    if (step.kind === "text") return c.text(step.body, step.status as 500);
    if (step.kind === "stall")
      return new Promise<Response>((resolve) =>
        c.req.raw.signal.addEventListener("abort", () => resolve(new Response(null, { status: 499 }))),
      );
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (step.breakAfter !== undefined && sent === step.breakAfter) {
          // A pause first, so the events before are on the wire when the connection dies.
          await new Promise((r) => setTimeout(r, 50));
          controller.error(new Error("upstream died"));
          return;
        }
        if (step.stallAfter !== undefined && sent === step.stallAfter) {
          await new Promise((r) => c.req.raw.signal.addEventListener("abort", r));
          controller.close();
          return;
        }
        if (sent === step.events.length) {
          if (!step.named) controller.enqueue(enc.encode("data: [DONE]\n\n"));
          controller.close();
          return;
        }
        const event = step.events[sent++] as { type?: string };
        controller.enqueue(enc.encode(`${step.named ? `event: ${event.type}\n` : ""}data: ${JSON.stringify(event)}\n\n`));
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  };
  app.post("/v1/chat/completions", play);
  app.post("/v1/completions", play);
  app.post("/v1/messages", play);
  app.post("/v1/messages/count_tokens", play);
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  const port = (server.address() as { port: number }).port;
  // Stops at once: a test may leave a request stalled here on purpose.
  const stop = () =>
    new Promise<void>((done, fail) => {
      server.close((e) => (e ? fail(e) : done()));
      (server as unknown as { closeAllConnections(): void }).closeAllConnections();
    });
  upstream.url = `http://127.0.0.1:${port}/v1`;
  upstream.stop = stop;
  return upstream;
}
