/**
 * Watchdog deadlines of the in-memory storage, indexed by time: a binary min-heap of (deadline, id)
 * with each id's place kept, so a deadline is set, moved or dropped in O(log n), and the due ones are
 * read in order without looking at the rest. With no deadline set, a watchdog scan costs nothing.
 */

import type { DueRollout } from "./storage.ts";

interface Node {
  id: string;
  deadline: number;
  /** Index in the heap array. */
  slot: number;
}

const before = (a: Node, b: Node): boolean => a.deadline < b.deadline || (a.deadline === b.deadline && a.id < b.id);

const afterCursor = (n: Node, c: DueRollout): boolean => n.deadline > c.deadline || (n.deadline === c.deadline && n.id > c.rollout_id);

export class DeadlineIndex {
  private readonly heap: Node[] = [];
  private readonly nodes = new Map<string, Node>();

  get size(): number {
    return this.heap.length;
  }

  /** Sets the deadline of `id`, or drops it (null). */
  set(id: string, deadline: number | null): void {
    const node = this.nodes.get(id);
    if (deadline === null) {
      if (node !== undefined) this.remove(node);
      return;
    }
    if (node === undefined) {
      const fresh: Node = { id, deadline, slot: this.heap.length };
      this.nodes.set(id, fresh);
      this.heap.push(fresh);
      this.up(fresh.slot);
      return;
    }
    if (node.deadline === deadline) return;
    const earlier = deadline < node.deadline;
    node.deadline = deadline;
    if (earlier) this.up(node.slot);
    else this.down(node.slot);
  }

  get(id: string): number | null {
    return this.nodes.get(id)?.deadline ?? null;
  }

  /**
   * Up to `limit` entries with a deadline before `now` and a key after `after`, in key order. A
   * best-first walk from the root: a node past `now` ends its subtree (its children come later still),
   * so the cost follows the entries that are due, not the heap's size.
   */
  due(now: number, after: DueRollout | null, limit: number): DueRollout[] {
    const out: DueRollout[] = [];
    if (this.heap.length === 0 || limit <= 0) return out;
    // The frontier: heap slots still to visit, itself a min-heap by key.
    const frontier = new SlotHeap(this.heap);
    frontier.push(0);
    while (out.length < limit && frontier.size > 0) {
      const slot = frontier.pop();
      const n = this.heap[slot]!;
      if (!(n.deadline < now)) continue;
      if (after === null || afterCursor(n, after)) out.push({ rollout_id: n.id, deadline: n.deadline });
      for (const child of [2 * slot + 1, 2 * slot + 2]) if (child < this.heap.length) frontier.push(child);
    }
    return out;
  }

  private remove(node: Node): void {
    this.nodes.delete(node.id);
    const last = this.heap.pop()!;
    if (last === node) return;
    const slot = node.slot;
    this.heap[slot] = last;
    last.slot = slot;
    this.up(slot);
    this.down(last.slot);
  }

  private up(slot: number): void {
    const h = this.heap;
    const n = h[slot]!;
    while (slot > 0) {
      const parent = (slot - 1) >> 1;
      if (!before(n, h[parent]!)) break;
      h[slot] = h[parent]!;
      h[slot]!.slot = slot;
      slot = parent;
    }
    h[slot] = n;
    n.slot = slot;
  }

  private down(slot: number): void {
    const h = this.heap;
    const n = h[slot]!;
    for (;;) {
      let child = 2 * slot + 1;
      if (child >= h.length) break;
      if (child + 1 < h.length && before(h[child + 1]!, h[child]!)) child++;
      if (!before(h[child]!, n)) break;
      h[slot] = h[child]!;
      h[slot]!.slot = slot;
      slot = child;
    }
    h[slot] = n;
    n.slot = slot;
  }
}

/** A min-heap of slots of `nodes`, by their nodes' keys (the frontier of `DeadlineIndex.due`). */
class SlotHeap {
  private readonly slots: number[] = [];

  constructor(private readonly nodes: readonly Node[]) {}

  get size(): number {
    return this.slots.length;
  }

  private less(i: number, j: number): boolean {
    return before(this.nodes[this.slots[i]!]!, this.nodes[this.slots[j]!]!);
  }

  private swap(i: number, j: number): void {
    const s = this.slots;
    [s[i], s[j]] = [s[j]!, s[i]!];
  }

  push(slot: number): void {
    this.slots.push(slot);
    let i = this.slots.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  pop(): number {
    const s = this.slots;
    const top = s[0]!;
    const last = s.pop()!;
    if (s.length > 0) {
      s[0] = last;
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= s.length) break;
        if (c + 1 < s.length && this.less(c + 1, c)) c++;
        if (!this.less(c, i)) break;
        this.swap(c, i);
        i = c;
      }
    }
    return top;
  }
}
