/** A request whose body arrives slowly, read as most HTTP clients read the answer: after sending. */
import { connect } from "node:net";

/**
 * A POST that sends its body in pieces over `ms` and reads the answer only once the body is sent, as most
 * HTTP clients do (a reset during the upload discards an answer that arrived early). Resolves with the
 * status and body of the answer, or the socket error.
 */
export function slowPost(url: string, path: string, headers: Record<string, string>, body: string, ms: number): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.pause();
    let answer = "";
    socket.on("data", (d) => (answer += d.toString("latin1")));
    socket.on("error", (e) => resolve(`error ${(e as NodeJS.ErrnoException).code ?? e.message}`));
    socket.on("end", () => resolve(answer));
    const head = Object.entries({ host: `${hostname}:${port}`, "content-type": "application/json", ...headers })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join("");
    socket.write(`POST ${path} HTTP/1.1\r\n${head}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n`, "latin1");
    const pieces = 10;
    const size = Math.ceil(body.length / pieces);
    let sent = 0;
    const tick = setInterval(() => {
      if (socket.destroyed) return clearInterval(tick);
      socket.write(body.slice(sent, sent + size));
      sent += size;
      if (sent >= body.length) {
        clearInterval(tick);
        socket.resume();
      }
    }, ms / pieces);
  });
}
