/**
 * The agent APO tunes: it fills the `prompt` template with the ticket, asks the `main_llm` model
 * (any OpenAI-compatible endpoint) which team should handle it, and earns 1 for an exact match. Its
 * `openai` client is traced (`traceOpenAI`), so each call is a span with the conversation on it and the
 * TraceToMessages adapter gives APO's critic the conversation.
 */
import OpenAI from "openai";
import { LitAgent } from "../../src/runner/index.ts";
import { emitReward, traceOpenAI } from "../../src/tracer/index.ts";
import { renderPromptTemplate, type LLM, type NamedResources, type PromptTemplate } from "../../src/types/index.ts";
import { reward, type Ticket } from "./tickets.ts";

export class TicketAgent extends LitAgent<Ticket> {
  override async rollout(ticket: Ticket, resources: NamedResources): Promise<void> {
    const llm = resources.main_llm as LLM;
    const prompt = renderPromptTemplate(resources.prompt as PromptTemplate, { ticket: ticket.text });
    const client = traceOpenAI(new OpenAI({ baseURL: llm.endpoint, apiKey: llm.api_key ?? "EMPTY", maxRetries: 1 }));
    const response = await client.chat.completions.create({
      model: llm.model,
      messages: [{ role: "user", content: prompt }],
      temperature: 0,
    });
    emitReward(reward(ticket, response.choices[0]?.message.content ?? ""));
  }
}

/** The starting prompt: it never says what form the answer takes, so replies rarely match exactly. */
export const seedPrompt: PromptTemplate = {
  resource_type: "prompt_template",
  template: "Which team should handle this support ticket?\n\nTicket: {ticket}",
  engine: "f-string",
};
