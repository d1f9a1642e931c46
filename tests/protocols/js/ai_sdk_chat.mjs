// A conversation played with the `ai` package's Chat (AbstractChat, what useChat wraps) over its
// DefaultChatTransport, answering tool approvals with addToolApprovalResponse and sending them on
// with lastAssistantMessageIsCompleteWithApprovalResponses, as the AI SDK documents.
//
// stdin: {"api", "headers", "body", "chatId", "steps": [{"send": text, "files"?, "metadata"?,
//         "stopOn"?} | {"approve": true|false, "reason"?}]}: "stopOn" names a chunk type on which
//         the Chat is stopped (chat.stop(), useChat's stop: the fetch is aborted).
// prints: {"requests": [{"status", "streamHeader", "sent", "chunks"}], "messages", "status",
//          "errors"}: every request the Chat made (the body it sent, the chunks it read), the
//          chat's messages at the end, its status and the errors it reported.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (data) => (text += data));
  process.stdin.on("end", () => resolve(text));
}));

// The Chat's state kept in plain arrays (React and Vue keep it in their own reactive stores).
class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => (this.messages = this.messages.concat(message));
  popMessage = () => (this.messages = this.messages.slice(0, -1));
  replaceMessage = (index, message) =>
    (this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)]);
  snapshot = (value) => structuredClone(value);
}

class NodeChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

const requests = [];

async function recordingFetch(url, init) {
  const request = { sent: JSON.parse(init.body), chunks: [] };
  requests.push(request);
  const response = await fetch(url, init);
  request.status = response.status;
  request.streamHeader = response.headers.get("x-vercel-ai-ui-message-stream");
  return response;
}

// The transport as useChat has it, with each parsed chunk noted on the way to the Chat.
class RecordingTransport extends DefaultChatTransport {
  processResponseStream(stream) {
    const request = requests[requests.length - 1];
    return super.processResponseStream(stream).pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          request.chunks.push(chunk);
          controller.enqueue(chunk);
          if (stopOn !== undefined && chunk.type === stopOn) {
            stopOn = undefined;
            request.stopped = true;
            chat.stop();
          }
        },
      }),
    );
  }
}

const errors = [];
let finished = null;
let stopOn;
const chat = new NodeChat({
  id: input.chatId,
  transport: new RecordingTransport({
    api: input.api,
    headers: input.headers,
    body: input.body,
    fetch: recordingFetch,
  }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (error) => errors.push(error.message),
  onFinish: () => finished?.(),
});

for (const step of input.steps) {
  if ("send" in step) {
    stopOn = step.stopOn;
    await chat.sendMessage({ text: step.send, files: step.files, metadata: step.metadata });
    continue;
  }
  const waiting = chat.messages
    .flatMap((message) => message.parts)
    .filter((part) => part.state === "approval-requested");
  if (waiting.length === 0) throw new Error("no tool part waits for approval");
  const done = new Promise((resolve) => (finished = resolve));
  for (const part of waiting) {
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: step.approve, reason: step.reason });
  }
  // The Chat sends the answers by itself once every approval of the step has one.
  if (chat.status === "submitted" || chat.status === "streaming") await done;
  finished = null;
}

console.log(JSON.stringify({ requests, messages: chat.messages, status: chat.status, errors }));
