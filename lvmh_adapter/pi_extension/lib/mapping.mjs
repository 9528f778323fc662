// pi extension events -> lvmh protocol payloads (the lvmh protocol, "Plugin -> daemon events").
// Pure functions plus one small per-session class for message ids. Nothing here touches I/O.

import { randomUUID } from "node:crypto";

export const PREVIEW_LIMIT = 2048; // tool_execution_end.resultPreview, tool_execution_update.partial
export const MAX_STRING = 64 * 1024; // a single string inside a frame, before the frame is shrunk
export const MAX_FRAME = 1024 * 1024; // a whole frame

/** Concatenated text of pi content: a string, or an array of {type:"text", text} blocks. */
export function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let out = "";
  for (const block of content) {
    if (block && block.type === "text" && typeof block.text === "string") out += block.text;
  }
  return out;
}

export function thinkingText(content) {
  if (!Array.isArray(content)) return null;
  let out = null;
  for (const block of content) {
    if (block && block.type === "thinking" && typeof block.thinking === "string") {
      out = (out ?? "") + block.thinking;
    }
  }
  return out;
}

export function toolCallsOf(content) {
  if (!Array.isArray(content)) return [];
  const calls = [];
  for (const block of content) {
    if (block && block.type === "toolCall") {
      calls.push({
        id: String(block.id ?? ""),
        name: String(block.name ?? ""),
        argsJson: safeStringify(block.arguments ?? {}),
      });
    }
  }
  return calls;
}

export function head(text, limit = PREVIEW_LIMIT) {
  text = text == null ? "" : String(text);
  return text.length > limit ? text.slice(0, limit) : text;
}

export function tail(text, limit = PREVIEW_LIMIT) {
  text = text == null ? "" : String(text);
  return text.length > limit ? text.slice(text.length - limit) : text;
}

/** Text of a tool result / partial result ({content:[...]}, a string, or anything else). */
export function resultText(result) {
  if (result == null) return "";
  if (typeof result === "string") return result;
  if (typeof result === "object" && "content" in result) return contentText(result.content);
  return safeStringify(result);
}

/** The plain text a message carries, for every role pi 1.6.0 knows (and a guess for others). */
export function messageText(message) {
  if (!message || typeof message !== "object") return "";
  switch (message.role) {
    case "bashExecution":
      return typeof message.output === "string" ? message.output : "";
    case "branchSummary":
    case "compactionSummary":
      return typeof message.summary === "string" ? message.summary : "";
    default:
      if ("content" in message) return contentText(message.content);
      if (typeof message.text === "string") return message.text;
      if (typeof message.summary === "string") return message.summary;
      return "";
  }
}

/** lvmh `message_end.message` (spec "Message shape") plus a few optional extras per role. */
export function messageShape(message, id) {
  const role = typeof message?.role === "string" ? message.role : "unknown";
  const shape = {
    role,
    id,
    text: messageText(message),
    thinking: role === "assistant" ? thinkingText(message.content) : null,
    toolCalls: role === "assistant" ? toolCallsOf(message.content) : [],
    toolCallId: message?.toolCallId != null ? String(message.toolCallId) : null,
  };
  if (role === "assistant") {
    if (message.stopReason) shape.stopReason = message.stopReason;
    if (message.errorMessage) shape.errorMessage = String(message.errorMessage);
  } else if (role === "toolResult") {
    if (message.toolName) shape.toolName = message.toolName;
    if (typeof message.isError === "boolean") shape.isError = message.isError;
  } else if (role === "bashExecution") {
    shape.command = message.command ?? null;
    shape.exitCode = message.exitCode ?? null;
  } else if (role === "custom" && message.customType) {
    shape.customType = message.customType;
  }
  return shape;
}

/** agent_end.usage summed over the run's assistant messages. */
export function usageOf(messages) {
  let input = 0;
  let output = 0;
  let cost = 0;
  let seen = false;
  for (const m of Array.isArray(messages) ? messages : []) {
    const u = m && m.role === "assistant" ? m.usage : null;
    if (!u || typeof u !== "object") continue;
    seen = true;
    input += Number(u.input) || 0;
    output += Number(u.output) || 0;
    cost += Number(u.cost?.total) || 0;
  }
  return seen ? { inputTokens: input, outputTokens: output, totalCost: cost } : {};
}

/**
 * Per-session message ids. pi messages carry no id, and the assistant object at message_end is
 * not the one seen at message_start, so an id is opened per role at message_start and taken
 * back at the matching message_end. System messages without text (pi 1.6.0 emits one at the
 * start of every run: the system prompt lives in `sections`) are skipped, start and end alike.
 */
export class MessageIds {
  constructor(newId = randomUUID) {
    this.newId = newId;
    this.open = new Map(); // role -> {id, skip}
  }

  static skip(message) {
    return message?.role === "system" && messageText(message) === "";
  }

  /** Returns {role, id} for message_start, or null when the message is not forwarded. */
  start(message) {
    const role = typeof message?.role === "string" ? message.role : "unknown";
    const skip = MessageIds.skip(message);
    const id = message?.id != null ? String(message.id) : this.newId();
    this.open.set(role, { id, skip });
    return skip ? null : { role, id };
  }

  /** Returns the message shape for message_end, or null when not forwarded. */
  end(message) {
    const role = typeof message?.role === "string" ? message.role : "unknown";
    const opened = this.open.get(role);
    this.open.delete(role);
    if (opened ? opened.skip : MessageIds.skip(message)) return null;
    const id = message?.id != null ? String(message.id) : opened ? opened.id : this.newId();
    return messageShape(message, id);
  }
}

/**
 * JSON.stringify that never throws: BigInt -> string, functions/symbols dropped, repeated or
 * circular objects -> "[Circular]", strings longer than maxString cut with a marker.
 */
export function safeStringify(value, maxString = MAX_STRING) {
  const seen = new WeakSet();
  try {
    const out = JSON.stringify(value, function (_key, v) {
      if (typeof v === "bigint") return v.toString();
      if (typeof v === "string" && v.length > maxString) {
        return v.slice(0, maxString) + `…[truncated ${v.length - maxString} chars]`;
      }
      if (v && typeof v === "object") {
        if (seen.has(v)) return "[Circular]";
        seen.add(v);
      }
      return v;
    });
    return out === undefined ? "null" : out;
  } catch (err) {
    return JSON.stringify(`[unserializable: ${err && err.message}]`);
  }
}

/** Payload object -> JSON text of at most maxFrame chars (shrinking long strings if needed). */
export function payloadJson(payload, maxFrame = MAX_FRAME) {
  let json = safeStringify(payload);
  if (json.length <= maxFrame) return json;
  json = safeStringify(payload, PREVIEW_LIMIT);
  if (json.length <= maxFrame) return json;
  // Still too big (huge arrays/objects): keep the small top-level fields, drop the rest.
  const slim = { truncated: true };
  if (payload && typeof payload === "object") {
    for (const [key, value] of Object.entries(payload)) {
      const part = safeStringify(value, 256);
      slim[key] = part.length <= 4096 ? JSON.parse(part) : "[truncated]";
    }
  }
  return safeStringify(slim);
}
