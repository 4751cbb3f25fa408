/**
 * Where an agent's MCP tools come from: a named server and, for each rollout, a connected client.
 *
 * - `StdioToolServer` spawns the server as a child process (StdioClientTransport). By default one
 *   child serves every rollout of this process: a spawn (Node, the tsx loader, the SDK, zod) costs
 *   about 0.7 s of CPU, more than a whole rollout of a small model, while a calculator call over the
 *   pipe costs a few milliseconds. A rollout that sees the server fail fails itself with a
 *   `McpServerError` naming the server, and the broken child is dropped, so the next rollout (the
 *   runner's retry among them) gets a fresh one. After `idleCloseMs` without rollouts the child is
 *   closed, so a program that is done exits. `reuse: false` gives each rollout its own child.
 * - `InProcessToolServer` (tool-server.ts, runtime-neutral) links a client to an `McpServer` in this
 *   process over the SDK's InMemoryTransport.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, type StdioServerParameters } from "@modelcontextprotocol/sdk/client/stdio.js";
import { clientInfo, McpServerError, type ToolServer } from "./tool-server.ts";

export { InProcessToolServer, McpServerError, type ToolServer } from "./tool-server.ts";

export interface StdioToolServerOptions {
  /** One child for all rollouts (default) or one per rollout. */
  reuse?: boolean;
  /** A reused child with no rollout for this long is closed (default 5000 ms). */
  idleCloseMs?: number;
}

export class StdioToolServer implements ToolServer {
  /** The child every rollout shares (reuse), from its spawn on; `sharedClient` once connected. */
  private shared: Promise<Client> | null = null;
  private sharedClient: Client | null = null;
  private users = 0;
  private idle: ReturnType<typeof setTimeout> | null = null;
  private readonly reuse: boolean;
  private readonly idleCloseMs: number;
  /** The pid of each connected child not yet closed (tests kill one). */
  readonly pids = new Map<Client, number>();

  constructor(
    readonly name: string,
    readonly params: StdioServerParameters,
    options: StdioToolServerOptions = {},
  ) {
    this.reuse = options.reuse ?? true;
    this.idleCloseMs = options.idleCloseMs ?? 5000;
  }

  async open(): Promise<Client> {
    if (!this.reuse) return this.spawn();
    if (this.idle !== null) clearTimeout(this.idle);
    this.idle = null;
    this.users++;
    this.shared ??= this.spawn().then((c) => (this.sharedClient = c));
    try {
      return await this.shared;
    } catch (e) {
      this.users--;
      this.shared = null;
      throw e;
    }
  }

  async done(client: Client, broken: boolean): Promise<void> {
    if (this.reuse) this.users--;
    if (client === this.sharedClient) {
      if (!broken) {
        if (this.users === 0) {
          this.idle = setTimeout(() => void this.close(), this.idleCloseMs);
          this.idle.unref?.();
        }
        return;
      }
      this.forgetShared();
    }
    await this.closeClient(client);
  }

  /** Closes the shared child now (a later `open` starts a new one). */
  async close(): Promise<void> {
    if (this.idle !== null) clearTimeout(this.idle);
    this.idle = null;
    const shared = this.shared;
    this.forgetShared();
    const client = await shared?.catch(() => null);
    if (client) await this.closeClient(client);
  }

  private forgetShared(): void {
    this.shared = null;
    this.sharedClient = null;
  }

  private async spawn(): Promise<Client> {
    const transport = new StdioClientTransport(this.params);
    const client = new Client(clientInfo);
    try {
      await client.connect(transport);
    } catch (e) {
      await transport.close().catch(() => undefined);
      throw new McpServerError(this.name, `could not start ${this.commandLine()}: ${(e as Error).message}`, { cause: e });
    }
    if (transport.pid !== null) this.pids.set(client, transport.pid);
    // A child that exits on its own is not handed out again.
    client.onclose = () => {
      this.pids.delete(client);
      if (client === this.sharedClient) this.forgetShared();
    };
    return client;
  }

  private async closeClient(client: Client): Promise<void> {
    this.pids.delete(client);
    await client.close();
  }

  private commandLine(): string {
    return [this.params.command, ...(this.params.args ?? [])].join(" ");
  }
}
