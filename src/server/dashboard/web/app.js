// The dashboard's shell: navigation, hash routes, and the token prompt (shown when the API answers 401).
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, getToken, onAuthChange, setToken } from "./api.js";
import { ResourcesPage } from "./pages/resources.js";
import { RolloutPage } from "./pages/rollout.js";
import { RolloutsPage } from "./pages/rollouts.js";
import { StorePage } from "./pages/store.js";
import { TrainingPage } from "./pages/training.js";
import { WorkersPage } from "./pages/workers.js";
import { html, parseHash } from "./ui.js";

const PAGES = [
  ["rollouts", "Rollouts"],
  ["resources", "Resources"],
  ["workers", "Workers"],
  ["training", "Training"],
  ["store", "Store"],
];

function useHash() {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return parseHash(hash);
}

function TokenForm({ onDone }) {
  const [value, setValue] = useState("");
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    setToken(value.trim());
    try {
      await api("statistics");
      setError(null);
      onDone();
    } catch (err) {
      setToken(null);
      setError(err.status === 401 ? "The server refused this token." : err.message);
    }
  };
  return html`<div class="token-gate">
    <form class="card" onSubmit=${submit} autocomplete="off">
      <h2>This store needs a token</h2>
      <p class="muted">Enter the bearer token the store was started with (<code>--token-file</code>, <code>AGL_STORE_TOKEN</code>). It is kept in this tab only and sent as an <code>Authorization</code> header.</p>
      <input type="password" name="token" aria-label="Token" placeholder="token" value=${value} onInput=${(e) => setValue(e.currentTarget.value)} autofocus />
      <button type="submit" disabled=${value.trim() === ""}>Open the dashboard</button>
      ${error && html`<div class="error" role="alert">${error}</div>`}
    </form>
  </div>`;
}

function App() {
  const { parts, params } = useHash();
  const [needToken, setNeedToken] = useState(false);
  const [checked, setChecked] = useState(false);
  useEffect(() => onAuthChange((needed) => setNeedToken(needed)), []);
  useEffect(() => {
    api("statistics")
      .then(() => setNeedToken(false))
      .catch(() => {})
      .finally(() => setChecked(true));
  }, []);
  const page = parts[0] ?? "rollouts";
  let body;
  if (!checked) body = html`<p class="muted">Connecting to the store…</p>`;
  else if (needToken) body = html`<${TokenForm} onDone=${() => setNeedToken(false)} />`;
  else if (page === "rollouts" && parts[1]) body = html`<${RolloutPage} key=${parts[1]} rolloutId=${parts[1]} params=${params} />`;
  else if (page === "rollouts") body = html`<${RolloutsPage} params=${params} />`;
  else if (page === "resources") body = html`<${ResourcesPage} />`;
  else if (page === "workers") body = html`<${WorkersPage} />`;
  else if (page === "training") body = html`<${TrainingPage} />`;
  else if (page === "store") body = html`<${StorePage} />`;
  else body = html`<p>No page here. <a href="#/rollouts">Rollouts</a></p>`;
  return html`<header class="top">
      <a class="brand" href="#/rollouts">⚡ Lightning</a>
      <nav>${PAGES.map(([id, label]) => html`<a key=${id} href=${`#/${id}`} class=${page === id ? "active" : ""}>${label}</a>`)}</nav>
      ${getToken() && html`<button class="link" onClick=${() => (setToken(null), setNeedToken(true))}>Forget token</button>`}
    </header>
    <main>${body}</main>`;
}

const root = document.getElementById("app");
root.textContent = ""; // the boot message
render(html`<${App} />`, root);
