// The steerable console: a page over the /v1 API beside it. No framework, no build step.
// It holds no data of its own: every call goes to the API with the bearer token the user
// typed (kept in sessionStorage), so it sees what that token's tenant sees and no more.

const TOKEN_KEY = "steerable.console.token";
const LIST_POLL_MS = 2000; // the list of sessions is polled; a session page follows its events
const API = new URL("v1/", document.baseURI); // beside /console, under any mount prefix

// -- the API ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, title, detail, code) {
    super(detail || title);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.code = code;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function authHeaders(extra = {}) {
  const given = token();
  return given ? { ...extra, Authorization: `Bearer ${given}` } : extra;
}

async function api(path, { method = "GET", body, query, signal } = {}) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
  }
  const headers = authHeaders(body === undefined ? {} : { "Content-Type": "application/json" });
  let answer;
  try {
    answer = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "Unreachable", "the server could not be reached", "unreachable");
  }
  if (answer.status === 401) {
    askForToken(token() ? "That token was not accepted." : "This server needs a token.");
    throw new ApiError(401, "Unauthorized", "a valid token is needed", "unauthorized");
  }
  if (answer.status === 204) return null;
  const text = await answer.text();
  let payload = null;
  try {
    payload = text ? JSON.parse(text) : null;
  } catch {
    payload = null;
  }
  if (!answer.ok) {
    const title = (payload && payload.title) || `HTTP ${answer.status}`;
    const detail = (payload && payload.detail) || "";
    throw new ApiError(answer.status, title, detail, payload && payload.code);
  }
  return payload;
}

const path = {
  session: (sid) => `sessions/${encodeURIComponent(sid)}`,
  of: (sid, rest) => `sessions/${encodeURIComponent(sid)}/${rest}`,
};

// -- small helpers ---------------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function short(id) {
  return id && id.length > 12 ? `${id.slice(0, 8)}…` : id || "";
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 5) return "just now";
  if (delta < 60) return `${Math.round(delta)} s ago`;
  if (delta < 3600) return `${Math.round(delta / 60)} min ago`;
  if (delta < 86400) return `${Math.round(delta / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleString();
}

function clock(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleTimeString() : "—";
}

function sentence(action, error) {
  if (!(error instanceof ApiError)) return `${action} failed: ${error.message || error}.`;
  if (error.status === 0) return `${action} failed: the server could not be reached.`;
  const detail = error.detail ? ` ${error.detail.charAt(0).toUpperCase()}${error.detail.slice(1)}.` : "";
  return `${action} failed: ${error.title}.${detail}`;
}

function notify(text, kind = "error") {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = kind;
  box.hidden = !text;
}

function randomId(prefix) {
  const bytes = new Uint8Array(6);
  crypto.getRandomValues(bytes);
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// -- the token -------------------------------------------------------------------------------

let tokenAsked = false;

function askForToken(why) {
  if (tokenAsked) return;
  tokenAsked = true;
  current?.leave();
  current = null;
  const input = el("input", {
    id: "token",
    type: "password",
    autocomplete: "off",
    "aria-label": "bearer token",
    required: true,
  });
  const form = el(
    "form",
    { id: "token-form", class: "card" },
    el("h1", {}, "Sign in"),
    el("p", {}, why, " Type the bearer token you were given; it is kept in this tab only."),
    el("label", { for: "token" }, "Token"),
    input,
    el("button", { type: "submit" }, "Use this token"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    tokenAsked = false;
    notify("");
    route();
  });
  document.getElementById("view").replaceChildren(form);
  input.focus();
}

function showTokenButton() {
  const button = document.getElementById("forget-token");
  button.hidden = !token();
  button.onclick = () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.hash = "#/";
    route();
  };
}

// -- the list of sessions --------------------------------------------------------------------

class ListView {
  constructor(root) {
    this.root = root;
    this.timer = null;
    this.body = el("tbody");
    this.empty = el(
      "p",
      { id: "empty", class: "muted", hidden: true },
      "No sessions yet. Start one below: give it a name and a first message.",
    );
    this.table = el(
      "table",
      { id: "sessions" },
      el(
        "thead",
        {},
        el("tr", {}, ["session", "state", "turn", "queued", "updated"].map((h) => el("th", { scope: "col" }, h))),
      ),
      this.body,
    );
    this.refreshed = el("span", { class: "muted", id: "refreshed" });
    root.replaceChildren(
      el("h1", {}, "Sessions"),
      el("p", { class: "muted" }, "Updated every 2 seconds. ", this.refreshed),
      this.empty,
      this.table,
      this.startForm(),
    );
  }

  startForm() {
    const name = el("input", { id: "new-session", "aria-label": "session name", placeholder: "session name", required: true, pattern: "[^\\/]+" });
    const text = el("input", { id: "new-text", "aria-label": "first message", placeholder: "first message", required: true });
    const form = el(
      "form",
      { id: "start-form", class: "row" },
      el("h2", {}, "Start a session"),
      name,
      text,
      el("button", { type: "submit" }, "Start"),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api(path.of(name.value, "messages"), { method: "POST", body: { text: text.value } });
        location.hash = `#/s/${encodeURIComponent(name.value)}`;
      } catch (error) {
        notify(sentence("Starting the session", error));
      }
    });
    return form;
  }

  async refresh() {
    const rows = [];
    let after;
    try {
      do {
        const page = await api("sessions", { query: { after, limit: 1000 } });
        rows.push(...page.sessions);
        after = page.next;
      } while (after);
    } catch (error) {
      if (error.status !== 401) notify(sentence("Listing the sessions", error));
      return;
    }
    notify("");
    this.render(rows);
  }

  render(rows) {
    this.empty.hidden = rows.length > 0;
    this.table.hidden = rows.length === 0;
    this.body.replaceChildren(
      ...rows.map((row) =>
        el(
          "tr",
          { "data-session": row.session },
          el("td", {}, el("a", { href: `#/s/${encodeURIComponent(row.session)}` }, row.session)),
          el("td", {}, el("span", { class: `state ${row.state}` }, row.state)),
          el("td", { title: row.turn || "" }, row.turn ? short(row.turn) : "—"),
          el("td", {}, String(row.queued)),
          el("td", { title: clock(row.updated_at) }, ago(row.updated_at)),
        ),
      ),
    );
    this.refreshed.textContent = `Last read ${new Date().toLocaleTimeString()}.`;
  }

  start() {
    const tick = async () => {
      await this.refresh();
      if (this.timer !== null) this.timer = setTimeout(tick, LIST_POLL_MS);
    };
    this.timer = 0;
    tick();
  }

  leave() {
    clearTimeout(this.timer);
    this.timer = null;
  }
}

// -- the event stream ------------------------------------------------------------------------

// Follows GET .../events with fetch (EventSource cannot send a token), parses SSE itself,
// and reconnects with Last-Event-ID after any end or error, so no durable event is missed
// or seen twice across restarts of the server or a replica.
class EventFollower {
  constructor(sid, onEvent, onState) {
    this.sid = sid;
    this.onEvent = onEvent;
    this.onState = onState;
    this.lastId = null;
    this.retry = 1000;
    this.controller = null;
    this.stopped = false;
  }

  start() {
    this.loop();
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
  }

  async loop() {
    while (!this.stopped) {
      try {
        await this.follow();
        if (!this.stopped) this.onState("reconnecting");
      } catch (error) {
        if (this.stopped) return;
        if (error instanceof ApiError && error.status === 401) return;
        this.onState(error instanceof ApiError && error.status === 404 ? "no session yet" : "reconnecting");
      }
      await new Promise((resolve) => setTimeout(resolve, this.retry));
    }
  }

  async follow() {
    this.controller = new AbortController();
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (this.lastId !== null) headers["Last-Event-ID"] = String(this.lastId);
    const answer = await fetch(new URL(path.of(this.sid, "events"), API), {
      headers,
      signal: this.controller.signal,
      cache: "no-store",
    });
    if (answer.status === 401) {
      askForToken("This server needs a token.");
      throw new ApiError(401, "Unauthorized", "", "unauthorized");
    }
    if (!answer.ok) {
      let problem = {};
      try {
        problem = await answer.json();
      } catch {}
      throw new ApiError(answer.status, problem.title || `HTTP ${answer.status}`, problem.detail, problem.code);
    }
    this.onState("live");
    this.onEvent({ event: "open", data: null, id: null });
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let fields = { data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      // A line ends at CRLF, LF or CR (a CR at the very end may be half of a CRLF).
      const lines = buffer.split(/\r\n|\n|\r(?!$)/);
      buffer = lines.pop();
      for (const line of lines) fields = this.line(line, fields);
    }
  }

  line(line, fields) {
    if (line === "") {
      if (fields.id !== undefined) this.lastId = fields.id;
      if (fields.data.length > 0) {
        let data = null;
        try {
          data = JSON.parse(fields.data.join("\n"));
        } catch {
          data = fields.data.join("\n");
        }
        this.onEvent({ event: fields.event || "message", data, id: fields.id ?? null });
      }
      return { data: [] };
    }
    if (line.startsWith(":")) return fields;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") fields.data.push(value);
    else if (name === "event") fields.event = value;
    else if (name === "id" && /^\d+$/.test(value)) fields.id = Number(value);
    else if (name === "retry" && /^\d+$/.test(value)) this.retry = Math.min(Number(value), 10000);
    return fields;
  }
}

// -- a session's page ------------------------------------------------------------------------

class SessionView {
  constructor(root, sid) {
    this.root = root;
    this.sid = sid;
    this.messages = new Map(); // id -> message: a message is shown once, whatever repeats
    this.nextPosition = -1; // the transcript's `after` for the next read
    this.turns = new Map(); // turn id -> the turn, as GET .../turns last said
    this.live = new Map(); // turn id -> {text, stale, staleId, tools: Map(call -> piece)}
    this.ended = new Set(); // turns whose turn_ended came: a live piece sent later is late, not news
    this.inputs = new Map(); // steered message id -> its input view (turn, step)
    this.status = null;
    this.refreshing = { transcript: null, status: null };
    this.again = { transcript: false, status: false };
    this.build();
    this.follower = new EventFollower(sid, (event) => this.onEvent(event), (state) => this.onState(state));
  }

  build() {
    this.statusBox = el("dl", { id: "status", class: "status" });
    this.feedState = el("span", { id: "feed-state", class: "feed" }, "connecting");
    this.transcript = el("div", { id: "transcript", class: "transcript" });
    this.emptyNote = el("p", { id: "no-messages", class: "muted", hidden: true }, "No messages yet: send one below.");
    this.steerLog = el("ul", { id: "steers", class: "steers", "aria-label": "steers you sent" });
    this.text = el("textarea", {
      id: "text",
      rows: 3,
      "aria-label": "message",
      placeholder: "Type a message. Enter sends, Ctrl+Enter steers, Escape stops.",
    });
    this.text.addEventListener("keydown", (event) => this.onKey(event));
    const buttons = el(
      "div",
      { class: "row" },
      el("button", { id: "send", type: "button", onclick: () => this.send() }, "Send"),
      el("button", { id: "steer", type: "button", onclick: () => this.steer() }, "Steer"),
      el("button", { id: "stop", type: "button", class: "danger", onclick: () => this.stop() }, "Stop"),
    );
    this.root.replaceChildren(
      el("nav", {}, el("a", { href: "#/", id: "back" }, "← All sessions")),
      el("h1", {}, "Session ", el("code", { id: "session-id" }, this.sid), " ", this.feedState),
      el(
        "div",
        { class: "columns" },
        el("section", { class: "main" }, this.emptyNote, this.transcript),
        el(
          "aside",
          {},
          el("h2", {}, "Status"),
          this.statusBox,
          el("h2", {}, "Steers"),
          this.steerLog,
        ),
      ),
      el(
        "section",
        { class: "composer", "aria-label": "send, steer or stop" },
        this.text,
        buttons,
        el(
          "p",
          { class: "muted keys" },
          el("kbd", {}, "Enter"), " sends (a turn, queued if one runs) · ",
          el("kbd", {}, "Shift+Enter"), " new line · ",
          el("kbd", {}, "Ctrl+Enter"), " steers the running turn · ",
          el("kbd", {}, "Escape"), " stops it",
        ),
      ),
    );
    this.escape = (event) => {
      if (event.key === "Escape" && !event.defaultPrevented) {
        event.preventDefault();
        this.stop();
      }
    };
    document.addEventListener("keydown", this.escape);
  }

  async start() {
    this.text.focus();
    await Promise.all([this.refreshTranscript(), this.refreshStatus(), this.refreshTurns()]);
    this.follower.start();
  }

  leave() {
    this.follower.stop();
    document.removeEventListener("keydown", this.escape);
  }

  onState(state) {
    this.feedState.textContent = state;
    this.feedState.className = `feed ${state.replaceAll(" ", "-")}`;
  }

  // -- what the stream says --

  onEvent({ event, data }) {
    if (event === "open") {
      // A reconnect may have missed live pieces (never replayed): the stored state wins.
      this.refreshStatus();
      return;
    }
    if (event === "delta") return this.onDelta(data);
    if (event === "tool") return this.onTool(data);
    if (event === "unavailable" || event === "refetch") {
      if (event === "refetch") this.resetTranscript();
      this.refreshTranscript();
      this.refreshStatus();
      this.refreshTurns();
      return;
    }
    if (event === "message") {
      if (data.data && data.data.role === "assistant") this.settleText(data.turn, data.data.id);
      this.refreshTranscript();
      return;
    }
    if (event === "turn_ended") {
      // Its stored messages are the whole story now; a delta or tool event from another
      // replica's channel may still come after this one, and is dropped (onDelta, onTool).
      this.ended.add(data.turn);
      if (this.live.has(data.turn)) {
        this.live.delete(data.turn);
        this.turnSection(data.turn).querySelector(".live").replaceChildren();
      }
      this.refreshTranscript();
      this.refreshTurns();
    }
    if (event === "turn_started" || event === "steers_taken") this.refreshTurns();
    this.refreshStatus();
    this.refreshSteers();
  }

  pieces(turn) {
    let live = this.live.get(turn);
    if (!live) {
      live = { text: "", stale: "", staleId: null, tools: new Map() };
      this.live.set(turn, live);
    }
    return live;
  }

  onDelta(data) {
    if (this.ended.has(data.turn)) return;
    this.pieces(data.turn).text += data.text;
    this.renderLive(data.turn);
  }

  onTool(data) {
    if (this.ended.has(data.turn)) return;
    const live = this.pieces(data.turn);
    const piece = live.tools.get(data.call) || { call: data.call, name: data.name };
    if (data.phase === "started") piece.arguments = data.arguments;
    else {
      piece.result = data.result;
      piece.error = data.error;
    }
    piece.phase = data.phase;
    piece.truncated = piece.truncated || Boolean(data.truncated);
    live.tools.set(data.call, piece);
    this.renderLive(data.turn);
  }

  settleText(turn, id) {
    // The stored reply replaces its live text; keep showing it until the reply is read.
    const live = this.pieces(turn);
    live.stale = live.text;
    live.staleId = id;
    live.text = "";
    this.renderLive(turn);
  }

  // -- reads, each coalesced: one at a time, and one more if asked for meanwhile --

  coalesce(kind, read) {
    if (this.refreshing[kind]) {
      this.again[kind] = true;
      return this.refreshing[kind];
    }
    const run = async () => {
      do {
        this.again[kind] = false;
        try {
          await read();
        } catch (error) {
          if (error.status !== 401) notify(sentence(`Reading the ${kind}`, error));
        }
      } while (this.again[kind]);
      this.refreshing[kind] = null;
    };
    this.refreshing[kind] = run();
    return this.refreshing[kind];
  }

  resetTranscript() {
    this.messages.clear();
    this.nextPosition = -1;
    this.transcript.replaceChildren();
  }

  refreshTranscript() {
    return this.coalesce("transcript", async () => {
      const added = [];
      let after = this.nextPosition;
      for (;;) {
        let page;
        try {
          page = await api(path.of(this.sid, "transcript"), { query: { after, limit: 1000 } });
        } catch (error) {
          if (error.status !== 404) throw error;
          this.emptyNote.hidden = false; // no such session (of this tenant): nothing yet
          return;
        }
        for (const message of page.messages) {
          after = Math.max(after, message.position);
          if (!this.messages.has(message.id)) {
            this.messages.set(message.id, message);
            added.push(message);
          }
        }
        if (page.next === null) break;
        after = page.next;
      }
      this.nextPosition = after;
      for (const message of added) this.renderMessage(message);
      this.emptyNote.hidden = this.messages.size > 0;
      for (const turn of this.live.keys()) this.renderLive(turn);
      await this.readSteered(added.filter((m) => m.steered));
    });
  }

  async readSteered(messages) {
    for (const message of messages) {
      try {
        const input = await api(path.of(this.sid, `inputs/${encodeURIComponent(message.id)}`));
        this.inputs.set(message.id, input);
        const mark = this.transcript.querySelector(`[data-id="${CSS.escape(message.id)}"] .steered`);
        if (mark && input.step) mark.textContent = `steered · taken at step ${input.step}`;
      } catch (error) {
        if (error.status !== 404) throw error;
      }
    }
  }

  refreshStatus() {
    return this.coalesce("status", async () => {
      try {
        this.status = await api(path.session(this.sid));
      } catch (error) {
        if (error.status === 404) {
          this.status = null;
          this.statusBox.replaceChildren(el("p", { class: "muted" }, "This session has nothing yet."));
          return;
        }
        throw error;
      }
      this.renderStatus();
    });
  }

  refreshTurns() {
    return this.coalesce("turns", async () => {
      let after = 0;
      for (;;) {
        let page;
        try {
          page = await api(path.of(this.sid, "turns"), { query: { after, limit: 1000 } });
        } catch (error) {
          if (error.status === 404) return;
          throw error;
        }
        for (const turn of page.turns) this.turns.set(turn.id, turn);
        if (page.next === null) break;
        after = page.next;
      }
      for (const turn of this.turns.values()) this.renderTurnHead(turn.id);
    });
  }

  // -- the transcript, by turn --

  turnSection(turnId) {
    const key = turnId || "";
    let section = this.transcript.querySelector(`section[data-turn="${CSS.escape(key)}"]`);
    if (!section) {
      section = el(
        "section",
        { class: "turn", "data-turn": key, "aria-label": `turn ${key}` },
        el("h3", { class: "turn-head" }),
        el("div", { class: "messages" }),
        el("div", { class: "live", "aria-live": "polite" }),
      );
      this.transcript.append(section);
      this.renderTurnHead(turnId);
    }
    return section;
  }

  renderTurnHead(turnId) {
    const section = this.transcript.querySelector(`section[data-turn="${CSS.escape(turnId || "")}"]`);
    if (!section) return;
    const turn = this.turns.get(turnId);
    const head = section.querySelector(".turn-head");
    const parts = [`Turn ${short(turnId) || "(none)"}`];
    if (turn) {
      parts.push(turn.state);
      if (turn.steps) parts.push(`${turn.steps} step${turn.steps === 1 ? "" : "s"}`);
      if (turn.steers_taken) parts.push(`${turn.steers_taken} steer${turn.steers_taken === 1 ? "" : "s"} taken`);
    }
    head.textContent = parts.join(" · ");
    section.dataset.state = turn ? turn.state : "";
  }

  renderMessage(message) {
    const section = this.turnSection(message.turn);
    const list = section.querySelector(".messages");
    const results = message.parts.filter((p) => p.type === "tool_result");
    const placed = results.filter((part) => this.placeResult(part));
    const rest = message.parts.filter((p) => !placed.includes(p));
    const node = el("article", {
      class: `message ${message.role}${message.steered ? " steer" : ""}`,
      "data-id": message.id,
      "data-position": message.position,
      hidden: rest.length === 0,
    });
    const label = message.role === "user" && rest.every((p) => p.type === "tool_result") ? "tool" : message.role;
    const head = el("div", { class: "who" }, label === "user" && !message.steered && message.id === message.turn ? "prompt" : label);
    if (message.steered) {
      const input = this.inputs.get(message.id);
      head.append(" ", el("span", { class: "steered" }, input && input.step ? `steered · taken at step ${input.step}` : "steered"));
    }
    head.append(
      " ",
      el("span", { class: "muted" }, clock(message.at)),
      " ",
      el(
        "button",
        { type: "button", class: "link fork", title: "start a new session with this transcript up to here", onclick: () => this.fork(message.id) },
        "Fork here",
      ),
    );
    node.append(head, ...rest.map((part) => this.renderPart(part)));
    // Keep the order of positions, whatever order the reads come back in.
    const after = Array.from(list.children).find((other) => Number(other.dataset.position) > message.position);
    list.insertBefore(node, after || null);
    for (const part of message.parts) {
      if (part.type === "tool_call") this.live.get(message.turn)?.tools.delete(part.id);
    }
  }

  renderPart(part) {
    if (part.type === "text") return el("div", { class: "text" }, part.text);
    if (part.type === "reasoning") return el("div", { class: "reasoning muted" }, part.text);
    if (part.type === "tool_call") {
      return el(
        "div",
        { class: "tool", "data-call": part.id },
        el("div", { class: "tool-head" }, "tool call ", el("code", {}, part.name), " ", el("span", { class: "muted" }, short(part.id))),
        el("pre", { class: "arguments" }, part.arguments),
        el("pre", { class: "result pending" }, "(no result stored yet)"),
      );
    }
    if (part.type === "tool_result") {
      return el("div", { class: "tool orphan" }, `result of ${part.name}: `, el("pre", { class: "result" }, part.content));
    }
    return el("div", { class: "muted" }, `(${part.type})`);
  }

  placeResult(part) {
    const call = this.transcript.querySelector(`.tool[data-call="${CSS.escape(part.call_id)}"] .result`);
    if (!call) return false;
    call.textContent = part.content;
    call.className = `result${part.is_error ? " error" : ""}`;
    return true;
  }

  renderLive(turnId) {
    const live = this.live.get(turnId);
    if (!live) return;
    if (live.staleId && this.messages.has(live.staleId)) {
      live.stale = "";
      live.staleId = null;
    }
    for (const call of live.tools.keys()) {
      if (this.transcript.querySelector(`.message .tool[data-call="${CSS.escape(call)}"]`)) live.tools.delete(call);
    }
    const box = this.turnSection(turnId).querySelector(".live");
    const nodes = [];
    for (const piece of live.tools.values()) {
      const ended = piece.phase === "ended";
      nodes.push(
        el(
          "div",
          { class: `tool live-tool ${ended ? "ended" : "running"}`, "data-live-call": piece.call },
          el("div", { class: "tool-head" }, ended ? "tool call ended " : "tool call running ", el("code", {}, piece.name)),
          el("pre", { class: "arguments" }, piece.arguments || ""),
          ended ? el("pre", { class: `result${piece.error ? " error" : ""}` }, piece.result || "") : null,
          piece.truncated ? el("p", { class: "muted" }, "(cut short: the stored transcript has it whole)") : null,
        ),
      );
    }
    const text = live.stale + live.text;
    if (text) nodes.push(el("div", { class: "message assistant streaming" }, el("div", { class: "who" }, "assistant (live)"), el("div", { class: "text" }, text)));
    box.replaceChildren(...nodes);
  }

  // -- the status --

  renderStatus() {
    const status = this.status;
    const turn = status.turn;
    const rows = [];
    const row = (name, value) => rows.push(el("dt", {}, name), el("dd", { "data-field": name }, value));
    row("state", turn ? turn.state : status.queued ? "queued" : "idle");
    if (turn) {
      row("turn", el("code", { title: turn.id }, short(turn.id)));
      row("holder", turn.holder || "—");
      row("epoch", String(turn.epoch));
      row("lease until", clock(turn.lease_expires_at));
      row("steps", String(turn.steps));
      row("steers taken", String(turn.steers_taken));
      if (turn.stop_requested) row("stop", "requested");
    }
    row("waiting", String(status.waiting_total));
    row("queued", String(status.queued));
    const waiting = el(
      "ul",
      { class: "waiting" },
      status.waiting.map((input) =>
        el("li", {}, `${input.kind} `, el("q", {}, input.text), input.turn ? ` (offered to ${short(input.turn)})` : " (its own turn)"),
      ),
    );
    this.statusBox.replaceChildren(...rows, status.waiting.length ? el("dd", { class: "wide" }, waiting) : "");
  }

  // -- send, steer, stop, fork --

  onKey(event) {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    if (event.ctrlKey || event.metaKey) this.steer();
    else this.send();
  }

  takeText() {
    const text = this.text.value;
    if (!text.trim()) {
      notify("Type a message first.", "info");
      return null;
    }
    return text;
  }

  async send() {
    const text = this.takeText();
    if (text === null) return;
    try {
      const sent = await api(path.of(this.sid, "messages"), { method: "POST", body: { text } });
      this.text.value = "";
      notify(sent.state === "queued" ? `Queued: ${sent.ahead} turn(s) before it.` : "Sent: its turn starts now.", "info");
      this.refreshStatus();
      this.refreshTranscript();
    } catch (error) {
      notify(sentence("Sending", error));
    }
  }

  async steer() {
    const text = this.takeText();
    if (text === null) return;
    const id = randomId("steer-");
    const item = el("li", { "data-steer": id }, el("q", {}, text), " ", el("span", { class: "fate" }, "sending…"));
    this.steerLog.prepend(item);
    const fate = item.querySelector(".fate");
    try {
      // The answer at once ({id, turn}); then the same steer again, waiting for its fate.
      const first = await api(path.of(this.sid, "steers"), { method: "POST", body: { text, id } });
      this.text.value = "";
      fate.textContent = first.turn ? `offered to turn ${short(first.turn)}; waiting for its next step…` : "a turn of its own";
      item.dataset.turn = first.turn || "";
      let answer = first;
      for (let round = 0; round < 4; round += 1) {
        answer = await api(path.of(this.sid, "steers"), { method: "POST", body: { text, id }, query: { wait: 30 } });
        if (!answer.fate || answer.fate.state !== "pending") break;
      }
      this.showFate(item, answer.fate);
    } catch (error) {
      fate.textContent = "not sent";
      notify(sentence("Steering", error));
    }
  }

  showFate(item, fate) {
    const where = item.querySelector(".fate");
    item.dataset.fate = fate ? fate.state : "unknown";
    if (!fate) where.textContent = "its fate is not known yet";
    else if (fate.state === "taken") where.textContent = `taken by turn ${short(fate.turn)} at step ${fate.step}`;
    else if (fate.state === "turn") where.textContent = "a turn of its own";
    else if (fate.state === "cancelled") where.textContent = "cancelled";
    else where.textContent = `still offered to turn ${short(fate.turn)}`;
  }

  refreshSteers() {
    // A steer still offered learns its fate from the stream's events too (a turn's end).
    for (const item of this.steerLog.querySelectorAll("li[data-fate='pending']")) {
      api(path.of(this.sid, `inputs/${encodeURIComponent(item.dataset.steer)}`))
        .then((input) => this.showFate(item, { state: input.state === "waiting" ? "pending" : input.state, turn: input.turn, step: input.step }))
        .catch(() => {});
    }
  }

  async stop() {
    try {
      const stopped = await api(path.of(this.sid, "stop"), { method: "POST", body: {} });
      notify(stopped.turn ? `Stop asked of turn ${short(stopped.turn)}.` : "No turn was running: nothing to stop.", "info");
      this.refreshStatus();
    } catch (error) {
      notify(sentence("Stopping", error));
    }
  }

  async fork(at) {
    const session = randomId(`${this.sid.slice(0, 200)}.fork-`);
    try {
      await api(path.of(this.sid, "fork"), { method: "POST", body: { session, at } });
      notify(`Forked into ${session}.`, "info");
      location.hash = `#/s/${encodeURIComponent(session)}`;
    } catch (error) {
      notify(sentence("Forking", error));
    }
  }
}

// -- routing ---------------------------------------------------------------------------------

let current = null;

function route() {
  current?.leave();
  current = null;
  showTokenButton();
  const root = document.getElementById("view");
  const match = /^#\/s\/(.+)$/.exec(location.hash);
  if (match) {
    const sid = decodeURIComponent(match[1]);
    document.title = `${sid} · steerable console`;
    current = new SessionView(root, sid);
    current.start();
  } else {
    document.title = "steerable console";
    current = new ListView(root);
    current.start();
  }
}

window.addEventListener("hashchange", () => {
  notify("");
  route();
});
route();
