/**
 * Where an agent's MCP tools come from: a named server and, for each rollout, a connected client. This
 * file is runtime-neutral (a browser tab imports it); the stdio server, which spawns a child process, is in
 * mcp.ts.
 *
 * - `InProcessToolServer` links a client to an `McpServer` in this process over the SDK's
 *   InMemoryTransport (a browser tab, tests and benchmarks: no child process, no serialisation to a pipe).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";

/** The MCP server an agent depends on failed (died, hung, could not start): the attempt fails. */
export class McpServerError extends Error {
  constructor(
    readonly server: string,
    reason: string,
    options?: { cause?: unknown },
  ) {
    super(`MCP server "${server}" failed: ${reason}`, options);
    this.name = "McpServerError";
  }
}

/** A source of MCP clients, one per rollout. */
export interface ToolServer {
  /** Named in the errors of a failing server. */
  readonly name: string;
  /** A connected client for one rollout; a server that cannot start rejects with a `McpServerError`. */
  open(): Promise<Client>;
  /** The rollout is done with `client`; `broken`: it saw the server fail, so it is not handed out again. */
  done(client: Client, broken: boolean): Promise<void>;
}

export const clientInfo = { name: "calc-x-agent", version: "1.0.0" };

/** Each rollout gets a fresh `McpServer` from `create`, linked to its client in memory. */
export class InProcessToolServer implements ToolServer {
  constructor(
    readonly name: string,
    private readonly create: () => McpServer,
  ) {}

  async open(): Promise<Client> {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const server = this.create();
    await server.connect(serverSide);
    const client = new Client(clientInfo);
    await client.connect(clientSide);
    return client;
  }

  async done(client: Client): Promise<void> {
    await client.close(); // closes the linked server side too
  }
}
