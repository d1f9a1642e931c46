// The chat page's developer view: what happened inside each turn of a session, as the server
// recorded it (GET /v1/sessions/{id}/timeline), drawn live while a turn of this page runs (the
// turn's own event stream carries `timeline` events to a caller allowed to inspect) and while a
// turn of the session shown runs anywhere else in the server (another tab, a protocol's client, the
// customer: GET /v1/sessions/{id}/timeline/live), and the caller's sessions with filters
// (GET /v1/sessions). The page offers it only when GET /v1/me says
// the caller may inspect; for anyone else the server sends none of it either.
//
// Same safety rule as app.js: every text of the user, the model or a tool goes in with
// textContent, never as HTML.

const LONG_CHARS = 280;
const LONG_LINES = 6;
const OPEN_TURNS = 5; // the latest turns start open, older ones folded
const LABELS = {
  running: "running", replied: "replied", paused: "waiting for approval", failed: "failed",
  awaiting_approval: "awaiting approval", awaiting_human: "awaiting a person",
  completed: "completed", aborted: "aborted",
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function inline(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

function ms(value) {
  if (value === null || value === undefined) return "";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value * 10) / 10} ms`;
}

function isLong(text) {
  return text.length > LONG_CHARS || text.split("\n").length > LONG_LINES;
}

// A labelled text, folded when long: its summary says what it is, how it starts, how long it is.
function block(label, text, className = "") {
  const body = el("pre", `text ${className}`.trim(), text === "" ? "(empty)" : text);
  if (!isLong(text)) {
    const field = el("div", "field");
    field.append(el("span", "label", label), body);
    return field;
  }
  const details = el("details", "field folded");
  const summary = el("summary");
  const start = text.replace(/\s+/g, " ").trim().slice(0, 90);
  summary.append(el("span", "label", label), el("span", "preview", `${start}… · ${text.length} characters`));
  details.append(summary, body);
  return details;
}

function line(className, ...parts) {
  const node = el("p", className);
  for (const part of parts) node.append(typeof part === "string" ? document.createTextNode(part) : part);
  return node;
}

function tag(text, className = "") {
  return el("span", `tag ${className}`.trim(), text);
}

// --- evidence in the user's words --------------------------------------------------------------
//
// A verdict's evidence gives offsets in code points (Python's string indices), so the message is
// cut as an array of code points; when the recorded text no longer matches them (a message cut
// or with a secret hidden), the evidence's own words are looked for instead.

function locate(message, evidence) {
  if (!evidence || evidence.source !== "user" || typeof message !== "string") return null;
  const chars = Array.from(message);
  const { start, end, text } = evidence;
  if (Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start < end && end <= chars.length) {
    if (typeof text !== "string" || chars.slice(start, end).join("") === text) return [start, end];
  }
  if (typeof text === "string" && text) {
    const at = message.indexOf(text);
    if (at >= 0) {
      const from = Array.from(message.slice(0, at)).length;
      return [from, from + Array.from(text).length];
    }
  }
  return null;
}

// The message with each span marked: [{start, end, field, action}], overlaps allowed.
function markedWords(message, spans) {
  const chars = Array.from(message);
  const cuts = new Set([0, chars.length]);
  for (const span of spans) cuts.add(span.start).add(span.end);
  const points = [...cuts].sort((a, b) => a - b);
  const said = el("span", "said");
  for (let i = 0; i + 1 < points.length; i += 1) {
    const [from, to] = [points[i], points[i + 1]];
    const text = chars.slice(from, to).join("");
    const covering = spans.filter((span) => span.start <= from && to <= span.end);
    if (!covering.length) {
      said.append(document.createTextNode(text));
      continue;
    }
    const mark = el("mark", `evidence ${[...new Set(covering.map((s) => s.action))].join(" ")}`, text);
    mark.dataset.field = covering.map((s) => s.field).join(" ");
    mark.title = covering.map((s) => `${s.field}: ${s.action}`).join("; ");
    said.append(mark);
  }
  return said;
}

function verdictAction(entry) {
  if (entry.action) return entry.action;
  if (entry.kind === "field_dropped") return "dropped";
  return entry.repaired ? "repaired" : "kept";
}

// --- entries -----------------------------------------------------------------------------------

function shortVersion(version) {
  if (!version) return "(unrecorded)";
  return /^[0-9a-f]{64}$/.test(version) ? version.slice(0, 12) : version;
}

function stepNote(entry) {
  return entry.step ? ` in ${entry.step}` : "";
}

function modelEntry(entry, node) {
  const usage = entry.usage;
  const facts = [`attempt ${entry.attempt}`];
  if (usage) facts.push(`${usage.input_tokens} in + ${usage.output_tokens} out tokens`);
  if (entry.latency_ms !== null && entry.latency_ms !== undefined) facts.push(ms(entry.latency_ms));
  if (entry.answered_by && entry.answered_by !== entry.model) facts.push(`answered by ${entry.answered_by}`);
  node.append(line("entry-head", tag("model"), el("b", "", entry.model), `${stepNote(entry)} · ${facts.join(" · ")}`));
  const request = el("div", "request");
  if (entry.system !== null && entry.system !== undefined) request.append(block("system prompt", entry.system, "prompt"));
  else request.append(line("note", "system prompt: as in the previous request of this step"));
  const messages = entry.messages || [];
  const sent = el("ol", "sent");
  for (const message of messages) {
    const item = el("li", `sent-message role-${message.role}`);
    let who = message.role;
    if (message.name) who += ` ${message.name}`;
    if (message.kind) who += ` · ${message.kind}`;
    if (message.is_error) who += " · error";
    item.append(block(who, message.content || ""));
    for (const call of message.tool_calls || []) item.append(line("call", `→ ${call.name}(${inline(call.args)})`));
    for (const file of message.files || []) item.append(line("note", `file ${file.name} · ${file.media_type} · ${file.size} bytes`));
    sent.append(item);
  }
  const shared = entry.history ? ` after ${plural(entry.history, "message", "messages")} shared with the previous request` : "";
  const folded = el("details", "field messages");
  folded.open = messages.length <= 3 && messages.every((m) => !isLong(m.content || ""));
  folded.append(el("summary", "label", `${plural(messages.length, "message", "messages")} sent${shared}`), sent);
  request.append(folded);
  const tools = entry.tools && entry.tools.length ? `tools: ${entry.tools.join(", ")}` : "no tools";
  request.append(line("note", entry.output ? `${tools} · output schema: ${entry.output}` : tools));
  node.append(request);

  const answer = el("div", "answer");
  if (entry.error) {
    answer.append(block("error", entry.error, "error"));
  } else if (entry.latency_ms === null || entry.latency_ms === undefined) {
    answer.append(line("pending", "waiting for the model's answer…"));
  } else {
    answer.append(block("raw answer", entry.text || ""));
    for (const call of entry.tool_calls || []) {
      answer.append(line("call", `tool call ${call.name}(${inline(call.args)})${call.id ? ` · ${call.id}` : ""}`));
    }
    if (entry.parsed !== null && entry.parsed !== undefined) answer.append(block("parsed", pretty(entry.parsed), "parsed"));
    if (entry.finish_reason) answer.append(line("note", `finish reason: ${entry.finish_reason}`));
  }
  node.append(answer);
}

function verdictEntry(entry, node, message) {
  const action = verdictAction(entry);
  const rule = entry.rule || entry.repaired;
  node.classList.add(`verdict-${action}`);
  node.dataset.field = entry.field;
  node.append(line(
    "entry-head",
    tag(action, `verdict ${action}`),
    el("b", "", entry.field),
    ` = ${inline(entry.value)}${stepNote(entry)}`,
    rule ? el("span", "rule", ` rule ${rule}`) : "",
  ));
  const evidence = entry.evidence;
  if (evidence) {
    const where = entry.parent ? null : locate(message, evidence);
    const source = evidence.source === "assistant" ? "the assistant's words" : "the user's words";
    const shown = where
      ? markedWords(message, [{ start: where[0], end: where[1], field: entry.field, action }])
      : el("q", "said", evidence.text || "");
    node.append(line("evidence-line", el("span", "label", `evidence in ${source}`), shown));
  }
  if (entry.read_as) node.append(block("read as", pretty(entry.read_as)));
  if (entry.why) node.append(line("why", entry.why));
}

function toolEntry(entry, node) {
  const args = entry.args === null || entry.args === undefined ? "" : inline(entry.args);
  node.append(line("entry-head", tag("tool"), el("b", "", entry.name), `(${args})${stepNote(entry)}`));
  if (entry.ok === null || entry.ok === undefined) {
    node.append(line("pending", entry.result ? entry.result : "running…"));
  } else {
    node.classList.add(entry.ok ? "ok" : "failed");
    node.append(block(entry.ok ? "result" : "error", entry.result || "", entry.ok ? "" : "error"));
  }
}

function stateEntry(entry, node) {
  node.append(line("entry-head", tag("state"), `state of ${entry.step}`));
  const table = el("table", "state-diff");
  const head = el("tr");
  head.append(el("th", "", "key"), el("th", "", "before"), el("th", "", "after"));
  const body = el("tbody");
  for (const change of entry.changes || []) {
    const how = change.added ? "added" : change.removed ? "removed" : "changed";
    const row = el("tr", how);
    row.append(
      el("td", "key", change.key),
      el("td", "before", change.added ? "–" : JSON.stringify(change.before, null, 1)),
      el("td", "after", change.removed ? "–" : JSON.stringify(change.after, null, 1)),
    );
    body.append(row);
  }
  const thead = el("thead");
  thead.append(head);
  table.append(thead, body);
  node.append(table);
}

function renderEntry(entry, node, message) {
  node.replaceChildren();
  node.className = `entry kind-${entry.kind}`;
  node.dataset.kind = entry.kind;
  if (entry.parent) {
    node.classList.add("nested");
    node.title = `in a sub-step run under ${entry.parent}`;
  }
  switch (entry.kind) {
    case "entered":
      node.append(line("entry-head", tag("step"), `entered ${entry.step}`, entry.from ? ` from ${entry.from}` : ""));
      break;
    case "left":
      node.append(line("entry-head", tag("step"), `left ${entry.step} for ${entry.to}`));
      break;
    case "model":
      modelEntry(entry, node);
      break;
    case "rejected":
      node.append(line("entry-head", tag("rejected", "bad"), `by ${entry.check}${stepNote(entry)}`));
      node.append(line("reason", entry.reason));
      break;
    case "field_set":
    case "field_dropped":
      verdictEntry(entry, node, message);
      break;
    case "tool":
      toolEntry(entry, node);
      break;
    case "approval_requested":
      node.append(line("entry-head", tag("approval"), `asked for ${entry.tool}(${inline(entry.args)})${stepNote(entry)}`));
      node.append(line("note", entry.approval));
      break;
    case "approval_decided":
      node.append(line("entry-head", tag("approval"), `${entry.decision}${entry.by ? ` by ${entry.by}` : ""}: ${entry.tool}(${inline(entry.args)})`));
      break;
    case "pattern":
      node.append(line("entry-head", tag("repair"), `${entry.name}${stepNote(entry)}`, entry.detail ? `: ${entry.detail}` : ""));
      break;
    case "handoff":
      node.append(line("entry-head", tag("handoff"), `handed to a person${stepNote(entry)}`, entry.reason ? `: ${entry.reason}` : ""));
      break;
    case "migrated":
      node.append(line("entry-head", tag("migrated"), `from version ${shortVersion(entry.from_version)} to ${shortVersion(entry.to_version)}`));
      for (const change of entry.changes || []) {
        node.append(line("note", `${change.action.replace(/_/g, " ")} ${change.step}${change.detail ? ` (${change.detail})` : ""}`));
      }
      break;
    case "erased":
      node.append(line("entry-head", tag("memory"), `memory of ${entry.namespace} erased`));
      break;
    case "state":
      stateEntry(entry, node);
      break;
    case "omitted":
      node.append(line("entry-head", tag("omitted"), `${entry.entries} more entries (${entry.bytes} bytes) past the turn's budget`));
      break;
    default:
      node.append(line("entry-head", tag(entry.kind)), block("entry", pretty(entry)));
  }
  if (entry.at_ms !== null && entry.at_ms !== undefined) node.prepend(el("span", "at", `+${ms(entry.at_ms)}`));
}

// --- a turn --------------------------------------------------------------------------------------

class TurnView {
  constructor(turn, open) {
    this.turn = turn;
    this.entries = [];
    this.nodes = [];
    this.item = el("li", "turn");
    this.details = el("details");
    this.details.open = open;
    this.summary = el("summary", "turn-head");
    this.said = el("p", "turn-message");
    this.list = el("ol", "entries");
    this.end = el("div", "turn-end");
    this.details.append(this.summary, this.said, this.list, this.end);
    this.item.append(this.details);
    this.head();
    for (const [index, entry] of (turn.entries || []).entries()) this.set(index, entry);
    this.words();
  }

  head() {
    const turn = this.turn;
    const outcome = turn.outcome || "running";
    this.item.dataset.turn = turn.turn ?? "";
    this.item.dataset.outcome = outcome;
    this.item.classList.toggle("live", outcome === "running");
    const facts = [];
    if (turn.trigger === "decision") facts.push("a decision");
    if (turn.trigger === "elsewhere") facts.push("run elsewhere");
    if (turn.step) facts.push(`ended in ${turn.step}`);
    if (turn.duration_ms !== undefined) facts.push(ms(turn.duration_ms));
    const usage = turn.usage;
    if (usage) {
      facts.push(`${plural(usage.model_calls, "model call", "model calls")}, ${plural(usage.tool_calls, "tool call", "tool calls")}`);
      facts.push(`${usage.input_tokens} in + ${usage.output_tokens} out tokens`);
    }
    this.summary.replaceChildren(
      el("span", "turn-number", turn.turn ? `Turn ${turn.turn}` : "Turn"),
      el("span", `outcome ${outcome}`, LABELS[outcome] || outcome),
      el("span", "facts", facts.join(" · ")),
    );
    this.end.replaceChildren();
    if (turn.error) {
      const error = turn.error;
      this.end.append(line("turn-error", tag(error.kind, "bad"), `${error.message}${error.step ? ` (in ${error.step})` : ""}`));
    } else if (turn.reply) {
      this.end.append(block("reply", turn.reply, "reply"));
    }
  }

  // The user's message, each verdict's evidence marked in it.
  words() {
    const message = this.turn.message || "";
    const spans = [];
    for (const entry of this.entries) {
      if (!entry || entry.parent || (entry.kind !== "field_set" && entry.kind !== "field_dropped")) continue;
      const where = locate(message, entry.evidence);
      if (where) spans.push({ start: where[0], end: where[1], field: entry.field, action: verdictAction(entry) });
    }
    const who = this.turn.trigger === "decision" ? "decision" : "user";
    this.said.replaceChildren(el("span", "label", who), markedWords(message, spans));
  }

  set(index, entry) {
    this.entries[index] = entry;
    let node = this.nodes[index];
    if (!node) {
      node = this.nodes[index] = el("li");
      // Entries arrive in order; one that comes back (a request answered) keeps its place.
      const after = this.nodes.slice(index + 1).find(Boolean);
      this.list.insertBefore(node, after || null);
    }
    renderEntry(entry, node, this.turn.message || "");
  }
}

// --- the view ----------------------------------------------------------------------------------

// `stream(path, onEvent, signal)` reads a GET event stream to its end (or the signal's abort).
export function createInspector({ api, stream }) {
  const $ = (id) => document.getElementById(id);
  const els = {
    toggle: $("inspect-toggle"), view: $("inspector"), tabTimeline: $("tab-timeline"), tabSessions: $("tab-sessions"),
    timeline: $("inspector-timeline"), sessions: $("inspector-sessions"), what: $("inspected-what"),
    id: $("inspected-id"), follow: $("inspect-follow"), status: $("timeline-status"), turns: $("timeline-turns"),
    filters: $("session-filters"), flow: $("filter-flow"), state: $("filter-status"), errors: $("filter-errors"),
    sessionsStatus: $("sessions-status"), list: $("session-list"),
  };
  const view = {
    allowed: false, open: false, following: true, chatSession: null,
    sessionId: null, // the session inspected
    shown: null, // the session whose recorded turns are on screen
    turns: [], live: null, loading: 0, listing: 0,
    watched: null, // the session whose turns elsewhere are followed live
    watching: null, // its stream's AbortController
    remote: null, // the turn of that session running elsewhere, drawn as it comes
  };

  function setOpen(open) {
    view.open = open && view.allowed;
    els.view.hidden = !view.open;
    els.toggle.setAttribute("aria-pressed", String(view.open));
    document.body.classList.toggle("inspecting", view.open);
    if (view.allowed) localStorage.setItem("picoflow.inspect", view.open ? "on" : "off");
    if (view.open) {
      load();
      if (!els.sessions.hidden) listSessions();
    } else {
      watch();
    }
  }

  function showTab(sessions) {
    els.timeline.hidden = sessions;
    els.sessions.hidden = !sessions;
    els.tabTimeline.setAttribute("aria-selected", String(!sessions));
    els.tabSessions.setAttribute("aria-selected", String(sessions));
    if (sessions) listSessions();
  }

  function showInspected() {
    els.id.textContent = view.sessionId || "";
    els.what.textContent = view.following ? "This conversation" : "Session";
    els.follow.hidden = view.following;
  }

  function clear(status) {
    view.turns = [];
    view.live = null;
    els.turns.replaceChildren();
    els.status.textContent = status;
  }

  function addTurn(turn, open) {
    const shown = new TurnView(turn, open);
    view.turns.push(shown);
    els.turns.append(shown.item);
    return shown;
  }

  // The inspected session's recorded turns, whole.
  async function load() {
    showInspected();
    if (!view.open) return;
    const sessionId = view.sessionId;
    const ticket = ++view.loading;
    if (!sessionId) {
      clear("No turn yet: what the next message does shows here as it happens.");
      view.shown = null;
      watch();
      return;
    }
    let timeline;
    try {
      timeline = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/timeline`);
    } catch (error) {
      if (ticket === view.loading) clear(error.status === 404 ? "This session has no timeline to show." : error.message);
      return;
    }
    if (ticket !== view.loading || sessionId !== view.sessionId) return; // another load since
    const live = view.live;
    clear(timeline.turns.length ? "" : "No turn recorded yet.");
    view.shown = sessionId;
    timeline.turns.forEach((turn, index) => addTurn(turn, index >= timeline.turns.length - OPEN_TURNS));
    if (live) { // a turn of this page still running: it stays, after the recorded ones
      view.live = live;
      view.turns.push(live);
      els.turns.append(live.item);
    }
    watch();
  }

  // --- turns that run elsewhere -------------------------------------------------------------------

  // Follow the session on screen while the view is open: its turns run by anyone else show as they
  // run. The server ends a stream after a while without a turn; it is opened again at once.
  function watch() {
    const sessionId = view.open ? view.shown : null;
    if (sessionId === view.watched) return;
    if (view.watching) view.watching.abort();
    view.watching = null;
    view.watched = sessionId;
    view.remote = null;
    delete els.view.dataset.following;
    if (!sessionId) return;
    const control = new AbortController();
    view.watching = control;
    const path = `/v1/sessions/${encodeURIComponent(sessionId)}/timeline/live`;
    (async () => {
      let failures = 0;
      while (!control.signal.aborted) {
        try {
          await stream(path, (name, data) => watched(sessionId, name, data), control.signal);
          failures = 0;
        } catch (error) {
          if (control.signal.aborted || error.status === 404) return; // gone, or no longer shown
          failures += 1; // the server restarting: try again, less and less often
          await new Promise((resolve) => setTimeout(resolve, Math.min(30000, 1000 * 2 ** failures)));
        }
      }
    })();
  }

  // One event of the followed session's live stream.
  function watched(sessionId, name, data) {
    if (sessionId !== view.shown) return;
    const ownTurn = view.live && view.following; // this page's turn: its own stream draws it
    if (name === "following") { // turns stored while nothing followed (between two streams)
      els.view.dataset.following = sessionId;
      const last = Math.max(0, ...view.turns.map((shown) => shown.turn.turn || 0));
      if (data.turn > last && !ownTurn) load();
    } else if (name === "timeline" && !ownTurn) {
      let remote = view.remote;
      if (!remote || remote.turn.turn !== data.turn) {
        remote = view.remote = addTurn({ turn: data.turn, trigger: "elsewhere", outcome: "running", entries: [] }, true);
        els.status.textContent = "";
      }
      remote.set(data.index, data.entry);
      if (!remote.turn.message && data.entry.kind === "model" && !data.entry.parent) {
        const said = (data.entry.messages || []).filter((message) => message.role === "user" && !message.kind);
        if (said.length) remote.turn.message = said[said.length - 1].content;
      }
      remote.words();
    } else if (name === "turn" && !(ownTurn && view.live.turn.turn === data.turn)) {
      view.remote = null;
      replaceTurn(sessionId, data.turn);
    }
  }

  async function replaceTurn(sessionId, number) {
    let found;
    try {
      found = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/timeline?turn=${number}`);
    } catch (error) {
      return false;
    }
    if (sessionId !== view.sessionId) return true;
    // A failed turn and its retry share a number: every one of that number is replaced, in place
    // (the next turn may have started meanwhile).
    const replaced = view.turns.filter((shown) => shown.turn.turn === number);
    const place = replaced.length ? replaced[0].item : null;
    const turns = [];
    for (const shown of view.turns) {
      if (shown.turn.turn !== number) turns.push(shown);
      else if (shown.item === place) turns.push(...found.turns.map((turn) => new TurnView(turn, true)));
    }
    if (!place) turns.push(...found.turns.map((turn) => new TurnView(turn, true)));
    for (const shown of turns) if (!shown.item.isConnected) els.turns.insertBefore(shown.item, place);
    for (const shown of replaced) shown.item.remove();
    view.turns = turns;
    return true;
  }

  // --- sessions ---------------------------------------------------------------------------------

  async function listSessions() {
    const query = new URLSearchParams({ limit: "50" });
    if (els.flow.value) query.set("flow", els.flow.value);
    if (els.state.value) query.set("status", els.state.value);
    if (els.errors.checked) query.set("errors", "true");
    els.sessionsStatus.textContent = "Loading…";
    // Filters changed quickly send several requests, whose answers may come back in any order:
    // only the last request's answer is shown.
    const ticket = ++view.listing;
    let sessions;
    try {
      sessions = await api(`/v1/sessions?${query}`);
    } catch (error) {
      if (ticket === view.listing) els.sessionsStatus.textContent = error.message;
      return;
    }
    if (ticket !== view.listing) return;
    els.list.replaceChildren(...sessions.map(sessionRow));
    els.sessionsStatus.textContent = sessions.length ? "" : "No session matches these filters.";
  }

  function sessionRow(session) {
    const item = el("li", "session-row");
    item.dataset.sessionId = session.id;
    item.dataset.status = session.status;
    if (session.id === view.sessionId) item.setAttribute("aria-current", "true");
    const open = el("button", "session-open");
    open.type = "button";
    const when = new Date(session.updated_at * 1000).toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" });
    open.append(
      el("code", "session-id", session.id.slice(0, 8)),
      el("span", "session-flow", session.flow),
      el("span", `session-status status-${session.status}`, LABELS[session.status] || session.status),
      el("span", "session-facts", `${session.step} · ${plural(session.turns, "turn", "turns")} · ${when}`),
    );
    open.title = `Inspect session ${session.id}`;
    open.addEventListener("click", () => inspect(session.id));
    item.append(open);
    return item;
  }

  function inspect(sessionId) {
    view.following = sessionId === view.chatSession;
    view.sessionId = sessionId;
    view.live = null;
    showTab(false);
    load();
  }

  els.toggle.addEventListener("click", () => setOpen(!view.open));
  els.tabTimeline.addEventListener("click", () => showTab(false));
  els.tabSessions.addEventListener("click", () => showTab(true));
  els.follow.addEventListener("click", () => {
    view.following = true;
    view.sessionId = view.chatSession;
    load();
  });
  els.filters.addEventListener("change", listSessions);
  els.filters.addEventListener("submit", (event) => event.preventDefault());

  return {
    // Whether this page's turns should stream their timeline (`?inspect=true`).
    get wanted() {
      return view.allowed;
    },

    // What GET /v1/me said (null when it could not be asked): the view exists only if it may inspect.
    allow(me, flows) {
      view.allowed = Boolean(me && me.inspect);
      els.toggle.hidden = !view.allowed;
      const known = new Set([...els.flow.options].map((option) => option.value));
      for (const flow of flows) {
        if (!known.has(flow.name)) els.flow.append(new Option(flow.name, flow.name));
      }
      const wanted = new URLSearchParams(location.search).get("inspect");
      const remembered = localStorage.getItem("picoflow.inspect") === "on";
      setOpen(view.allowed && (wanted === "1" || (wanted !== "0" && remembered)));
    },

    // The chat's conversation changed (opened, started anew, created by its first turn).
    follow(sessionId) {
      view.chatSession = sessionId;
      if (!view.following || view.sessionId === sessionId) return;
      view.sessionId = sessionId;
      view.live = null;
      load();
    },

    // This page sends a message (or a decision): its turn shows, empty, until entries come.
    turnStarting(message, trigger = "message") {
      if (!view.allowed || !view.following) return;
      view.live = addTurn({ message, trigger, outcome: "running", entries: [] }, true);
      els.status.textContent = "";
    },

    // One `timeline` event of this page's turn stream.
    live(update) {
      const live = view.live;
      if (!live || !view.following) return;
      if (live.turn.turn !== update.turn) {
        live.turn.turn = update.turn;
        live.head();
      }
      if (update.session_id && !view.sessionId) {
        view.sessionId = view.shown = update.session_id; // a new session: nothing recorded before
        showInspected();
      }
      live.set(update.index, update.entry);
      if (update.entry.kind === "field_set" || update.entry.kind === "field_dropped") live.words();
    },

    // The turn is over: the recorded turn (with its state changes, usage and reply) replaces
    // what came live. ``sessionId`` is the turn's session, known even when a first turn failed.
    async turnEnded(sessionId) {
      const live = view.live;
      view.live = null;
      if (!live) return;
      const number = live.turn.turn;
      // A first turn that failed keeps its session, which the chat does not continue: the view
      // stays on it (why it failed is what a developer wants to see) until the next turn.
      if (view.following && sessionId) view.chatSession = sessionId;
      let replaced = false;
      if (view.open && view.following && sessionId && number) {
        if (sessionId === view.shown) {
          replaced = await replaceTurn(sessionId, number);
        } else { // another session than the one on screen (a first turn): all of it
          view.sessionId = sessionId;
          live.item.remove();
          await load();
          replaced = true;
        }
      }
      if (!replaced) { // refused before it ran (nothing was recorded), or the view is closed
        live.item.remove();
        view.turns = view.turns.filter((shown) => shown !== live);
      }
      watch(); // a first turn's session is now the one shown
      if (view.open && !els.sessions.hidden) listSessions();
    },
  };
}
