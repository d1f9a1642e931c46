// @ag-ui/client's HttpAgent against a live picoflow server, as an AG-UI frontend uses it.
//
//   node ag_ui_client.mjs <scenario> <url> <api key> <thread id> [message ...]
//
// scenario "chat": one run per message, all in the thread (the agent keeps the messages, as a chat
// UI does). scenario "approval": the message's run ends with an interrupt; the next run resumes it
// with {"decision": "approve"}; the same resume sent once more must be refused. scenario "abort":
// as "chat", but the first run is aborted (agent.abortRun(), a UI's stop button) as soon as its
// first TOOL_CALL_RESULT arrives.
//
// Prints one JSON document: each run's events (as received), what the run resolved to or the
// error it failed with, the agent's messages, state and pending interrupts after each run, and
// every warning the client wrote (it warns about anything in a stream it does not recognise).
import { HttpAgent } from "@ag-ui/client";

const [scenario, url, key, threadId, ...texts] = process.argv.slice(2);
const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
  warn(...args);
};

const agent = new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${key}` } });
const runs = [];

async function run(parameters, abortOn) {
  const events = [];
  const record = { events };
  try {
    const result = await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        events.push(event);
        if (event.type === abortOn) {
          record.aborted = true;
          agent.abortRun();
        }
      },
    });
    record.newMessages = result.newMessages;
  } catch (error) {
    record.error = { status: error.status ?? null, message: String(error.message ?? error) };
  }
  record.messages = structuredClone(agent.messages);
  record.state = structuredClone(agent.state);
  record.pendingInterrupts = structuredClone(agent.pendingInterrupts);
  runs.push(record);
  return record;
}

let n = 0;
function say(text) {
  n += 1;
  agent.addMessage({ id: `user-${n}`, role: "user", content: text });
}

if (scenario === "chat" || scenario === "abort") {
  for (const [index, text] of texts.entries()) {
    say(text);
    await run(undefined, scenario === "abort" && index === 0 ? "TOOL_CALL_RESULT" : undefined);
  }
} else if (scenario === "approval") {
  say(texts[0]);
  const asked = await run();
  const resume = asked.pendingInterrupts.map((interrupt) => ({
    interruptId: interrupt.id,
    status: "resolved",
    payload: { decision: "approve", reason: "yes, refund it" },
  }));
  await run({ resume });
  await run({ resume }); // the same decision again: decided already
} else {
  throw new Error(`unknown scenario ${scenario}`);
}

console.log(JSON.stringify({ runs, warnings }));
