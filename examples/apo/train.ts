/**
 * Tunes the ticket-routing prompt of examples/apo/agent.ts with APO against any OpenAI-compatible
 * endpoint (examples/apo/README.md):
 *
 *   OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... npx tsx examples/apo/train.ts
 *
 * The agent, the critic and the editor all call that endpoint; the models are APO_AGENT_MODEL,
 * APO_GRADIENT_MODEL and APO_EDIT_MODEL. Without an endpoint it says what to set and exits with 2; a
 * model the endpoint refuses (a 404 for its name, a prompt beyond its context) ends it with one line.
 */
import { APO, ApoModelError, createOpenAiClient, type ApoOptions, type ChatCompletionsClient } from "../../src/algorithm/index.ts";
import { TraceToMessages } from "../../src/adapter/index.ts";
import { platform } from "../../src/platform/index.ts";
import { Trainer } from "../../src/trainer/index.ts";
import type { PromptTemplate } from "../../src/types/index.ts";
import { seedPrompt, TicketAgent } from "./agent.ts";
import { split, type Ticket } from "./tickets.ts";

export const DEFAULT_MODELS = { agent: "gpt-4.1-nano", gradient: "gpt-5-mini", edit: "gpt-4.1-mini" } as const;

/** The three models by the variable that names each, from the environment or the defaults. */
export function modelsFromEnv(): Record<"APO_AGENT_MODEL" | "APO_GRADIENT_MODEL" | "APO_EDIT_MODEL", string> {
  return {
    APO_AGENT_MODEL: platform.env("APO_AGENT_MODEL") || DEFAULT_MODELS.agent,
    APO_GRADIENT_MODEL: platform.env("APO_GRADIENT_MODEL") || DEFAULT_MODELS.gradient,
    APO_EDIT_MODEL: platform.env("APO_EDIT_MODEL") || DEFAULT_MODELS.edit,
  };
}

/** A model the endpoint refused before the run started, named by the variable that chose it. */
export class ModelCheckError extends Error {}

/**
 * Asks each model for one short reply before anything runs, so that a wrong name (404) or key (401) is
 * one line naming the variable, instead of a failed rollout per task and a failed search after them.
 */
export async function checkModels(client: ChatCompletionsClient, models: Record<string, string>, baseURL: string): Promise<void> {
  for (const [variable, model] of Object.entries(models)) {
    try {
      await client.chat.completions.create({ model, messages: [{ role: "user", content: "Reply with OK." }] });
    } catch (e) {
      throw new ModelCheckError(`${variable}=${model} at ${baseURL}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
  }
}

export interface ApoExampleOptions {
  baseURL?: string;
  apiKey?: string;
  agentModel?: string;
  /** The critic and editor's client [an openai client for baseURL/apiKey]. */
  client?: ChatCompletionsClient;
  apo?: ApoOptions;
  nRunners?: number;
  tickets?: { train: Ticket[]; val: Ticket[] };
}

export interface ApoExampleResult {
  seedScore: number | null;
  bestScore: number;
  best: PromptTemplate;
  resourcesId: string | null;
}

export async function trainApo(o: ApoExampleOptions = {}): Promise<ApoExampleResult> {
  const baseURL = o.baseURL ?? platform.env("OPENAI_BASE_URL") ?? "https://api.openai.com/v1";
  const apiKey = o.apiKey ?? platform.env("OPENAI_API_KEY") ?? "EMPTY";
  const client = o.client ?? (await createOpenAiClient({ baseURL, apiKey }));
  const models = modelsFromEnv();
  const apo = new APO<Ticket>(client, {
    gradientModel: models.APO_GRADIENT_MODEL,
    applyEditModel: models.APO_EDIT_MODEL,
    beamWidth: 2,
    branchFactor: 2,
    beamRounds: 2,
    gradientBatchSize: 4,
    valBatchSize: 6,
    pollInterval: 0.2,
    ...o.apo,
  });
  const model = o.agentModel ?? models.APO_AGENT_MODEL;
  const trainer = new Trainer({
    algorithm: apo,
    nRunners: o.nRunners ?? 4,
    adapter: new TraceToMessages(),
    runner: { type: "LitAgentRunner", poll_interval: 0.05 },
    initialResources: { main_llm: { resource_type: "llm", endpoint: baseURL, model, api_key: apiKey }, prompt: seedPrompt },
  });
  const { train, val } = o.tickets ?? split();
  await trainer.fit(new TicketAgent(), train, { valDataset: val });
  return {
    seedScore: apo.candidates[0]?.score ?? null,
    bestScore: apo.getBestScore(),
    best: apo.getBestPrompt(),
    resourcesId: apo.bestResourcesId,
  };
}

const argv = (globalThis as { process?: { argv: string[] } }).process?.argv ?? [];
if ((argv[1] ?? "").endsWith("examples/apo/train.ts")) {
  if (!platform.env("OPENAI_BASE_URL") && !platform.env("OPENAI_API_KEY")) {
    console.error(
      [
        "examples/apo needs an OpenAI-compatible endpoint. Set:",
        "  OPENAI_BASE_URL     the endpoint, e.g. http://localhost:8000/v1 (default: https://api.openai.com/v1)",
        "  OPENAI_API_KEY      its key (any value for a server without keys)",
        "and optionally the models (defaults in brackets):",
        `  APO_AGENT_MODEL     the model that routes tickets [${DEFAULT_MODELS.agent}]`,
        `  APO_GRADIENT_MODEL  the critic [${DEFAULT_MODELS.gradient}]`,
        `  APO_EDIT_MODEL      the editor [${DEFAULT_MODELS.edit}]`,
      ].join("\n"),
    );
    platform.exit(2);
  }
  const baseURL = platform.env("OPENAI_BASE_URL") ?? "https://api.openai.com/v1";
  let r: ApoExampleResult;
  try {
    await checkModels(await createOpenAiClient({ baseURL, apiKey: platform.env("OPENAI_API_KEY") ?? "EMPTY" }), modelsFromEnv(), baseURL);
    r = await trainApo();
  } catch (e) {
    // The endpoint refused a model (its name, its key, a prompt beyond its context): one line, no stack.
    if (!(e instanceof ModelCheckError || e instanceof ApoModelError)) throw e;
    console.error(
      `examples/apo: ${e.message.replace(/\s+/g, " ")} (the critic reads whole conversations: an instruction model of 7B or more with 8k tokens of context; examples/apo/README.md)`,
    );
    platform.exit(1);
  }
  console.log(`seed prompt: ${r.seedScore?.toFixed(3) ?? "not scored"} on the validation tickets`);
  console.log(`best prompt: ${r.bestScore.toFixed(3)} (written back as resources ${r.resourcesId}):\n${r.best.template}`);
}
