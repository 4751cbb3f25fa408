/**
 * The agent APO tunes: it fills the `prompt` template with the ticket, asks the `main_llm` model
 * (any OpenAI-compatible endpoint) which team should handle it, and earns 1 for an exact match. The
 * call is recorded as a span with the gen_ai attributes of `openAiCallAttributes`, so the
 * TraceToMessages adapter gives APO's critic the conversation.
 */
import { trace } from "@opentelemetry/api";
import OpenAI from "openai";
import { LitAgent } from "../../src/runner/index.ts";
import { emitReward, openAiCallAttributes } from "../../src/tracer/index.ts";
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
        span.setAttributes(openAiCallAttributes({ request, response: response as unknown as Record<string, unknown> }));
        return response.choices[0]?.message.content ?? "";
      } catch (e) {
        const status = (e as { status?: number }).status ?? null;
        span.setAttributes(openAiCallAttributes({ request, error: { status, message: (e as Error).message } }));
        throw e;
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
