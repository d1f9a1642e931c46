// One request as useChat sends it, read with the `ai` package's own reader: DefaultChatTransport
// posts the messages (its body: {...body, id, messages, trigger, messageId}) and parses the answer
// with the SDK's chunk schema; readUIMessageStream folds the chunks into the assistant UIMessage.
//
// stdin: {"api", "headers", "body", "chatId", "messages", "trigger"?, "messageId"?}, or
//        {"raw": text}: a stream a test read itself, parsed by the transport all the same.
// prints: {"status", "streamHeader", "contentType", "chunks", "message", "errors"} or, when the
//         request is refused, {"status", "error"} (the response's text, as the SDK reports it).
import { DefaultChatTransport, readUIMessageStream } from "ai";

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (data) => (text += data));
  process.stdin.on("end", () => resolve(text));
}));

const seen = {};
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  seen.status = response.status;
  seen.streamHeader = response.headers.get("x-vercel-ai-ui-message-stream");
  seen.contentType = response.headers.get("content-type");
  return response;
}

const transport = new DefaultChatTransport({
  api: input.api,
  headers: input.headers,
  body: input.body,
  fetch: recordingFetch,
});

async function send() {
  if (input.raw !== undefined) {
    const bytes = new TextEncoder().encode(input.raw);
    const body = new ReadableStream({ start: (controller) => (controller.enqueue(bytes), controller.close()) });
    return transport.processResponseStream(body);
  }
  return transport.sendMessages({
    chatId: input.chatId,
    messages: input.messages,
    trigger: input.trigger ?? "submit-message",
    messageId: input.messageId,
    abortSignal: undefined,
  });
}

let stream;
try {
  stream = await send();
} catch (error) {
  console.log(JSON.stringify({ status: seen.status, error: error.message }));
  process.exit(0);
}

const [forChunks, forMessage] = stream.tee();
const chunks = [];
const reading = (async () => {
  for await (const chunk of forChunks) chunks.push(chunk);
})();
const errors = [];
let message = null;
for await (const snapshot of readUIMessageStream({ stream: forMessage, onError: (e) => errors.push(e.message) })) {
  message = snapshot;
}
await reading;
console.log(JSON.stringify({ ...seen, chunks, message, errors }));
