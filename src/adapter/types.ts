import type { Span } from "../types/span.ts";

/** One LLM call turned into training data; what each adapter puts in it: docs/adapters.md#triplets. */
export interface Triplet {
  prompt: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  response: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  reward: number | null;
  metadata: Record<string, unknown>;
}

/** Something that turns an input into an output (upstream `Adapter`; `call` delegates to `adapt`). */
export abstract class Adapter<From, To> {
  abstract adapt(source: From): To;
  call(source: From): To {
    return this.adapt(source);
  }
}

/** An adapter over stored spans. */
export abstract class TraceAdapter<To> extends Adapter<Span[], To> {}

export const RewardMatchPolicy = { FIRST_SIBLING: "first_sibling", FIRST_OCCURRENCE: "first_occurrence" } as const;
export type RewardMatchPolicy = (typeof RewardMatchPolicy)[keyof typeof RewardMatchPolicy];
