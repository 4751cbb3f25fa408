/** The primary-worker channel of `agl store --workers N`: batches per event-loop turn, and answers that survive JSON. */
import { describe, expect, it } from "vitest";
import { answerFromWire, answerToWire, batchedChannel } from "../../src/server/cluster/protocol.ts";

describe("batchedChannel", () => {
  it("sends the messages of one turn as one array, in order, and hands on only arrays of messages", async () => {
    const sent: unknown[] = [];
    let deliver: (m: unknown) => void = () => {};
    const port = { send: (m: unknown) => sent.push(m), onMessage: (h: (m: unknown) => void) => void (deliver = h) };
    const ch = batchedChannel<{ t: string; n: number }, { t: string }>(port, (fn) => setTimeout(fn, 0));
    ch.send({ t: "a", n: 1 });
    ch.send({ t: "b", n: 2 });
    expect(sent).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 5));
    ch.send({ t: "c", n: 3 });
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(sent).toEqual([
      [
        { t: "a", n: 1 },
        { t: "b", n: 2 },
      ],
      [{ t: "c", n: 3 }],
    ]);
    const got: unknown[] = [];
    ch.onMessage((m) => got.push(m));
    for (const raw of [{ t: "single" }, "text", [{ t: "x" }, null, { no: "type" }, { t: "y" }]]) deliver(raw);
    expect(got).toEqual([{ t: "x" }, { t: "y" }]);
  });
});

describe("answers on the wire", () => {
  it("keeps a UTF-8 body as text and any other body as base64, byte for byte through JSON", () => {
    const text = new TextEncoder().encode('{"name":"żółw ✓"}');
    const binary = new Uint8Array([0, 255, 0xc3, 0x28, 10, 128]);
    for (const body of [text, binary, new Uint8Array(0)]) {
      const wire = answerToWire({ status: 201, headers: [["content-type", "application/json"]], body });
      const back = answerFromWire(JSON.parse(JSON.stringify(wire)));
      expect(back).toEqual({ status: 201, headers: [["content-type", "application/json"]], body });
    }
    expect(answerToWire({ status: 200, headers: [], body: text }).text).toBe('{"name":"żółw ✓"}');
    expect(answerToWire({ status: 200, headers: [], body: binary }).base64).toBe("AP/DKAqA");
  });

  it("encodes only the bytes of a view into a larger buffer", () => {
    const big = new Uint8Array([1, 2, 0xff, 0xfe, 5]);
    const view = big.subarray(2, 4);
    expect(answerFromWire(answerToWire({ status: 200, headers: [], body: view })).body).toEqual(new Uint8Array([0xff, 0xfe]));
  });
});
