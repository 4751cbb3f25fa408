/**
 * The calculator MCP server over stdio: `npx tsx examples/calc-x/calculator-server.ts`. The Calc-X
 * agent spawns it (examples/calc-x/agent.ts); any MCP client can. It exits when stdin closes.
 */
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { createCalculatorServer } from "./calculator.ts";

await createCalculatorServer().connect(new StdioServerTransport());
