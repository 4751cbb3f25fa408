/**
 * The policy server without a server: the same Hono app `agl serve` runs (createPolicyApp), answered in
 * this process through `app.fetch`. For a browser tab, which cannot listen on a port, and for tests.
 * Clients reach it through `fetch` (give it to the `openai` client: `new OpenAI({ baseURL, fetch })`):
 * a request to the server's origin is handed to the app, anything else goes to the global fetch. Routed
 * calls (`/rollout/{rid}/attempt/{aid}/v1/…`, what a runner's ProxyLLM resolves to) are recorded in the
 * store with their token ids as over HTTP. It has the lifecycle an algorithm expects of an LLM proxy.
 */
import type { Hono } from "hono";
import { ValidationError } from "../types/errors.ts";
import { type PolicyAppOptions, PolicyAppServer } from "./policy-server.ts";

/** The origin of an in-process server by default: `.invalid` names resolve nowhere (RFC 2606), so a client
 * that was not given the server's `fetch` fails at once instead of reaching some other host. */
export const IN_PROCESS_ORIGIN = "http://policy-server.invalid";

export interface InProcessPolicyServerOptions extends Omit<PolicyAppOptions, "bindAddress" | "allowedHosts"> {
  /** The origin of `endpoint` (scheme, host, port; no path) [IN_PROCESS_ORIGIN]. */
  origin?: string;
}

export class InProcessPolicyServer extends PolicyAppServer {
  readonly origin: string;
  private app: Hono | null = null;

  constructor(options: InProcessPolicyServerOptions) {
    // No address is listened on: the app's Host check gets no bind address or extra names.
    super({ ...options, bindAddress: undefined, allowedHosts: undefined });
    const origin = options.origin ?? IN_PROCESS_ORIGIN;
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      throw new ValidationError(`origin ${JSON.stringify(origin)} is not a URL`, ["origin"]);
    }
    if (url.origin !== origin.replace(/\/$/, ""))
      throw new ValidationError(`origin ${JSON.stringify(origin)} must be a scheme and host only (${url.origin})`, ["origin"]);
    this.origin = url.origin;
  }

  isRunning(): boolean {
    return this.app !== null;
  }

  async start(): Promise<void> {
    this.app ??= this.createApp();
  }

  async stop(): Promise<void> {
    this.app = null;
  }

  /** `<origin>/v1`. */
  get endpoint(): string {
    return `${this.origin}/v1`;
  }

  /**
   * A `fetch` for the server's clients: requests to its origin are answered by the app (a 503 in the
   * OpenAI error shape while it is stopped), others go to the global `fetch`.
   */
  readonly fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    if (new URL(request.url).origin !== this.origin) return globalThis.fetch(request);
    const app = this.app;
    if (app === null)
      return Response.json(
        { error: { message: "the in-process policy server is stopped", type: "server_error", param: null, code: "server_stopped" } },
        { status: 503 },
      );
    return app.fetch(request);
  };
}
