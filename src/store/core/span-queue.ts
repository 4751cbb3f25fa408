/**
 * The add-span path for validated, owned spans, with the span group commit (see
 * src/store/libsql/README.md for every batching layer a span passes through).
 */
import type { Span } from "../../types/index.ts";
import type { MaybePromise } from "../storage.ts";
import { type Effects, type TxDriver, isThenable } from "./driver.ts";
import { type SpanRequest, onlyResult, writeSpansTx } from "./spans.ts";
import type { Waits } from "./waits.ts";

interface QueuedSpanRequest extends SpanRequest {
  resolve(spans: Span[]): void;
  reject(err: unknown): void;
}

/** Spans per group-commit transaction (a single bigger request still goes in whole). */
const MAX_GROUP_COMMIT_SPANS = 5000;

export class SpanWriter {
  private readonly queue: QueuedSpanRequest[] = [];
  private draining: Promise<void> | null = null;

  /** @param groupCommit coalesce the span writes of concurrent callers (the storage's `groupCommit`). */
  constructor(
    private readonly driver: TxDriver,
    private readonly waits: Waits,
    private readonly groupCommit: boolean,
  ) {}

  /**
   * Inserts spans. With a storage that asks for group commit (`storage.groupCommit`, e.g. libSQL, where a
   * transaction costs far more than a row), span writes of concurrent callers are coalesced: requests
   * queue while a batch is being written, and the next batch takes all of them in ONE transaction (one
   * multi-row insert); each caller's promise settles only after that commit. Otherwise each call is its
   * own transaction.
   */
  insert(spans: Span[], allocate: boolean): MaybePromise<Span[]> {
    if (spans.length === 0) return [];
    if (!this.groupCommit) {
      const results = this.write([{ spans, allocate }]);
      return isThenable(results) ? results.then(onlyResult) : onlyResult(results);
    }
    return new Promise<Span[]>((resolve, reject) => {
      this.queue.push({ spans, allocate, resolve, reject });
      this.draining ??= this.drain();
    });
  }

  /** Writes span requests in one transaction (`writeSpansTx`); per request, its spans or its error. */
  private write(requests: readonly SpanRequest[]): MaybePromise<(Span[] | Error)[]> {
    const fx: Effects = { finished: [] };
    const results = this.driver.tx("w", writeSpansTx, requests, fx);
    if (isThenable(results)) return this.waits.notifyAfter(results, fx);
    this.waits.notifyFinished(fx);
    return results;
  }

  private async drain(): Promise<void> {
    // Let every caller of the current tick join the first batch.
    await Promise.resolve();
    while (this.queue.length > 0) {
      let n = 0;
      let take = 0;
      while (take < this.queue.length && (take === 0 || n + this.queue[take]!.spans.length <= MAX_GROUP_COMMIT_SPANS)) {
        n += this.queue[take]!.spans.length;
        take++;
      }
      const batch = this.queue.splice(0, take);
      try {
        settle(batch, await this.write(batch));
      } catch (e) {
        if (batch.length === 1) batch[0]!.reject(e);
        // The batch rolled back as a whole: retry each request alone, so only a bad one fails.
        else {
          for (const r of batch) {
            let out: (Span[] | Error)[];
            try {
              out = await this.write([r]);
            } catch (err) {
              r.reject(err);
              continue;
            }
            settle([r], out);
          }
        }
      }
    }
    this.draining = null;
  }
}

function settle(batch: readonly QueuedSpanRequest[], results: readonly (Span[] | Error)[]): void {
  batch.forEach((r, i) => {
    const out = results[i]!;
    if (out instanceof Error) r.reject(out);
    else r.resolve(out);
  });
}
