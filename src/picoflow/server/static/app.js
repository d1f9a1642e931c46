// The picoflow chat page: plain JavaScript modules talking to the /v1 API, no build step. The files
// sent with messages live in attachments.js, the developer view (a session's timeline) in
// inspector.js.
//
// Safety rule of this file: text from the user or the model is only ever inserted with
// textContent. The one exception is HTML the server produced for us (replies rendered with
// ?render=html, and the flow diagram), which the server escapes; the page's Content Security
// Policy blocks inline scripts as a second line of defence.
import { DEFAULT_LIMITS, createPicker, messageFiles } from "./attachments.js";
import { createInspector } from "./inspector.js";

const config = JSON.parse(document.getElementById("picoflow-config").textContent);
const $ = (id) => document.getElementById(id);
const els = {
  flow: $("flow-select"), description: $("flow-description"), messages: $("messages"),
  busy: $("busy"), busyText: $("busy-text"), completed: $("completed"), error: $("error"),
  composer: $("composer"), input: $("input"), send: $("send"), newChat: $("new-chat"),
  attach: $("attach"), fileInput: $("file-input"), chips: $("attachment-chips"), dropHint: $("drop-hint"),
  restart: $("restart"), auth: $("auth"), apiKey: $("api-key"), diagram: $("diagram"),
  modelStatus: $("model-status"), modelStatusText: $("model-status-text"), modelProgress: $("model-progress"),
  step: $("current-step"), status: $("session-status"), turns: $("turns"), sessionId: $("session-id"),
  withStaff: $("with-staff"), staff: $("staff"), staffEmpty: $("staff-empty"), queue: $("handoff-queue"),
  usage: {
    input: $("usage-input"), cached: $("usage-cached"), output: $("usage-output"), total: $("usage-total"),
    calls: $("usage-calls"), tools: $("usage-tools"),
  },
};
const state = {
  flows: [], flow: null, sessionId: null, busy: false, completed: false,
  // While a person has the conversation: the last message seq read, and the staff replies shown.
  after: -1, staffShown: new Set(), watching: null,
};
const OPEN_STATUSES = ["running", "awaiting_approval", "awaiting_human"];
// A session's status as the page says it (the API's names are for code and the developer view).
const STATUS_WORDS = {
  new: "Not started",
  running: "In progress",
  awaiting_approval: "Waiting for approval",
  awaiting_human: "With our team",
  completed: "Complete",
  aborted: "Ended",
};
const statusWords = (status) => STATUS_WORDS[status] || "In progress";
const picker = createPicker({
  button: els.attach, input: els.fileInput, chips: els.chips, dropZone: els.messages.closest("main"),
  dropHint: els.dropHint, textarea: els.input, limits: { ...DEFAULT_LIMITS, ...config.attachmentLimits },
  say: showError,
});
const inspector = createInspector({ api, stream: streamEvents });
const shownFiles = messageFiles(async (url) => {
  const response = await fetch(url, { headers: headers() });
  if (!response.ok) throw await failure(response);
  return response.blob();
});

// --- HTTP -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `request failed (${status})`);
    this.status = status;
    this.kind = (error && error.kind) || "http_error";
    this.sessionId = (error && error.session_id) || null; // a failed first turn keeps its session
  }
}

function headers(extra) {
  const all = { ...extra };
  const key = sessionStorage.getItem("picoflow.apiKey");
  if (key) all.Authorization = `Bearer ${key}`;
  return all;
}

async function failure(response) {
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  if (response.status === 401) els.auth.hidden = false;
  return new ApiError(response.status, body && body.error);
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

// Server-Sent Events over a POST (EventSource can only GET).
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

// A GET event stream, read to its end or until ``signal`` aborts it.
async function streamEvents(path, onEvent, signal) {
  const response = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal, cache: "no-store" });
  if (!response.ok) throw await failure(response);
  await readEvents(response, onEvent);
}

// --- rendering --------------------------------------------------------------------------------

function addMessage(role, { text = "", html = null, extraClass = "", files = [] } = {}) {
  const item = document.createElement("li");
  item.className = `message ${role} ${extraClass}`.trim();
  const bubble = document.createElement("div");
  bubble.className = "bubble";
  if (html !== null) {
    bubble.classList.add("rendered");
    bubble.innerHTML = html; // server-rendered, escaped HTML (see the note at the top)
  } else {
    bubble.textContent = text;
  }
  if (files.length) bubble.prepend(shownFiles.render(files));
  item.append(bubble);
  els.messages.append(item);
  scrollToEnd();
  return bubble;
}

function clearMessages() {
  els.messages.replaceChildren();
  state.after = -1;
  state.staffShown.clear();
  shownFiles.release();
  clearApprovals();
}

function scrollToEnd() {
  els.messages.scrollTop = els.messages.scrollHeight;
}

function showError(message) {
  els.error.textContent = message;
  els.error.hidden = !message;
}

function setBusy(busy, text = "Thinking…") {
  state.busy = busy;
  els.busy.hidden = !busy;
  els.busyText.textContent = text;
  document.body.classList.toggle("is-busy", busy);
  updateControls();
}

function updateControls() {
  const blocked = state.busy || state.completed || !state.flow;
  els.input.disabled = blocked;
  els.send.disabled = blocked;
  picker.setEnabled(!blocked);
  els.flow.disabled = state.busy;
  els.newChat.disabled = state.busy;
  els.completed.hidden = !state.completed;
  updateApprovalControls();
  // Showing or hiding the banner resizes the message list; keep the latest reply in view.
  scrollToEnd();
  if (!blocked) els.input.focus();
}

function showUsage(usage) {
  const u = usage || {};
  els.usage.input.textContent = u.input_tokens || 0;
  els.usage.cached.textContent = u.cached_input_tokens || 0; // read from the provider's prompt cache
  els.usage.output.textContent = u.output_tokens || 0;
  els.usage.total.textContent = u.total_tokens || 0;
  els.usage.calls.textContent = u.model_calls || 0;
  els.usage.tools.textContent = u.tool_calls || 0;
}

function showSession(session) {
  els.step.textContent = session ? session.step : (state.flow ? state.flow.start : "–");
  els.status.textContent = statusWords(session ? session.status : "new");
  els.turns.textContent = session ? session.turns : 0;
  els.sessionId.textContent = session ? session.id : "–";
  showUsage(session && session.usage);
  // A session waiting for an approval takes messages too (one withdraws what waits), and one
  // waiting for a person takes them for staff.
  state.completed = Boolean(session && !OPEN_STATUSES.includes(session.status));
  const withStaff = Boolean(session && session.status === "awaiting_human");
  els.withStaff.hidden = !withStaff;
  if (withStaff) watchStaffReplies();
  updateControls();
}

// The diagram and the current step name the flow's steps and transitions as its code does: they are
// shown to a caller who may inspect (a developer), not to a guest.
const developer = () => !caller || caller.inspect === true;

async function showDiagram() {
  if (!state.flow || !developer()) return;
  const path = state.sessionId
    ? `/v1/sessions/${encodeURIComponent(state.sessionId)}/diagram.svg`
    : `/v1/flows/${encodeURIComponent(state.flow.name)}/diagram.svg?step=${encodeURIComponent(state.flow.start)}`;
  try {
    els.diagram.innerHTML = await api(path); // server-made SVG, text escaped
  } catch (error) {
    els.diagram.textContent = "";
  }
}

// A transcript holds what the runtime and the model said to each other too (tool results,
// corrections, forwarded and crossing messages, structured answers, the runs of sub-steps); the
// chat shows only what the user typed and what they were sent, as the server marks it.
function visible(message) {
  return message.shown === true;
}

// --- approvals --------------------------------------------------------------------------------
//
// A call the model proposed to a tool that needs a person's approval does not run: the turn ends
// with it pending, and the page shows a card for it in the conversation, where the call was
// proposed. Its summary was written by the flow's code; its arguments came from the model, so
// every value goes in with textContent like any model text. A decision answers as a turn: the
// resumed turn's reply follows as an assistant message, and the card shows the outcome.

const cards = new Map(); // approval id -> { item, approval }
let caller = null; // GET /v1/me: who this page's caller is (null: an older server, which did not say)

// Whether this page's caller is among those ``approval`` names, so that its buttons mean something.
// The page only opens its caller's own conversations, so "the customer" is the caller. Only what is
// offered follows from this: the decision route refuses anyone else whatever the page shows.
function mayDecide(approval) {
  if (!caller || !Array.isArray(caller.roles)) return true;
  const who = approval.approvers;
  return who.principal || who.roles.some((role) => caller.roles.includes(role));
}

// Who decided, in words for the person reading: a principal is an id of the server's (an API key's
// name, "local" for the open development server), never shown; the caller is "you", anyone else
// the approvers as the card describes them.
function decider(approval) {
  if (caller && approval.decided_by && approval.decided_by === caller.principal) return "you";
  return approval.approvers.description;
}

const OUTCOMES = {
  expired: () => "Expired before anyone decided it",
  withdrawn: () => "Withdrawn: the conversation moved on",
  approved: (a) => `Approved by ${decider(a)}${a.reason ? `: ${a.reason}` : ""}`,
  denied: (a) => `Denied by ${decider(a)}${a.reason ? `: ${a.reason}` : ""}`,
};

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function argumentValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// An argument's name as a person reads it: "room_type" and "roomType" read "Room type".
function readableName(name) {
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/[_\-\s]+/g, " ")
    .trim()
    .toLowerCase();
  return words ? words[0].toUpperCase() + words.slice(1) : name;
}

// Each argument under the label its tool gives it (``Field(title=...)``), else its name made readable.
function argumentsTable(args, labels) {
  const table = element("table", "approval-args");
  const body = document.createElement("tbody");
  for (const [name, value] of Object.entries(args || {})) {
    const row = document.createElement("tr");
    const label = (labels && labels[name]) || readableName(name);
    row.append(element("th", "", label), element("td", "", argumentValue(value)));
    body.append(row);
  }
  table.append(body);
  return table;
}

function expiresText(approval) {
  const when = new Date(approval.expires_at * 1000);
  return `Expires ${when.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })}`;
}

function createCard(approval) {
  const item = element("li", "message approval");
  item.dataset.approvalId = approval.id;
  const card = element("div", "card");
  card.append(
    element("p", "approval-title", "Approval needed"),
    element("p", "approval-summary", approval.summary),
    argumentsTable(approval.args, approval.labels),
    element("p", "approval-who", `Must be approved by ${approval.approvers.description}`),
    element("p", "approval-expires", expiresText(approval)),
  );
  const actions = element("form", "approval-actions");
  const approve = element("button", "approve", "Approve");
  approve.type = "button";
  const reason = element("input", "approval-reason");
  reason.type = "text";
  reason.maxLength = 2000;
  reason.placeholder = "Reason (optional)";
  reason.setAttribute("aria-label", "Reason for the decision");
  const deny = element("button", "deny", "Deny");
  deny.type = "submit";
  actions.append(approve, reason, deny);
  approve.addEventListener("click", () => decideApproval(approval.id, "approve", reason.value));
  actions.addEventListener("submit", (event) => {
    event.preventDefault();
    decideApproval(approval.id, "deny", reason.value);
  });
  const outcome = element("p", "approval-outcome");
  outcome.setAttribute("role", "status");
  const error = element("p", "approval-error");
  error.setAttribute("role", "alert");
  error.hidden = true;
  card.append(actions, outcome, error);
  item.append(card);
  els.messages.append(item);
  return item;
}

// The card of ``approval`` as it stands now (created at the end of the conversation if new).
function showApproval(approval) {
  let known = cards.get(approval.id);
  if (!known) {
    known = { item: createCard(approval), approval };
    cards.set(approval.id, known);
    scrollToEnd();
  }
  known.approval = approval;
  const { item } = known;
  const pending = approval.status === "pending";
  const offered = mayDecide(approval);
  item.dataset.status = approval.status;
  item.querySelector(".approval-actions").hidden = !pending || !offered;
  item.querySelector(".approval-who").textContent = pending && !offered
    ? `Waiting for approval by ${approval.approvers.description}`
    : `Must be approved by ${approval.approvers.description}`;
  item.querySelector(".approval-expires").hidden = !pending;
  item.querySelector(".approval-title").textContent = pending ? "Approval needed" : "Approval";
  item.querySelector(".approval-outcome").textContent = pending ? "" : OUTCOMES[approval.status](approval);
  updateApprovalControls();
}

function showApprovalError(approvalId, message) {
  const known = cards.get(approvalId);
  if (!known) return;
  const error = known.item.querySelector(".approval-error");
  error.textContent = message || "";
  error.hidden = !message;
}

function updateApprovalControls() {
  for (const { item } of cards.values()) {
    for (const control of item.querySelectorAll("button, input")) control.disabled = state.busy;
  }
}

function clearApprovals() {
  cards.clear();
}

// A transcript's approvals, each placed after the assistant message that proposed its call.
function placeApprovals(message, waiting) {
  for (const call of message.tool_calls || []) {
    const index = waiting.findIndex((a) => a.call_id === call.id && a.tool === call.name && a.step === message.step);
    if (index >= 0) showApproval(waiting.splice(index, 1)[0]);
  }
}

async function syncApprovals() {
  if (!state.sessionId) return;
  try {
    const approvals = await api(`/v1/sessions/${encodeURIComponent(state.sessionId)}/approvals`);
    for (const approval of approvals) showApproval(approval);
  } catch (error) {
    // The cards keep what they showed; a reload asks again.
  }
}

async function decideApproval(approvalId, decision, reason) {
  if (state.busy || !state.sessionId) return;
  showError("");
  showApprovalError(approvalId, "");
  setBusy(true, decision === "approve" ? "Approving…" : "Denying…");
  const path = `/v1/sessions/${encodeURIComponent(state.sessionId)}/approvals/${encodeURIComponent(approvalId)}?render=html${timelineQuery()}`;
  const body = { decision, reason: reason.trim() || null, stream: true };
  let live = null;
  const kept = [];
  inspector.turnStarting(`${decision} ${approvalId}`, "decision");
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
    });
    if (!response.ok) throw await failure(response);
    let failed = null;
    let result = null;
    await readEvents(response, (name, data) => {
      ({ live, failed, result } = turnEvent(name, data, { live, kept, failed, result }));
    });
    if (failed) throw failed;
    if (result) await showResult(result, kept);
  } catch (error) {
    if (live) live.closest("li").remove();
    for (const bubble of kept) bubble.closest("li").remove();
    // Refused (not allowed, decided already, expired...): nothing ran; the card says why. A turn
    // that failed after the decision (the model unavailable...) shows in the conversation too.
    showApprovalError(approvalId, error.message || "The decision failed.");
    if (!(error.status < 500)) {
      addMessage("assistant", { text: error.message || "The request failed.", extraClass: "failed" });
    }
  } finally {
    setBusy(false);
  }
  await afterTurn(state.sessionId);
}

// --- a person has the conversation -----------------------------------------------------------
//
// When the flow hands the conversation to a person, the user's messages go to staff and staff
// replies come into the transcript, not as answers to the page's own requests: the page asks for
// the messages after the last one it read (GET /v1/sessions/{id}/messages?after=SEQ), which works
// whichever server process staff used, until the conversation is handed back.

function addStaffMessage(message) {
  state.staffShown.add(message.seq);
  const bubble = addMessage("assistant", { text: message.content, extraClass: "staff" });
  bubble.prepend(element("span", "staff-author", `${message.author || "Staff"} (staff)`));
  return bubble;
}

async function watchStaffReplies() {
  const sessionId = state.sessionId;
  if (!sessionId || state.watching === sessionId) return;
  state.watching = sessionId;
  try {
    while (state.sessionId === sessionId) {
      const path = `/v1/sessions/${encodeURIComponent(sessionId)}/messages?after=${state.after}`;
      let body = null;
      try {
        body = await api(path);
      } catch (error) {
        if (error.status === 404) return;
      }
      if (state.sessionId !== sessionId) return;
      if (body) {
        for (const message of body.messages) {
          state.after = Math.max(state.after, message.seq);
          if (message.kind === "staff" && !state.staffShown.has(message.seq)) addStaffMessage(message);
        }
        if (body.status !== "awaiting_human") {
          await refreshSession(); // handed back: the model answers again
          return;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  } finally {
    if (state.watching === sessionId) state.watching = null;
  }
}

// --- the staff queue ----------------------------------------------------------------------------
//
// For a caller with the staff visibility (GET /v1/handoffs answers, not 403), a panel lists the
// conversations waiting for a person with the summary the flow's code wrote; "Take" assigns one,
// then its messages show, a reply box writes as staff, and "Hand back" returns it to the flow.

const desks = new Map(); // session id -> { item, after }
let me = null; // the principal the server knows this page's key as (learnt from a take)

function createDesk(handoff) {
  const item = element("li", "handoff");
  item.dataset.sessionId = handoff.session_id;
  const title = `Conversation ${handoff.session_id.slice(0, 8)}`;
  item.setAttribute("aria-label", title);
  const meta = element("p", "handoff-meta");
  const summary = element("pre", "handoff-summary");
  const take = element("button", "take", "Take");
  take.type = "button";
  take.addEventListener("click", () => takeHandoff(handoff.session_id));
  const desk = element("div", "handoff-desk");
  desk.hidden = true;
  const log = element("ol", "handoff-messages");
  log.setAttribute("aria-label", `${title}: messages`);
  const form = element("form", "handoff-reply");
  const text = element("textarea", "staff-text");
  text.rows = 2;
  text.setAttribute("aria-label", "Reply as staff");
  const actions = element("div", "handoff-actions");
  const send = element("button", "staff-send", "Send as staff");
  send.type = "submit";
  const back = element("button", "hand-back", "Hand back");
  back.type = "button";
  back.addEventListener("click", () => handBack(handoff.session_id));
  actions.append(send, back);
  form.append(text, actions);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    replyAsStaff(handoff.session_id, text);
  });
  desk.append(log, form);
  const error = element("p", "handoff-error");
  error.setAttribute("role", "alert");
  error.hidden = true;
  item.append(meta, summary, take, desk, error);
  els.queue.append(item);
  const known = { item, after: -1 };
  desks.set(handoff.session_id, known);
  return known;
}

function showHandoff(handoff) {
  const known = desks.get(handoff.session_id) || createDesk(handoff);
  const { item } = known;
  const taken = handoff.taken_by ? `taken by ${handoff.taken_by}` : "waiting";
  item.querySelector(".handoff-meta").textContent = `${handoff.flow} · from ${handoff.step} · ${taken}`;
  item.querySelector(".handoff-summary").textContent = handoff.summary;
  const mine = me !== null && handoff.taken_by === me;
  item.querySelector(".take").hidden = mine;
  item.querySelector(".handoff-desk").hidden = !mine;
  if (mine) readDesk(handoff.session_id);
}

function showDeskError(sessionId, message) {
  const known = desks.get(sessionId);
  if (!known) return;
  const error = known.item.querySelector(".handoff-error");
  error.textContent = message || "";
  error.hidden = !message;
}

async function readDesk(sessionId) {
  const known = desks.get(sessionId);
  if (!known || known.reading) return;
  known.reading = true;
  try {
    const body = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/messages?after=${known.after}`);
    const log = known.item.querySelector(".handoff-messages");
    for (const message of body.messages) {
      if (message.seq <= known.after) continue;
      known.after = message.seq;
      const who = message.role === "user" ? "User" : message.kind === "staff" ? `${message.author} (staff)` : "Assistant";
      log.append(element("li", message.role === "user" ? "from-user" : "from-us", `${who}: ${message.content}`));
    }
  } catch (error) {
    // Handed back or gone: the queue's next refresh removes it.
  } finally {
    known.reading = false;
  }
}

async function refreshQueue() {
  let queue;
  try {
    queue = await api("/v1/handoffs");
  } catch (error) {
    if (error.status === 403 || error.status === 401) {
      els.staff.hidden = true;
      return false;
    }
    return true; // the server is restarting: ask again
  }
  els.staff.hidden = false;
  const present = new Set(queue.map((handoff) => handoff.session_id));
  for (const [sessionId, known] of desks) {
    if (!present.has(sessionId)) {
      known.item.remove();
      desks.delete(sessionId);
    }
  }
  for (const handoff of queue) showHandoff(handoff);
  els.staffEmpty.hidden = queue.length > 0;
  return true;
}

async function watchQueue() {
  if (await refreshQueue()) setTimeout(watchQueue, POLL_MS);
}

async function staffAction(sessionId, path, body) {
  showDeskError(sessionId, "");
  try {
    return await api(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (error) {
    showDeskError(sessionId, error.message || "The request failed.");
    return null;
  }
}

async function takeHandoff(sessionId) {
  const taken = await staffAction(sessionId, `/v1/handoffs/${encodeURIComponent(sessionId)}/take`, {});
  if (!taken) return;
  me = taken.taken_by;
  showHandoff(taken);
}

async function replyAsStaff(sessionId, textarea) {
  const text = textarea.value.trim();
  if (!text) return;
  const sent = await staffAction(sessionId, `/v1/handoffs/${encodeURIComponent(sessionId)}/messages`, { text });
  if (!sent) return;
  textarea.value = "";
  await readDesk(sessionId);
}

async function handBack(sessionId) {
  const back = await staffAction(sessionId, `/v1/handoffs/${encodeURIComponent(sessionId)}/return`, {});
  if (!back) return;
  await refreshQueue();
}

// --- the model loading ------------------------------------------------------------------------
//
// Until the server's model is loaded (downloaded, checked, read by llama.cpp), a line says how far
// it is. The message box stays usable: a message sent meanwhile waits on the server, whose event
// stream then reports the same status.

const POLL_MS = 1000;

function showModelStatus(status) {
  const hidden = !status || status.status === "ready" || status.phase === "idle";
  els.modelStatus.hidden = hidden;
  if (hidden) return;
  els.modelStatus.classList.toggle("failed", status.status === "failed");
  els.modelStatusText.textContent = status.message;
  const measured = status.total > 0 && (status.phase === "downloading" || status.phase === "checking");
  els.modelProgress.hidden = !measured;
  if (measured) {
    els.modelProgress.max = status.total;
    els.modelProgress.value = status.done || 0;
  }
}

async function watchReadiness() {
  let status = null;
  try {
    const response = await fetch("/readyz", { headers: headers(), cache: "no-store" });
    status = await response.json();
  } catch (_) {
    // The server is restarting or unreachable: ask again.
  }
  if (status) showModelStatus(status);
  if (!status || (status.status !== "ready" && status.status !== "failed")) {
    setTimeout(watchReadiness, POLL_MS);
  }
}

// --- sessions ---------------------------------------------------------------------------------

const storageKey = () => `picoflow.session.${state.flow.name}`;

function remember(sessionId) {
  state.sessionId = sessionId;
  if (sessionId) localStorage.setItem(storageKey(), sessionId);
  else localStorage.removeItem(storageKey());
  inspector.follow(sessionId);
}

async function refreshSession() {
  if (!state.sessionId) return showSession(null);
  const session = await api(`/v1/sessions/${encodeURIComponent(state.sessionId)}?transcript=false`);
  showSession(session);
}

async function openFlow(name) {
  state.flow = state.flows.find((flow) => flow.name === name) || state.flows[0] || null;
  if (!state.flow) return;
  els.flow.value = state.flow.name;
  localStorage.setItem("picoflow.flow", state.flow.name);
  els.description.textContent = state.flow.description || "";
  clearMessages();
  showError("");
  state.sessionId = localStorage.getItem(storageKey());
  if (state.sessionId) {
    try {
      const session = await api(`/v1/sessions/${encodeURIComponent(state.sessionId)}?render=html`);
      const waiting = [...session.approvals];
      for (const message of session.transcript) {
        state.after = Math.max(state.after, message.seq);
        if (visible(message)) {
          if (message.role === "user") addMessage("user", { text: message.content, files: message.attachments });
          else if (message.kind === "staff") addStaffMessage(message);
          else addMessage("assistant", { html: message.html });
        }
        if (message.role === "assistant" && !message.within) placeApprovals(message, waiting);
      }
      for (const approval of waiting) showApproval(approval);
      showSession(session);
    } catch (error) {
      if (error.status !== 404) showError(error.message);
      remember(null);
      showSession(null);
    }
  } else {
    showSession(null);
  }
  inspector.follow(state.sessionId);
  await showDiagram();
}

function newConversation() {
  if (state.busy) return;
  remember(null);
  clearMessages();
  showError("");
  showSession(null);
  showDiagram();
}

// --- a turn -----------------------------------------------------------------------------------

// The text kept from a tool call arrived as plain streamed text; once the turn is stored, show it
// as the server renders it (Markdown), exactly as a reload will.
// A turn that ended waiting for approvals stored no reply after them.
async function renderKept(kept, waiting) {
  try {
    const session = await api(`/v1/sessions/${encodeURIComponent(state.sessionId)}?render=html`);
    const replies = session.transcript.filter(visible).filter((message) => message.role !== "user");
    const turn = waiting ? replies.slice(-kept.length) : replies.slice(-(kept.length + 1), -1);
    if (turn.length !== kept.length) return;
    turn.forEach((message, index) => {
      kept[index].classList.add("rendered");
      kept[index].innerHTML = message.html; // server-rendered, escaped HTML (see the note at the top)
    });
  } catch (error) {
    // The plain text stays on the page; a reload shows it rendered.
  }
}

// What the server refuses to take (a file too large or of the wrong kind, a malformed message):
// nothing ran and nothing was stored, so the message goes back into the composer to be fixed.
const REFUSED = [413, 415, 422];

// A turn with files goes as multipart/form-data (each file a part, as it is: no base64), one
// without as JSON; both are streamed.
function turnBody(text, files) {
  if (!files.length) {
    const body = JSON.stringify({ message: text, stream: true });
    return { headers: { "Content-Type": "application/json" }, body };
  }
  const form = new FormData();
  form.append("message", text);
  form.append("stream", "true");
  for (const file of files) form.append("attachments", file, file.name);
  return { headers: {}, body: form }; // the browser writes the multipart Content-Type and boundary
}

async function sendMessage(typed, text, files) {
  showError("");
  const question = addMessage("user", { text, files });
  setBusy(true);
  inspector.turnStarting(text);
  let turnSession = state.sessionId;
  const path = state.sessionId
    ? `/v1/sessions/${encodeURIComponent(state.sessionId)}/turns?render=html${timelineQuery()}`
    : `/v1/flows/${encodeURIComponent(state.flow.name)}/sessions?render=html${timelineQuery()}`;
  let live = null;
  // Text the model wrote alongside a tool call stays on the page, as the stored transcript shows
  // it after a reload; it goes again if the turn fails, since a failed turn stores nothing.
  const kept = [];
  try {
    const turn = turnBody(text, files);
    const response = await fetch(path, {
      method: "POST",
      headers: headers({ ...turn.headers, Accept: "text/event-stream" }),
      body: turn.body,
    });
    if (!response.ok) throw await failure(response);
    let failed = null;
    let result = null;
    await readEvents(response, (name, data) => {
      ({ live, failed, result } = turnEvent(name, data, { live, kept, failed, result }));
    });
    if (failed) throw failed;
    if (result) {
      turnSession = result.session_id;
      await showResult(result, kept);
    }
  } catch (error) {
    turnSession = error.sessionId || turnSession;
    if (live) live.closest("li").remove();
    for (const bubble of kept) bubble.closest("li").remove();
    if (REFUSED.includes(error.status)) {
      question.closest("li").remove();
      els.input.value = typed;
      picker.restore(files);
      showError(error.message);
    } else {
      addMessage("assistant", { text: error.message || "The request failed.", extraClass: "failed" });
    }
    if (error.kind === "session_not_found") remember(null);
  } finally {
    setBusy(false);
  }
  await afterTurn(turnSession);
}

// A caller who may inspect asks for the turn's timeline in its stream, for the developer view.
function timelineQuery() {
  return inspector.wanted ? "&inspect=true" : "";
}

// One event of a turn's stream (a message's, or a decision's): what is on screen follows it.
function turnEvent(name, data, turn) {
  let { live, failed, result } = turn;
  if (name === "timeline") { // only to a caller who may inspect: the developer view's
    inspector.live(data);
    return { live, failed, result };
  }
  if (name === "status") {
    showModelStatus(data);
    setBusy(true, "Waiting for the model…");
    return { live, failed, result };
  }
  // Any other event means the model is ready (or the turn is over).
  if (name !== "error") showModelStatus(null);
  if ((name === "tool_call" || name === "approval_requested") && live) {
    live.closest("li").classList.remove("streaming");
    turn.kept.push(live);
    live = null;
  }
  // Steps and tools are named in code: the line under the conversation says only that work goes on
  // (the developer view names them).
  if (name === "step" && data.parent) {
    setBusy(true, "Working…"); // a sub-step: the conversation stays where it is
  } else if (name === "step") {
    els.step.textContent = data.step;
    setBusy(true, "Working…");
  } else if (name === "tool_call") {
    setBusy(true, "Working…");
  } else if (name === "approval_requested" || name === "approval_decided") {
    if (!data.parent) showApproval(data);
  } else if (name === "text") {
    live = live || addMessage("assistant", { extraClass: "streaming" });
    live.textContent += data.text;
    scrollToEnd();
  } else if (name === "result") {
    if (live) live.closest("li").remove();
    live = null;
    result = data;
  } else if (name === "error") {
    failed = new ApiError(data.status, data.error);
  }
  return { live, failed, result };
}

// The turn's result: its reply, or (when it waits for approvals) their cards, which say it all.
async function showResult(result, kept) {
  remember(result.session_id);
  const waiting = result.pending && result.pending.length > 0;
  if (waiting) for (const approval of result.pending) showApproval(approval);
  else if (!(result.awaiting_human && !result.message)) addMessage("assistant", { html: result.html });
  if (kept.length) await renderKept(kept, waiting);
}

async function afterTurn(turnSession) {
  await inspector.turnEnded(turnSession);
  try {
    await refreshSession();
  } catch (error) {
    showError(error.message);
  }
  await syncApprovals();
  await showDiagram();
}

// --- wiring -----------------------------------------------------------------------------------

els.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = els.input.value.trim();
  if (state.busy || state.completed) return;
  if (!text) {
    if (picker.files().length) showError("Write a message to go with the files.");
    return;
  }
  if (text.length > config.maxMessageChars) {
    showError(`Messages are limited to ${config.maxMessageChars} characters.`);
    return;
  }
  const typed = els.input.value;
  els.input.value = "";
  sendMessage(typed, text, picker.take());
});
els.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    els.composer.requestSubmit();
  }
});
els.flow.addEventListener("change", () => openFlow(els.flow.value));
els.newChat.addEventListener("click", newConversation);
els.restart.addEventListener("click", newConversation);
els.auth.addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("picoflow.apiKey", els.apiKey.value.trim());
  els.auth.hidden = true;
  start();
});

async function start() {
  try {
    state.flows = await api("/v1/flows");
  } catch (error) {
    showError(error.status === 401 ? "Enter an API key to use this server." : error.message);
    return;
  }
  els.flow.replaceChildren(...state.flows.map((flow) => {
    const option = document.createElement("option");
    option.value = flow.name;
    option.textContent = flow.name;
    return option;
  }));
  const wanted = new URLSearchParams(location.search).get("flow")
    || localStorage.getItem("picoflow.flow") || config.defaultFlow;
  caller = null;
  try {
    caller = await api("/v1/me");
  } catch (_) {
    // An older server, or none: no developer view, and every approval card offers its buttons.
  }
  inspector.allow(caller, state.flows);
  for (const node of [els.diagram, els.step, els.step.previousElementSibling]) node.hidden = !developer();
  await openFlow(wanted);
  document.body.dataset.ready = "true";
  watchQueue();
}

if (config.authRequired && !sessionStorage.getItem("picoflow.apiKey")) els.auth.hidden = false;
watchReadiness();
start();
