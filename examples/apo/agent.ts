/**
 * The agent APO tunes: it fills the `prompt` template with the ticket, asks the `main_llm` model
 * (any OpenAI-compatible endpoint) which team should handle it, and earns 1 for an exact match. The
 * call is recorded as a span with gen_ai attributes, so the TraceToMessages adapter gives APO's critic
 * the conversation.
 */
import { trace } from "@opentelemetry/api";
import OpenAI from "openai";
import { LitAgent } from "../../src/runner/index.ts";
import { emitReward } from "../../src/tracer/index.ts";
import { renderPromptTemplate, type LLM, type NamedResources, type PromptTemplate } from "../../src/types/index.ts";
import { reward, type Ticket } from "./tickets.ts";

const otel = trace.getTracer("examples.apo");

export class TicketAgent extends LitAgent<Ticket> {
  override async rollout(ticket: Ticket, resources: NamedResources): Promise<void> {
    const llm = resources.main_llm as LLM;
    const prompt = renderPromptTemplate(resources.prompt as PromptTemplate, { ticket: ticket.text });
    const client = new OpenAI({ baseURL: llm.endpoint, apiKey: llm.api_key ?? "EMPTY", maxRetries: 1 });
    const request = { model: llm.model, messages: [{ role: "user" as const, content: prompt }], temperature: 0 };
    const reply = await otel.startActiveSpan("openai.chat.completions", async (span) => {
      try {
        const response = await client.chat.completions.create(request);
        const content = response.choices[0]?.message.content ?? "";
        span.setAttributes({
          "gen_ai.request.model": llm.model,
          "gen_ai.prompt.0.role": "user",
          "gen_ai.prompt.0.content": prompt,
          "gen_ai.completion.0.role": "assistant",
          "gen_ai.completion.0.content": content,
        });
        return content;
      } finally {
        span.end();
      }
    });
    emitReward(reward(ticket, reply));
  }
}

/** The starting prompt: it never says what form the answer takes, so replies rarely match exactly. */
export const seedPrompt: PromptTemplate = {
  resource_type: "prompt_template",
  template: "Which team should handle this support ticket?\n\nTicket: {ticket}",
  engine: "f-string",
};
