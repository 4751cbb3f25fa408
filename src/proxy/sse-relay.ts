/**
 * Passes an upstream's server-sent events to the caller as they arrive (one whole event at a time, so
 * an error event can always follow), while keeping the parsed `data:` objects for the span. If the
 * upstream fails mid-stream the caller gets an error event in its API's shape (OpenAI's `data: {"error": …}`,
 * Anthropic's `event: error`, which their clients raise as an APIError) and the stream ends; what arrived
 * before is kept.
 */
import type { JsonObject } from "../tracer/gen-ai.ts";

export interface RelayOutcome {
  /** The JSON objects of the `data:` lines, in order (`[DONE]` left out). */
  chunks: JsonObject[];
  /** Why the stream ended early, or null when the upstream finished it. */
  error: { status: number | null; message: string } | null;
}

export interface RelayOptions {
  /** Called on every piece received (restarts the idle timeout). */
  onData(): void;
  /** Why the upstream read failed, in words (e.g. the attempt's timeout). */
  describeFailure(err: unknown): string;
  /** The SSE event (blank line included) that tells the caller the stream broke off, in its API's shape. */
  errorEvent(message: string): string;
}

const encoder = new TextEncoder();

/** The `data:` payload of one SSE event (its data lines joined), or null when it has none. */
function eventData(event: string): string | null {
  const lines: string[] = [];
  for (const line of event.split(/\r?\n/)) if (line.startsWith("data:")) lines.push(line.slice(line.startsWith("data: ") ? 6 : 5));
  return lines.length > 0 ? lines.join("\n") : null;
}

/** The JSON objects of the events' `data:` payloads (`[DONE]` and payloads that are not JSON objects left out). */
function parseEvents(events: string[]): JsonObject[] {
  const chunks: JsonObject[] = [];
  for (const event of events) {
    const data = eventData(event);
    if (data === null || data.trim() === "[DONE]") continue;
    try {
      const parsed: unknown = JSON.parse(data);
      if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) chunks.push(parsed as JsonObject);
    } catch {
      // Not JSON: forwarded to the caller all the same; the span records what could be read.
    }
  }
  return chunks;
}

export function relaySse(
  upstream: ReadableStream<Uint8Array>,
  o: RelayOptions,
): { body: ReadableStream<Uint8Array>; outcome: Promise<RelayOutcome> } {
  const reader = upstream.getReader();
  const decoder = new TextDecoder();
  /** The events received, parsed only once the stream has ended: no JSON work between two chunks. */
  const events: string[] = [];
  let pending = "";
  let finish!: (r: RelayOutcome) => void;
  const outcome = new Promise<RelayOutcome>((r) => (finish = r));
  let finished = false;
  const end = (error: RelayOutcome["error"]) => {
    if (finished) return;
    finished = true;
    finish({ chunks: parseEvents(events), error });
  };
  const keep = (event: string) => void events.push(event);
  const body = new ReadableStream<Uint8Array>({
    // Reads until a whole event can be forwarded (a pull that enqueues nothing would not be called again).
    async pull(controller) {
      for (;;) {
        let read: ReadableStreamReadResult<Uint8Array>;
        try {
          read = await reader.read();
        } catch (e) {
          const message = `the upstream stream broke off: ${o.describeFailure(e)}`;
          if (pending.trim() !== "") keep(pending);
          controller.enqueue(encoder.encode(o.errorEvent(message)));
          controller.close();
          end({ status: null, message });
          return;
        }
        if (read.done) {
          pending += decoder.decode();
          if (pending.trim() !== "") {
            keep(pending);
            controller.enqueue(encoder.encode(`${pending}\n\n`));
          }
          controller.close();
          end(null);
          return;
        }
        o.onData();
        const startsClean = pending === "";
        pending += decoder.decode(read.value, { stream: true });
        const whole = pending.split(/\r?\n\r?\n/);
        pending = whole.pop()!;
        if (whole.length === 0) continue;
        for (const e of whole) keep(e);
        // The usual case, a read of whole events, goes on as the bytes that came; otherwise the whole events so far.
        controller.enqueue(startsClean && pending === "" ? read.value : encoder.encode(whole.map((e) => `${e}\n\n`).join("")));
        return;
      }
    },
    async cancel(reason) {
      end({ status: null, message: `the caller closed the stream${reason instanceof Error ? `: ${reason.message}` : ""}` });
      await reader.cancel(reason);
    },
  });
  return { body, outcome };
}
